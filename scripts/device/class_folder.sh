#!/usr/bin/env bash
# Here: the class folder .device/class from the course's public solutions, once each repository of
# /work/shared/course-solutions.csv is fetched into /work/.mirror/OWNER+NAME/repo (the library's
# fetch): each file at its commit, named hw4 and its suffix, with the Makefile beside it where there
# is one, in a folder of its owner; and five planted programs (set4's a03, a04, a08, a10.hip;
# tests/data/planted_hw4.cu).
set -euo pipefail
cd "$(dirname "$0")/../.."
csv=${1:-/work/shared/course-solutions.csv} mirror=${2:-/work/.mirror}
grep -v '^#' "$csv" | tail -n +2 | while IFS=, read -r repository path commit; do
  owner=${repository%%/*}
  mkdir -p ".device/class/$owner"
  git --git-dir="$mirror/${repository/\//+}/repo" show "$commit:$path" > ".device/class/$owner/hw4.${path##*.}"
  # the Makefile beside it, where the student's folder has one: part of the submission (a C++17 build)
  git --git-dir="$mirror/${repository/\//+}/repo" show "$commit:$(dirname "$path")/Makefile" \
    > ".device/class/$owner/Makefile" 2>/dev/null || rm -f ".device/class/$owner/Makefile"
done
sets=tests/data/planted_sets/set4
for name in a03.cu a04.cu a08.cu a10.hip; do
  mkdir -p ".device/class/planted-${name%.*}" && cp "$sets/$name" ".device/class/planted-${name%.*}/hw4.${name##*.}"
done
mkdir -p .device/class/planted-hw4 && cp tests/data/planted_hw4.cu .device/class/planted-hw4/hw4.cu
ls .device/class | wc -l
