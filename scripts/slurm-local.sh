#!/bin/sh
# A one-node Slurm cluster on this machine, for tend's tests and benchmark
# (see ../shared/notes/slurm-local.md for why each line of its
# configuration is there).
#
# usage: slurm-local.sh up [HOLDER-PID]     (as root)
#        slurm-local.sh down [HOLDER-PID]
#        slurm-local.sh status
#
# up installs slurm-wlm and munge with apt-get when they are missing,
# starts munged if none answers, writes a configuration under
# $TEND_SLURM_DIR (default /run/tend-slurm-local, a temporary directory
# root alone may write), starts slurmctld and slurmd and waits until the
# node is idle; then it prints SLURM_CONF=<its slurm.conf>, which the
# client commands (sbatch, squeue, scancel) need in their environment.
#
# One cluster serves every caller at once (there can be one slurmctld per
# port on a machine): up registers HOLDER-PID (default: the caller, $PPID)
# and starts the daemons only if they do not run yet; down unregisters it
# and stops them (and the munged up started) once no registered holder is
# alive. So tests that run side by side share one cluster, and one that
# dies without calling down keeps it from nobody.
#
# Exit status: 0 done; 1 it failed (the logs say why); 3 Slurm cannot be
# installed or run here (not root, no apt-get): callers may skip on 3.
set -eu

cmd=${1:-}
holder=${2:-$PPID}
D=${TEND_SLURM_DIR:-/run/tend-slurm-local}
conf=$D/slurm.conf

die() { echo "slurm-local.sh: $*" >&2; exit 1; }
cannot() { echo "slurm-local.sh: $*" >&2; exit 3; }

[ "$(id -u)" = 0 ] || cannot "needs root: the daemons run as root and jobs run as their users"

# Readable by all: the jobs' users' sbatch reads slurm.conf here.
mkdir -p "$D"
chmod 0755 "$D"
# Callers take turns: one installs, starts or stops at a time.
exec 9>>"$D/lock"
chmod 0600 "$D/lock"
flock 9

# alive PIDFILE: the process its pid file names runs.
alive() {
	[ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# holders: prunes the holders that died, and prints how many are left.
holders() {
	mkdir -p -m 0700 "$D/holders"
	n=0
	for f in "$D"/holders/*; do
		[ -e "$f" ] || continue
		if kill -0 "${f##*/}" 2>/dev/null; then n=$((n + 1)); else rm -f "$f"; fi
	done
	echo "$n"
}

install() {
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
		command -v sbatch >/dev/null && command -v munged >/dev/null && return 0
	command -v apt-get >/dev/null || cannot "slurm-wlm and munge are not installed, and there is no apt-get to install them"
	echo "slurm-local.sh: installing slurm-wlm and munge" >&2
	apt-get update -qq >&2 || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2 ||
		die "apt-get install slurm-wlm munge failed"
}

munge_up() {
	if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
		return 0 # a munged answers: whoever started it keeps it
	fi
	mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
	if [ ! -s /etc/munge/munge.key ]; then
		dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
	fi
	chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
	chmod 400 /etc/munge/munge.key
	chmod 0711 /run/munge
	su -s /bin/sh munge -c /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&- || die "munged did not start (see /var/log/munge/munged.log)"
	: >"$D/munge.ours"
	i=0
	until munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 100 ] || die "munged does not answer (see /var/log/munge/munged.log)"
		sleep 0.1
	done
}

# configure writes slurm.conf for this host: 16 CPUs whatever it has
# (config_overrides: slurmd takes the configured count), so that a burst
# of short jobs runs side by side as on a real cluster's nodes, not two
# at a time; and a little less memory than it has.
configure() {
	host=$(hostname -s)
	cpus=16
	mem=$(awk '/^MemTotal:/ { m = int($2 / 1024) - 512; print (m > 256 ? m : 256) }' /proc/meminfo)
	rm -rf "$D/state" "$D/spool"
	mkdir -p -m 0700 "$D/state" "$D/spool" "$D/log"
	umask 022
	cat >"$conf" <<EOF
# Written by tend's scripts/slurm-local.sh: a one-node cluster for tests.
ClusterName=tendlocal
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MpiDefault=none
InactiveLimit=0
MinJobAge=300
KillWait=5
DefMemPerCPU=100
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=2
# One CPU of the node: a second job there waits for the first (tests of
# pending jobs). Its lower tier keeps a job pending there from holding
# the node back from the default partition's jobs.
PartitionName=one Nodes=$host MaxCPUsPerNode=1 MaxTime=INFINITE State=UP PriorityTier=1
EOF
}

# idle waits until the node takes jobs.
idle() {
	i=0
	while :; do
		state=$(SLURM_CONF=$conf sinfo -h -o %T 2>/dev/null || :)
		case $state in idle | mixed | allocated) return 0 ;; esac
		i=$((i + 1))
		[ $i -lt 300 ] || die "the node is not idle after 30 s (it is \"$state\"; see $D/log)"
		sleep 0.1
	done
}

stop() { # PIDFILE
	alive "$1" || return 0
	pid=$(cat "$1")
	kill "$pid" 2>/dev/null || return 0
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -ge 100 ]; then kill -9 "$pid" 2>/dev/null || :; fi
		[ $i -lt 150 ] || die "pid $pid (from $1) does not stop"
		sleep 0.1
	done
}

case $cmd in
up)
	install
	munge_up
	if ! alive "$D/slurmctld.pid" || ! alive "$D/slurmd.pid"; then
		stop "$D/slurmd.pid"
		stop "$D/slurmctld.pid"
		configure
		# Not on this script's output: its caller would wait for them to
		# close it.
		/usr/sbin/slurmctld -f "$conf" </dev/null >/dev/null 2>&1 9>&- || die "slurmctld did not start (see $D/log/slurmctld.log)"
		/usr/sbin/slurmd -f "$conf" </dev/null >/dev/null 2>&1 9>&- || die "slurmd did not start (see $D/log/slurmd.log)"
	fi
	idle
	mkdir -p "$D/holders"
	: >"$D/holders/$holder"
	echo "SLURM_CONF=$conf"
	;;
down)
	rm -f "$D/holders/$holder"
	[ "$(holders)" = 0 ] || exit 0
	echo "slurm-local.sh: stopping the cluster" >&2
	stop "$D/slurmd.pid"
	stop "$D/slurmctld.pid"
	if [ -e "$D/munge.ours" ] && [ -s /run/munge/munged.pid ]; then
		stop /run/munge/munged.pid
		rm -f "$D/munge.ours"
	fi
	;;
status)
	echo "holders: $(holders)"
	alive "$D/slurmctld.pid" && echo "slurmctld: $(cat "$D/slurmctld.pid")" || echo "slurmctld: down"
	alive "$D/slurmd.pid" && echo "slurmd: $(cat "$D/slurmd.pid")" || echo "slurmd: down"
	;;
*)
	echo "usage: slurm-local.sh up|down|status [HOLDER-PID]" >&2
	exit 2
	;;
esac
