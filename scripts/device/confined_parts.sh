#!/usr/bin/env bash
# On the device: fa init's starter built for this GPU, then where a confined run of it on t01 and
# c05 goes (scripts/device/confined_parts.py, REPEAT runs each way, default 7).
set -uo pipefail
source "$(dirname "$0")/env.sh"
make -s cpu >/dev/null 2>&1
fa init /tmp/parts >/dev/null && nvcc -std=c++11 -O3 -arch=sm_90 -o /tmp/parts/hw4 /tmp/parts/hw4.cu || exit 1
fa gen t01 c05 >/dev/null
for case in t01 c05; do
  echo "== $case"; python3 scripts/device/confined_parts.py /tmp/parts/hw4 testcases/$case.in "${1:-7}" | cut -c1-400
done
