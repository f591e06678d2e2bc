#!/usr/bin/env bash
# Stop only the daemons slurm_up.sh started, by PID (never by name).
S=${SLURM_CI_DIR:-/tmp/slurm-ci}
# a Slurm client runs only where a slurm.conf is in place: without one it asks DNS off this machine
[ -f "${SLURM_CONF:-/etc/slurm/slurm.conf}" ] && { scancel --user=root 2>/dev/null || true; }
stop() { local f=$1; [ -s "$f" ] || return 0; local p; p=$(cat "$f"); kill "$p" 2>/dev/null || return 0
         for i in $(seq 60); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.5; done; kill -9 "$p" 2>/dev/null; }
for d in slurmd slurmctld slurmdbd mariadb munged; do stop "$S/$d.pid"; done
