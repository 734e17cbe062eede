#!/usr/bin/env bash
# On a device of two GPUs or more: the class as class.sh judges it, on the first GPU, and beside it,
# on each other GPU, fa run of each student named (alone.sh, the students shared among them), paused
# while the class's searches go on; once the class has ended another alone.sh on the first GPU shares
# the rest; all in sessions of their own that outlive this call; then class_wait.sh for up to SECONDS
# (default 560), which brings back both.
set -uo pipefail
source "$(dirname "$0")/env.sh"
seconds=${1:-560}; shift
make -s cpu >/dev/null 2>&1
rm -rf /tmp/class /tmp/class.end /tmp/class.searching /tmp/alone /tmp/alone.end /tmp/alone-cache*
date +%s > /tmp/class.start
CUDA_VISIBLE_DEVICES=0 setsid bash -c 'python3 -m fa_cli class .device/class -o /tmp/class --all --suite c \
  > /tmp/class.log 2>&1; echo "rc=$?" >> /tmp/class.log; date +%s > /tmp/class.end.new; mv /tmp/class.end.new /tmp/class.end' </dev/null &
gpus=$(nvidia-smi -L | wc -l)
for gpu in $(seq 1 $((gpus - 1))); do  # alone.log: the first sequence's (class_wait.sh looks for it)
  CUDA_VISIBLE_DEVICES=$gpu ALONE_CACHE=/tmp/alone-cache$gpu setsid bash "$(dirname "$0")/alone.sh" "$@" </dev/null \
    > "/tmp/alone$( [ "$gpu" = 1 ] || echo "$gpu").log" 2>&1 &
done
CUDA_VISIBLE_DEVICES=0 AFTER_CLASS=1 ALONE_CACHE=/tmp/alone-cache0 setsid bash "$(dirname "$0")/alone.sh" "$@" \
  </dev/null > /tmp/alone0.log 2>&1 &
exec bash "$(dirname "$0")/class_wait.sh" "$seconds"
