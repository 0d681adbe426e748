#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying (and testing) Slurm sweeps:
#
#   sudo bash scripts/slurm-local.sh start    # packages if missing, munge, slurm.conf, daemons; waits until a job runs
#   sudo bash scripts/slurm-local.sh status   # exit 0 when the cluster answers
#   sudo bash scripts/slurm-local.sh stop     # cancels its jobs, stops the daemons it started (by PID)
#
# Debian/Ubuntu, as root. One node (this host, its CPUs, its memory minus 2 GiB), one partition
# `debug` (the default), no accounting (sacct is off; speedbench reads job states from squeue),
# no cgroups (proctrack/linuxproc, task/none). `start` on a running cluster does nothing else.
# SLURM_LOCAL_WAIT: seconds `start` waits for the cluster to run a job (default 60).
set -euo pipefail

state=/run/speedbench-slurm            # the PID files of the daemons this script started
conf=/etc/slurm/slurm.conf
marker="# written by speedbench scripts/slurm-local.sh"
wait_s="${SLURM_LOCAL_WAIT:-60}"

say() { echo "slurm-local: $*" >&2; }
die() { say "$*"; exit 2; }

answers() {  # the controller answers and the node takes jobs
  command -v sinfo >/dev/null 2>&1 || return 1
  timeout 10 scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  timeout 10 sinfo -h -N -p debug -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)'
}

install_packages() {
  local missing=()
  for bin in slurmctld slurmd sinfo munged; do
    command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install slurmctld slurmd slurm-client munge"
  say "installing slurmctld slurmd slurm-client munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  local out
  if ! out=$(apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge 2>&1); then
    echo "$out" | tail -n 5 >&2
    die "apt-get install slurmctld slurmd slurm-client munge failed"
  fi
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc --all)
  mem=$(( $(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo) - 2048 ))
  [ "$mem" -ge 512 ] || mem=512
  if [ -f "$conf" ] && ! grep -qF "$marker" "$conf"; then
    die "$conf exists and was not written by this script; not replacing it"
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm "$state"
  cat >"$conf" <<EOF
$marker (one node: $host)
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits this long before it starts again (default 120 s)
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# schedule every few seconds (defaults: 60 s, backfill 30 s): a requeued job starts again promptly
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chmod 400 /etc/munge/munge.key
  fi
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=/run/munge/munged.pid"
    for _ in $(seq 20); do
      munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
      sleep 0.5
    done
    munge -n | unmunge >/dev/null || die "munged does not answer (see /var/log/munge/munged.log)"
    cp /run/munge/munged.pid "$state/munged.pid"
  fi
}

start() {
  if answers; then
    say "already running: $(sinfo -h -N -o '%N %c CPUs %m MiB %t' | head -1)"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts system daemons)"
  install_packages
  write_conf
  start_munge
  alive "$state/slurmctld.pid" || /usr/sbin/slurmctld
  alive "$state/slurmd.pid" || /usr/sbin/slurmd
  local deadline=$(( SECONDS + wait_s ))
  until answers; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
      die "the cluster did not come up within ${wait_s}s (SLURM_LOCAL_WAIT)"
    fi
    sleep 1
  done
  timeout "$wait_s" srun -N1 -n1 -t 1 hostname >/dev/null || die "srun hostname failed"
  say "ready: $(sinfo -h -N -o '%N %c CPUs %m MiB, partition %P' | head -1)"
}

stop() {
  if command -v squeue >/dev/null 2>&1 && answers; then
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
    [ -n "${jobs// }" ] && scancel $jobs 2>/dev/null || true
  fi
  local name pid
  for name in slurmd slurmctld munged; do
    [ -f "$state/$name.pid" ] || continue
    pid=$(cat "$state/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/$name.pid"
  done
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
