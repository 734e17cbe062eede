#!/usr/bin/env bash
# On the device: what confining a run costs: fa init's starter on t01..t08, unconfined and
# --sandbox, each twice (the first builds: a confined build is a build of its own).
set -uo pipefail
source "$(dirname "$0")/env.sh"
make -s cpu >/dev/null 2>&1
fa init /tmp/starter >/dev/null
for way in "" "" "--sandbox" "--sandbox"; do
  t0=$(date +%s%N)
  timeout 60 python3 -m fa_cli run t01 t02 t03 t04 t05 t06 t07 t08 --program /tmp/starter/hw4.cu --no-race-check \
    $way >/tmp/confined.log 2>&1
  echo "fa run ${way:-unconfined}: rc=$? $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(tail -1 /tmp/confined.log)"
done
