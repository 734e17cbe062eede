#!/usr/bin/env bash
# On the device, started by class_and_alone.sh: each named student's program judged by fa run alone
# (suite c, confined, on this process's GPU: CUDA_VISIBLE_DEVICES), one after another, as the class
# judges it; with a cache of its own (ALONE_CACHE) that holds the class's inputs and expected outputs
# (linked, once the class has made them) and nothing else of the class's (builds, race checks).
# Never beside the class's searches (a few dozen sanitizers on the host's cores): no run starts while
# they go on, and a run they overlapped is judged again. AFTER_CLASS=1: starts once the class has
# ended (a second sequence, on the class's GPU). The sequences side by side share the list: each
# student is claimed once (a folder made). Each student's records, words and exit status in
# /tmp/alone; /tmp/alone.end once every student has them.
set -uo pipefail
source "$(dirname "$0")/env.sh"
export FA_CACHE=${ALONE_CACHE:-/tmp/alone-cache}
until grep -q "^fa: judging" /tmp/class.log 2>/dev/null; do sleep 2; done  # the class's cases made
if [ "${AFTER_CLASS:-0}" = 1 ]; then
  until [ -f /tmp/class.end ]; do sleep 2; done
else  # when the class's searches began: /tmp/class.searching
  ( until grep -q "then the searches" /tmp/class.log 2>/dev/null || [ -f /tmp/class.end ]; do sleep 1; done
    date +%s > /tmp/class.searching.new && mv /tmp/class.searching.new /tmp/class.searching ) &  # whole when seen
fi
mkdir -p "$FA_CACHE" /tmp/alone
cp -al /tmp/class/cache/c*.in /tmp/class/cache/stamps /tmp/class/cache/expected "$FA_CACHE"/ 2>/dev/null
searching() { [ -f /tmp/class.searching ] && [ ! -f /tmp/class.end ]; }
overlapped() {  # START END: the run's span met the class's searches
  local from; from=$(cat /tmp/class.searching 2>/dev/null) || return 1
  [ "$2" -gt "$from" ] && { [ ! -f /tmp/class.end ] || [ "$1" -lt "$(cat /tmp/class.end)" ]; }
}
left() { for s in "$@"; do [ -f "/tmp/alone/$s.rc" ] || echo "$s"; done; }
while [ -n "$(left "$@")" ]; do
  claimed=0
  for student in $(left "$@"); do
    mkdir "/tmp/alone/$student.claim" 2>/dev/null || continue
    claimed=1
    while searching; do sleep 2; done
    source=$(ls .device/class/"$student"/hw4.cu .device/class/"$student"/hw4.hip 2>/dev/null | head -1)
    start=$(date +%s)
    env -u COLUMNS python3 -m fa_cli run --all --suite c --sandbox --keep-inputs --program "$source" \
      -o "/tmp/alone/$student.json" > "/tmp/alone/$student.words" 2> "/tmp/alone/$student.errors"
    code=$?; end=$(date +%s)
    if overlapped "$start" "$end"; then  # judged again, by whichever sequence claims it next
      echo "$student: $start..$end overlapped the class's searches" >> /tmp/alone/overlapped.log
      rm -f "/tmp/alone/$student.json"; rmdir "/tmp/alone/$student.claim"; continue
    fi
    echo "$code $(( end - start )) ${CUDA_VISIBLE_DEVICES:-}" > "/tmp/alone/$student.rc"
  done
  [ "$claimed" = 1 ] || break  # the rest claimed by the other sequence
done
[ -n "$(left "$@")" ] || date +%s > /tmp/alone.end
