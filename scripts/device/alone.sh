#!/usr/bin/env bash
# On the device, started by class_and_alone.sh: each named student's program judged by fa run alone
# (suite c, confined, on this process's GPU: CUDA_VISIBLE_DEVICES), one after another, as the class
# judges it; with a cache of its own that holds the class's inputs and expected outputs (linked, once
# the class has made them) and nothing else of the class's (builds, race checks). Each student's
# records, words and exit status in /tmp/alone; /tmp/alone.end once all are done.
set -uo pipefail
source "$(dirname "$0")/env.sh"
export FA_CACHE=${ALONE_CACHE:-/tmp/alone-cache}  # another for each alone.sh side by side
until grep -q "^fa: judging" /tmp/class.log 2>/dev/null; do sleep 2; done  # the class's cases made
mkdir -p "$FA_CACHE" /tmp/alone
cp -al /tmp/class/cache/c*.in /tmp/class/cache/stamps /tmp/class/cache/expected "$FA_CACHE"/
for student in "$@"; do
  source=$(ls .device/class/"$student"/hw4.cu .device/class/"$student"/hw4.hip 2>/dev/null | head -1)
  start=$(date +%s)
  env -u COLUMNS python3 -m fa_cli run --all --suite c --sandbox --keep-inputs --program "$source" \
    -o "/tmp/alone/$student.json" > "/tmp/alone/$student.words" 2> "/tmp/alone/$student.errors"
  echo "$? $(( $(date +%s) - start ))" > "/tmp/alone/$student.rc"
done
date +%s > /tmp/alone.end
