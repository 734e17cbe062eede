#!/usr/bin/env bash
# On the device: waits up to SECONDS (default 560) for the class class.sh started; says where it is,
# and once it has ended brings back its log, table and records ($OUT/class.log, $OUT/class.tgz).
set -uo pipefail
source "$(dirname "$0")/env.sh"
deadline=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/class.end ] && [ "$(date +%s)" -lt $deadline ]; do sleep 5; done
if [ -f /tmp/class.end ]; then
  echo "== class: $(( $(cat /tmp/class.end) - $(cat /tmp/class.start) )) s start to end"
  cp /tmp/class.log "$OUT/"
  tar -czf "$OUT/class.tgz" -C /tmp/class class.csv class.json records reports 2>/dev/null
  grep -v "^fa: \(building\|judging\|looking\)" /tmp/class.log | tail -c 9000
else
  echo "== still running at $(( $(date +%s) - $(cat /tmp/class.start) )) s"; tail -c 1500 /tmp/class.log
fi
