#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests and for trying the cluster
# workflow without a cluster: partitions `nvidia` and `amd` on localhost, munge authentication,
# ports 16817/16818, everything under $FA_SLURM_DIR (default /tmp/fa-slurm). Needs root and
# Debian's slurm-wlm and munge.
#   scripts/slurm_local.sh start   # prints the line to export SLURM_CONF
#   scripts/slurm_local.sh stop
set -euo pipefail
# The daemons (slurmctld, slurmd, munged) live in sbin, which a plain user's PATH leaves out.
PATH=$PATH:/usr/sbin:/sbin
D=${FA_SLURM_DIR:-/tmp/fa-slurm}
CONF=$D/slurm.conf
HOST=$(hostname -s)

stop() {
  for pidfile in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

start() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null || { echo "slurm_local: slurm-wlm and munge are not installed" >&2; exit 1; }
  stop
  mkdir -p "$D/state" "$D/spool" "$D/munge" /run/munge
  [ -f "$D/munge/munge.key" ] || dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
  chmod 700 "$D/munge"; chmod 400 "$D/munge/munge.key"
  munged --force --key-file "$D/munge/munge.key" --socket /run/munge/munge.socket.2 \
    --pid-file "$D/munged.pid" --log-file "$D/munged.log" --seed-file "$D/munge/seed"
  cat >"$CONF" <<CONF
ClusterName=fa-local
SlurmctldHost=$HOST
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmdSpoolDir=$D/spool
StateSaveLocation=$D/state
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
NodeName=$HOST CPUs=$(nproc) State=UNKNOWN
PartitionName=nvidia Nodes=$HOST Default=YES MaxTime=30 State=UP
PartitionName=amd Nodes=$HOST MaxTime=30 State=UP
CONF
  export SLURM_CONF=$CONF
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  for _ in $(seq 1 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.5
  done
  echo "slurm_local: the cluster did not come up; see $D/slurmctld.log and $D/slurmd.log" >&2
  tail -3 "$D/slurmctld.log" "$D/slurmd.log" >&2 || true
  stop
  exit 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
