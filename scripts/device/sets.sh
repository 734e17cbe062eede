#!/usr/bin/env bash
# On the device: every program of planted sets judged through fa run on the sets' six shapes (t01
# t02 t04 t09 and drawn 1x200x64, 3x200x32), AT_ONCE side by side (default 6), each set bounded by
# BOUND seconds (default 280: two waves of six programs, the slowest near two minutes; a program the
# bound stops says so in its log). Logs: $OUT/SETNAME.tgz. Usage: sets.sh SET_DIR [SET_DIR...]
set -uo pipefail
source "$(dirname "$0")/env.sh"
start=$(date +%s)
make -s cpu >/dev/null 2>&1
mkdir -p /tmp/shapes /tmp/sets
fa gen -B 1 -N 200 -d 64 -o /tmp/shapes/1x200x64.in >/dev/null && fa gen -B 3 -N 200 -d 32 -o /tmp/shapes/3x200x32.in >/dev/null
fa gen t01 t02 t04 t09 >/dev/null
judge() {
  local prog=$1 log=/tmp/sets/$(basename "$(dirname "$1")")/$(basename "$1").log
  mkdir -p "$(dirname "$log")"
  local t0=$(date +%s)
  python3 -m fa_cli run t01 t02 t04 t09 /tmp/shapes/1x200x64.in /tmp/shapes/3x200x32.in --program "$prog" >"$log" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s" >>"$log"
}
export -f judge
for set in "$@"; do
  name=$(basename "$set")
  ls "$set"/*.cu "$set"/*.hip | timeout "${BOUND:-280}" xargs -P "${AT_ONCE:-6}" -I{} bash -c 'judge {}'
  tar -czf "$OUT/$name.tgz" -C /tmp/sets "$name"
  echo "== $name judged at $(( $(date +%s) - start )) s"; tail -qn1 /tmp/sets/$name/*.log
done
