#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for CI: a controller and two emulated compute nodes n1, n2
# (Debian's slurm-wlm 22.05 and munge; run as root).
#   bash .ci/slurm_cluster.sh start     # install if needed, start munge, slurmctld, slurmd n1 and n2
#   bash .ci/slurm_cluster.sh stop      # stop exactly the daemons started here, by their pid files
set -euo pipefail
state=${SLURM_CI_DIR:-/tmp/slurm-ci}
conf=$state/slurm.conf

start() {
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
  fi
  mkdir -p "$state"/{spool,state,log,run} /etc/munge /run/munge
  if [ ! -s /etc/munge/munge.key ]; then dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
  chown -R munge:munge /etc/munge /run/munge && chmod 400 /etc/munge/munge.key
  munge -n >/dev/null 2>&1 || runuser -u munge -- /usr/sbin/munged --force  # --force: past a stale socket
  grep -qE '\sn1(\s|$)' /etc/hosts || echo "127.0.0.1 n1 n2" >> /etc/hosts  # node names as MASTER_ADDR
  host=$(hostname) cpus=${SLURM_CI_CPUS:-32} mem=${SLURM_CI_MEM_MB:-8000}
  cat > "$conf" <<CONF
ClusterName=ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# Trust the node lines below: two emulated 32-CPU nodes share this 2-core machine, so the batch
# scripts' --cpus-per-task fits as printed.
SlurmdParameters=config_overrides
SlurmctldPort=16817
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
NodeName=n1 NodeHostname=$host Port=17001 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeHostname=$host Port=17002 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=60 State=UP
CONF
  mkdir -p "$state"/spool/n1 "$state"/spool/n2
  export SLURM_CONF=$conf
  slurmctld -c -f "$conf"
  slurmd -N n1 -f "$conf"
  slurmd -N n2 -f "$conf"
  for _ in $(seq 30); do
    [ "$(sinfo -h -N -o %t 2>/dev/null | grep -c idle)" = 2 ] && { sinfo -N; return 0; }
    sleep 1
  done
  echo "SLURM nodes did not come up:"; sinfo -N || true; tail -20 "$state"/log/*.log; return 1
}

stop() {
  for pid in "$state"/run/*.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true; done
}

"${1:-start}"
