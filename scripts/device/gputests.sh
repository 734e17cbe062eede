#!/usr/bin/env bash
# On the device: build, then every GPU test but test_programs.py (4 at a time), then
# test_programs.py with the time left of SECONDS (default 540). Logs: $OUT/gpu-*.log.
set -uo pipefail
source "$(dirname "$0")/env.sh"
start=$(date +%s); budget=${1:-540}
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
make -s -j16 cpu cuda hip-cuda 2>&1 | tail -5
timeout $((budget - 150)) python3 -m pytest -q -m gpu tests --ignore tests/test_programs.py -n 4 -p no:cacheprovider \
  --durations=20 -rfEs 2>&1 | tee "$OUT/gpu-rest.log" | tail -40
left=$((budget - ($(date +%s) - start)))
[ $left -gt 30 ] && timeout $left python3 -m pytest -q -m gpu tests/test_programs.py -n 8 -p no:cacheprovider -rfE \
  2>&1 | tee "$OUT/gpu-programs.log" | tail -15
echo "== total $(( $(date +%s) - start )) s"
