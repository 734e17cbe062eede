#!/usr/bin/env bash
# On the device: the whole class (.device/class) judged on suite c, confined, started in a session
# of its own so that it outlives this call; then class_wait.sh for up to SECONDS (default 560).
set -uo pipefail
source "$(dirname "$0")/env.sh"
make -s cpu >/dev/null 2>&1
rm -rf /tmp/class /tmp/class.end
date +%s > /tmp/class.start
setsid bash -c 'python3 -m fa_cli class .device/class -o /tmp/class --all --suite c > /tmp/class.log 2>&1;
  echo "rc=$?" >> /tmp/class.log; date +%s > /tmp/class.end.new; mv /tmp/class.end.new /tmp/class.end' </dev/null &
exec bash "$(dirname "$0")/class_wait.sh" "${1:-560}"
