#!/usr/bin/env bash
# On the device: waits up to SECONDS (default 560) for the class class.sh started (and for alone.sh,
# where class_and_alone.sh started it beside); says where it is,
# and once it has ended brings back its log, table and records ($OUT/class.log, $OUT/class.tgz); and
# what alone.sh has judged so far, where it ran ($OUT/alone.tgz).
set -uo pipefail
source "$(dirname "$0")/env.sh"
deadline=$(( $(date +%s) + ${1:-560} ))
running() { [ ! -f /tmp/class.end ] || { [ -f /tmp/alone.log ] && [ ! -f /tmp/alone.end ]; }; }
while running && [ "$(date +%s)" -lt $deadline ]; do sleep 5; done
if [ -f /tmp/class.end ]; then
  echo "== class: $(( $(cat /tmp/class.end) - $(cat /tmp/class.start) )) s start to end"
  cp /tmp/class.log "$OUT/"
  tar -czf "$OUT/class.tgz" -C /tmp/class class.csv class.json records reports 2>/dev/null
  grep -v "^fa: \(building\|judging\|looking\)" /tmp/class.log | tail -c 9000
fi
if [ -f /tmp/alone.log ]; then
  echo "== alone: $(ls /tmp/alone/*.rc 2>/dev/null | wc -l) judged$( [ -f /tmp/alone.end ] && echo ', all')"
  tar -czf "$OUT/alone.tgz" -C /tmp alone alone.log $(cd /tmp && ls alone[0-9]*.log 2>/dev/null) 2>/dev/null
fi
if [ ! -f /tmp/class.end ]; then
  echo "== still running at $(( $(date +%s) - $(cat /tmp/class.start) )) s"; tail -c 1500 /tmp/class.log
fi
