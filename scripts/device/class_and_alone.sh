#!/usr/bin/env bash
# On a device of two GPUs: the class as class.sh judges it, on the first GPU, and beside it, on the
# second, fa run of each student named (alone.sh), both in sessions of their own that outlive this
# call; then class_wait.sh for up to SECONDS (default 560), which brings back both.
set -uo pipefail
source "$(dirname "$0")/env.sh"
seconds=${1:-560}; shift
make -s cpu >/dev/null 2>&1
rm -rf /tmp/class /tmp/class.end /tmp/alone /tmp/alone.end /tmp/alone-cache
date +%s > /tmp/class.start
CUDA_VISIBLE_DEVICES=0 setsid bash -c 'python3 -m fa_cli class .device/class -o /tmp/class --all --suite c \
  > /tmp/class.log 2>&1; echo "rc=$?" >> /tmp/class.log; date +%s > /tmp/class.end' </dev/null &
CUDA_VISIBLE_DEVICES=1 setsid bash "$(dirname "$0")/alone.sh" "$@" </dev/null > /tmp/alone.log 2>&1 &
exec bash "$(dirname "$0")/class_wait.sh" "$seconds"
