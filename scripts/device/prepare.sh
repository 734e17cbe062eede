#!/usr/bin/env bash
# Here, before a GPU session: what the device machine lacks, into the git-ignored .device/ (name it
# in the device tool's carry): fa's wheels it has not (platformdirs, copydetect) and bubblewrap's
# binary (fa run --sandbox, fa class). The class folder (.device/class: one folder a student) is
# made from the course's public solutions, /work/shared/course-solutions.csv, each repository
# fetched with the library's fetch and its file taken at its commit (git show).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .device/whl .device/bwrap/bin
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .device/whl platformdirs copydetect
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download bubblewrap >/dev/null && dpkg -x bubblewrap_*.deb root)
cp "$tmp"/root/usr/bin/bwrap .device/bwrap/bin/
ls -R .device | head -20
