#!/usr/bin/env bash
# On the device: what a passing build's check costs, tool by tool (racecheck, synccheck, initcheck
# on 2x256xd and memcheck on 2x200xd, a partial tile's N, at each d given): wall seconds and the CPU
# seconds (user + system) of each compute-sanitizer run alone, then the four side by side. CPU
# seconds near wall seconds mean a run is held by the host's CPU, not the GPU. With SIDE_BY_SIDE=K
# (a list: SIDE_BY_SIDE="1 4 12"), then at the first d K of those four-tool groups side by side, K
# plain runs, K racechecks, as K programs' checks meet in fa class's searches: near K times one's
# wall means they are served one after another (the GPU's time slices, the driver or the host),
# near one's wall that they share well (each plain run starts a CUDA context of its own, as every
# run of a search does). Set CUDA_VISIBLE_DEVICES as fa class's runs have it.
# Usage: sanitizer_cost.sh SOURCE.cu [D...] (default d: 32 64). Log: $OUT/sanitizer-cost.log.
set -uo pipefail
source "$(dirname "$0")/env.sh"
source_file=$1; shift
work=/tmp/sanitizer-cost && mkdir -p "$work"
nvcc -O3 -g -lineinfo -std=c++17 -arch=sm_90 -o "$work/prog" "$source_file" -lm || exit 1
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timed() {  # LABEL COMMAND...: one line, wall and CPU seconds of COMMAND (its children's included)
  local TIMEFORMAT="$1: wall %R s, cpu %U + %S s"
  time "${@:2}" >/dev/null 2>&1
}
ds=("$@"); [ ${#ds[@]} -gt 0 ] || ds=(32 64)
{
  for d in "${ds[@]}"; do
    for n in 256 200; do fa gen -B 2 -N $n -d $d -o "$work/2x${n}x$d.in" >/dev/null; done
    timed "d=$d plain run" "$work/prog" "$work/2x256x$d.in" "$work/out"
    for tool in racecheck synccheck initcheck memcheck; do
      n=$([ $tool = memcheck ] && echo 200 || echo 256)
      timed "d=$d $tool" "$sanitizer" --tool $tool --print-limit 100 "$work/prog" "$work/2x${n}x$d.in" "$work/out-$tool"
    done
    start=$(date +%s%N)
    for tool in racecheck synccheck initcheck memcheck; do
      n=$([ $tool = memcheck ] && echo 200 || echo 256)
      "$sanitizer" --tool $tool --print-limit 100 "$work/prog" "$work/2x${n}x$d.in" "$work/side-$tool" >/dev/null 2>&1 &
    done
    wait
    echo "d=$d the four side by side: wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
  done
  for k in ${SIDE_BY_SIDE:-}; do
    d=${ds[0]}; start=$(date +%s%N); TIMEFORMAT="$k groups of four side by side at d=$d: wall %R s, cpu %U + %S s"
    time {
      for i in $(seq "$k"); do
        for tool in racecheck synccheck initcheck memcheck; do
          n=$([ $tool = memcheck ] && echo 200 || echo 256)
          "$sanitizer" --tool $tool --print-limit 100 "$work/prog" "$work/2x${n}x$d.in" "$work/g$i-$tool" >/dev/null 2>&1 &
        done
      done
      wait
    }
    TIMEFORMAT="$k plain runs side by side at d=$d: wall %R s, cpu %U + %S s"
    time {
      for i in $(seq "$k"); do "$work/prog" "$work/2x256x$d.in" "$work/p$i" >/dev/null 2>&1 & done
      wait
    }
    TIMEFORMAT="$k racechecks side by side at d=$d: wall %R s, cpu %U + %S s"
    time {
      for i in $(seq "$k"); do
        "$sanitizer" --tool racecheck --print-limit 100 "$work/prog" "$work/2x256x$d.in" "$work/r$i" >/dev/null 2>&1 &
      done
      wait
    }
  done
  echo "cores: $(nproc)"
} 2>&1 | tee "$OUT/sanitizer-cost.log"
