#!/usr/bin/env bash
# Everything the GPU programs must show on a GPU machine, in one call:
#   build -> GPU tests -> the suite t01..t30 through fa run -> the course submission ->
#   the submission as the course builds it (nvcc -std=c++11, this GPU's arch for sm_61) on both
#   suites and fa init's starter on t01 (course) ->
#   compute-sanitizer (memcheck, racecheck, synccheck; SANITIZE_TOOLS) -> every row of t27 and
#   t28 (dense) -> benchmark -> per-chunk trace -> the judge: the planted students' programs and
#   what checking every value costs on suite c (BEFORE_FA=a folder with an older fa_cli, to time
#   its fa run beside this one's).
# Usage: scripts/device_check.sh [build tests suite submission sanitize dense bench trace judge ...]   (default: all)
# BENCH_AGAINST=PATH adds another build of fa-cuda (an older commit, say) to the benchmark,
# measured side by side with this one.
# Logs go to /tmp/fa-logs, packed at the end into $LOG/logs.tgz beside the benchmark's results,
# markdown table and charts (few files, for machines that return only a handful); the last lines
# printed are a summary.
# No package registry is needed: the machine's python3 must already have numpy, click, rich,
# matplotlib, pytest (and torch for the comparison).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fa-device}
LOG=/tmp/fa-logs
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 FA_CACHE=${FA_CACHE:-/tmp/fa-cache}
mkdir -p "$OUT" "$LOG" "$FA_CACHE"
fa() { python3 -m fa_cli "$@"; }
steps=${*:-build tests suite submission course sanitize dense bench trace judge}
summary=()
note() { summary+=("$1"); echo "== $1"; }

for step in $steps; do
  case $step in
  build)
    nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$LOG/gpu.txt"
    make -s cpu cuda hip-cuda 2>&1 | tee "$LOG/build.log"
    fa devices | tee "$LOG/devices.txt"
    note "build: $(ls bin | tr '\n' ' ')"
    ;;
  tests)
    python3 -m pytest -q -m gpu tests 2>&1 | tee "$LOG/pytest-gpu.log"
    note "gpu tests: $(tail -1 "$LOG/pytest-gpu.log")"
    ;;
  suite)
    for prog in ${SUITE_PROGRAMS:-cuda hip-cuda}; do
      fa run --all --program "$prog" --tol 1e-4 2>&1 | tee "$LOG/suite-$prog.log"
      note "suite $prog: $(grep -v " cases: " "$LOG/suite-$prog.log" | grep -c PASS) of 30 PASS at 1e-4"
    done
    ;;
  submission)
    # The single files the course takes, built by their own Makefile for this GPU; judged on the
    # whole suite and compared byte for byte with bin/fa-cuda on every case.
    sm=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    [ "$sm" = sm_90 ] && sm=sm_90a  # as the Makefile builds Hopper: with its wgmma kernel
    make -s submission && make -s -C submission hw4 CUDA_ARCH=$sm 2>&1 | tee "$LOG/submission-build.log"
    fa run --all --program submission/hw4 --tol 1e-4 2>&1 | tee "$LOG/suite-submission.log"
    note "suite submission/hw4 ($sm): $(grep -v " cases: " "$LOG/suite-submission.log" | grep -c PASS) of 30 PASS at 1e-4"
    same=0
    for c in $(seq -f 't%02g' 1 30); do
      f=testcases/$c.in; [ -f "$f" ] || f=$FA_CACHE/$c.in
      submission/hw4 "$f" /tmp/sub.out && bin/fa-cuda "$f" /tmp/cuda.out && cmp -s /tmp/sub.out /tmp/cuda.out &&
        same=$((same + 1))
    done
    note "submission/hw4 and bin/fa-cuda byte-identical on $same of 30 cases"
    ;;
  course)
    # hw4.cu as a student uploads it without a Makefile: the course's example line, word for word
    # but the arch (this GPU's in place of the GTX 1080's sm_61); judged on fa's 30 cases and the
    # course's 30 shapes. Then fa init's starter, built by its Makefile, on t01.
    sm=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    rm -rf /tmp/course && mkdir -p /tmp/course && make -s submission SUBMISSION=/tmp/course/sub
    (cd /tmp/course/sub && nvcc -std=c++11 -O3 -Xptxas="-v" -arch=$sm -o hw4 hw4.cu -lm) >"$LOG/course-build.log" 2>&1
    note "course line (-std=c++11 -arch=$sm): rc=$? $(grep -c 'error' "$LOG/course-build.log") errors"
    for s in t c; do
      fa run --all --suite $s --program /tmp/course/sub/hw4 -o "$LOG/course-$s.json" 2>&1 | tee "$LOG/course-$s.log"
      times=$(python3 - "$LOG/course-$s.json" <<'PY'
import json, sys
print(" ".join(f"{r['input']}={r['wall_s']:.2f}" for r in json.load(open(sys.argv[1]))["records"]))
PY
)
      note "course-line hw4, suite $s: $(grep -v " cases: " "$LOG/course-$s.log" | grep -c PASS) of 30 PASS; whole process (s): $times"
    done
    fa init /tmp/course/starter >/dev/null && make -s -C /tmp/course/starter hw4 CUDA_ARCH=$sm >/dev/null 2>&1
    fa run t01 c01 --program /tmp/course/starter/hw4 2>&1 | tee "$LOG/course-starter.log"
    note "fa init starter ($sm): $(grep -v " cases: " "$LOG/course-starter.log" | grep -c PASS) of 2 PASS (t01 c01)"
    ;;
  sanitize)
    fa gen -B 2 -N 257 -d 64 --seed 3 -o /tmp/san64.in >/dev/null
    fa gen -B 3 -N 100 -d 32 --seed 4 -o /tmp/san32.in >/dev/null
    fa gen -B 3 -N 77 -d 64 --seed 5 -o /tmp/san64-short.in >/dev/null  # wgmma's fused-split variant at d = 64
    # program:VARIABLE=value: every kernel family of each program's registry (--kernels; with a
    # ladder step's settings, such as the HIP tile widths), the mma.sync splits, the small simt
    # tile and the ways in of fa-cuda's input (SANITIZE_EXTRA adds more, paths too; several
    # variables: joined by commas)
    families=$(for prog in fa-cuda fa-hip-cuda; do
      bin/$prog --kernels | awk -F'\t' -v p=$prog 'NR > 1 && $2 !~ /^ladder-/ {
        split($6, rung, "|"); env = rung[4]; gsub(/ /, ",", env)
        run = p ":FA_KERNEL=" $2 (env != "" ? "," env : ""); if (!seen[run]++) print run }'
    done)
    for run in $families fa-cuda:FA_TC_SPLIT=prepass fa-cuda:FA_TC_SPLIT=fused fa-cuda:FA_SIMT_SMALL=1 \
        fa-cuda:FA_INPUT=read fa-cuda:FA_INPUT=refused fa-cuda:FA_INPUT=refused-later ${SANITIZE_EXTRA:-}; do
      prog=${run%%:*} setting=${run#*:}
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        files="/tmp/san64.in /tmp/san32.in"
        [ "$setting" = FA_KERNEL=wgmma ] && files+=" /tmp/san64-short.in"
        for f in $files; do
          case $prog in */*) path=$prog ;; *) path=bin/$prog ;; esac
          log="$LOG/sanitize-${prog//\//-}-${setting//[=,]/-}-$tool-$(basename $f .in).log"
          env ${setting//,/ } compute-sanitizer --tool $tool --error-exitcode 9 "$path" $f /tmp/san.out >"$log" 2>&1
          note "sanitizer $tool $prog $setting $(basename $f): rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
        done
      done
    done
    ;;
  bench)
    shapes=(--shape 26,32768,64 --shape 52,32768,32 --shape 64,4096,64 --shape 512,1024,32 --shape 13000,128,32)
    rm -f "$LOG/bench.json"
    # the program as built (its default kernel), beside BENCH_AGAINST if given
    fa bench --program cuda ${BENCH_AGAINST:+--program "$BENCH_AGAINST"} "${shapes[@]}" --repeat ${REPEAT:-3} \
      -o "$LOG/bench.json" 2>&1 | tee -a "$LOG/bench.log"
    # each whole kernel of fa-cuda's registry under its own label (as make results measures them)
    measured=$(python3 -c 'from fa_cli.programs import registry; from pathlib import Path
print(" ".join(registry.measured_families(registry.kernels_of(Path("bin/fa-cuda")))))')
    for kernel in ${BENCH_KERNELS:-$measured}; do
      FA_KERNEL=$kernel fa bench --program cuda --label "cuda-$kernel" "${shapes[@]}" --repeat ${REPEAT:-3} \
        -o "$LOG/bench.json" 2>&1 | tee -a "$LOG/bench.log"
    done
    fa bench --program hip-cuda "${shapes[@]}" --repeat ${REPEAT:-3} -o "$LOG/bench.json" 2>&1 | tee -a "$LOG/bench.log"
    fa bench --program torch --label torch-sdpa-fp32 "${shapes[@]}" --repeat ${REPEAT:-3} -o "$LOG/bench.json" 2>&1 | tee -a "$LOG/bench.log"
    fa compare "$LOG/bench.json" --markdown --plot "$LOG/bench.png" | tee "$LOG/compare.md"
    note "bench: see compare.md"
    ;;
  dense)
    # Every row of t27 and t28 against float64 (torch on the GPU), the default kernel's output;
    # the lines also go into docs/kernels.md (copied to the logs).
    files=()
    for c in t27 t28; do
      f=testcases/$c.in; [ -f "$f" ] || f=$FA_CACHE/$c.in
      [ -f "$f" ] || fa run $c --program cuda >/dev/null  # puts the case in the cache
      bin/fa-cuda "$f" /tmp/dense-$c.out && files+=("$f" /tmp/dense-$c.out)
    done
    python3 scripts/dense_error.py "${files[@]}" --docs 2>&1 | tee "$LOG/dense.log"
    cp docs/kernels.md "$LOG/"
    note "dense error: $(grep -c . "$LOG/dense.log") lines; $(tr '\n' ' ' <"$LOG/dense.log" | cut -c1-300)"
    ;;
  trace)
    # Per-chunk trace (FA_TIMING=2) and wall time of the whole process, page-cached input.
    for shape in 26,32768,64 13000,128,32; do
      IFS=, read -r B N d <<<"$shape"
      f=$FA_CACHE/uniform-B$B-N$N-d$d-s0.in
      [ -f "$f" ] || fa gen -B $B -N $N -d $d -o "$f" >/dev/null
      cat "$f" >/dev/null
      for i in 1 2 3; do  # the output exists from the second run on, as in repeated judging
        wall=$(python3 -c 'import subprocess, sys, time; t = time.perf_counter(); subprocess.run(sys.argv[1:], check=True); print(f"{time.perf_counter() - t:.3f}")' \
          env FA_TIMING=2 bin/fa-cuda "$f" /tmp/trace.out 2>"$LOG/trace-$shape.log")
        note "trace $shape run $i: wall $wall s; $(grep fa-timing "$LOG/trace-$shape.log")"
      done
    done
    ;;
  judge)
    # Each planted class named (tests/test_cause_gpu.py), then suite c: expected outputs computed
    # the first time and compared once cached (scripts/judge_cost.py), and the whole of
    # `fa run --all --suite c` with the expected outputs cold, cached, and with BEFORE_FA's fa.
    python3 -m pytest -q -s tests/test_cause_gpu.py 2>&1 | tee "$LOG/cause-gpu.log"
    note "planted programs: $(tail -1 "$LOG/cause-gpu.log")"
    python3 scripts/judge_cost.py --suite c --program cuda -o "$LOG/judge-cost.json" 2>&1 | tee "$LOG/judge-cost.log"
    note "judge cost: $(grep -E '^expected outputs|^compare of every' "$LOG/judge-cost.log" | tr '\n' ' ')"
    # timed LOG COMMAND...: the command's output to LOG, its wall time printed
    timed() { python3 -c 'import subprocess, sys, time; t = time.perf_counter(); r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT); print(f"{time.perf_counter() - t:.1f} s, exit {r.returncode}")' "$@"; }
    rm -rf "$FA_CACHE/expected"
    note "fa run --all --suite c, expected outputs computed: $(timed "$LOG/run-c-cold.log" python3 -m fa_cli run --all --suite c --program cuda)"
    note "fa run --all --suite c, cached: $(timed "$LOG/run-c-cached.log" python3 -m fa_cli run --all --suite c --program cuda)"
    if [ -n "${BEFORE_FA:-}" ]; then
      here=$PWD  # run from BEFORE_FA's folder, so that python3 -m fa_cli imports its fa_cli
      note "fa run --all --suite c, fa before ($BEFORE_FA): $(cd "$BEFORE_FA" && PYTHONPATH=.:$PYTHONPATH timed "$LOG/run-c-before.log" python3 -m fa_cli run --all --suite c --program "$here/bin/fa-cuda")"
    fi
    ;;
  *) echo "unknown step $step"; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" >"$LOG/summary.txt"
tar czf "$OUT/logs.tgz" -C /tmp fa-logs
cp "$LOG"/bench*.png "$LOG/bench.json" "$LOG/compare.md" "$OUT/" 2>/dev/null
echo; echo "==== summary"; cat "$LOG/summary.txt"
