#!/usr/bin/env bash
# On the device: the GPU tests of the parts changed since the last GPU session (TESTS, pytest node
# ids), then the programs of .device/recheck judged as sets.sh judges a set; logs in $OUT. One after
# the other: beside the set's six fa runs, the tests' timed runs went over their limits.
set -uo pipefail
source "$(dirname "$0")/env.sh"
make -s cpu >/dev/null 2>&1
python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider -rfE $TESTS > "$OUT/recheck-tests.log" 2>&1
tail -25 "$OUT/recheck-tests.log"
BOUND=${BOUND:-200} bash "$(dirname "$0")/sets.sh" .device/recheck
