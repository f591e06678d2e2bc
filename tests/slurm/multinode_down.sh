#!/usr/bin/env bash
# rlexp's copy of ../shared/tools/slurm_multinode_down.sh: undo tests/slurm/multinode_up.sh.
# Undo slurm_multinode_up.sh: cancel jobs, stop the daemons it started (by PID, never by name),
# kill what is left inside its network namespaces (by PID), remove the namespaces, veths, bridge,
# /etc/hosts lines and config files it wrote. Safe to run any number of times, also after a
# half-finished start. Keeps $SLURM_MN_DIR/log (MN_PURGE=1 removes the whole directory).
S=${SLURM_MN_DIR:-/tmp/slurm-mn}
BR=slurmbr0; NSP=slurmmn-; MARK="# slurm-multinode"
[ -s "$S/mn.env" ] && . "$S/mn.env"            # BR, NSP as used by the up script

# stop WAIT FILE...: SIGTERM to the PID in every pid file at once, wait up to WAIT s for all of
# them to exit, then SIGKILL what is left. Each daemon takes ~2 s to exit, hence all at once.
# Slurm daemons delete their pid file before they exit: read the PIDs first, then wait on them.
# A PID is signalled only if it still runs one of our daemons (a stale pid file could name a PID
# that now belongs to something else).
stop() { local w=$1 f p pids=""; shift
         for f in "$@"; do [ -s "$f" ] || continue; p=$(cat "$f"); rm -f "$f"
                           grep -qxE 'slurmd|slurmctld|slurmdbd|mariadbd|munged' "/proc/$p/comm" 2>/dev/null || continue
                           kill "$p" 2>/dev/null && pids="$pids $p"; done
         [ -n "$pids" ] || return 0
         for _ in $(seq $((w * 5))); do
           local alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
           pids=$alive; [ -z "$pids" ] && return 0; sleep 0.2; done
         kill -9 $pids 2>/dev/null; }

# 1. jobs: slurmstepd and the job's processes outlive slurmd, so cancel first and let them end
if [ -s "$S/run/slurmctld.pid" ] && kill -0 "$(cat "$S/run/slurmctld.pid")" 2>/dev/null; then
  ids=$(timeout 10 squeue -h -o %i 2>/dev/null)
  if [ -n "$ids" ]; then
    timeout 10 scancel $ids 2>/dev/null
    # a job stuck in COMPLETING (e.g. a hung slurmstepd) is dealt with in step 3, so wait only 15 s
    for _ in $(seq 30); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
fi

# 2. the slurmd of every node
stop 20 "$S"/run/slurmd-*.pid

# 3. anything still running inside our netns (a stray or hung slurmstepd, prted, MPI rank): by PID.
#    Everything in these namespaces was started by the slurmd we started.
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NSP"); do
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill $pids 2>/dev/null
  for _ in $(seq 25); do pids=$(ip netns pids "$ns" 2>/dev/null); [ -z "$pids" ] && break; sleep 0.2; done
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
done

# 4. the host-side daemons
stop 30 "$S/run/slurmctld.pid"                   # saves its state, may still talk to slurmdbd
stop 30 "$S/run/slurmdbd.pid"
stop 60 "$S/run/mysql/mariadb.pid" "$S/munge/munged.pid"   # mariadb is the slowest (~9 s)

# 4b. safety net for an interrupted up (a daemon can be running before its pid file is written, or
#     its pid file can name the parent that forked it): a daemon of these kinds that holds a file
#     under $S open (its log) was started by us. Found through /proc, stopped by PID.
left=""
for d in /proc/[0-9]*; do
  grep -qxE 'slurmd|slurmctld|slurmdbd|mariadbd|munged' "$d/comm" 2>/dev/null || continue
  ls -l "$d/fd" 2>/dev/null | grep -q " -> $S/" && left="$left ${d#/proc/}"
done
if [ -n "$left" ]; then
  kill $left 2>/dev/null
  for _ in $(seq 150); do alive=""; for p in $left; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
                          left=$alive; [ -z "$left" ] && break; sleep 0.2; done
  [ -n "$left" ] && kill -9 $left 2>/dev/null
fi

# 5. namespaces: UTS files are bind mounts, netns live in /run/netns. Deleting a netns whose
#    processes are gone destroys its veth end, which also removes the host end.
for f in "$S"/ns/*.uts; do [ -e "$f" ] || continue; umount "$f" 2>/dev/null; rm -f "$f"; done
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NSP"); do ip netns del "$ns"; done
if ip link show "$BR" >/dev/null 2>&1; then
  for l in $(ip -o link show master "$BR" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$l" 2>/dev/null; done
  ip link del "$BR"
fi

# 6. files written by up
if grep -q "$MARK" /etc/hosts 2>/dev/null; then
  grep -v "$MARK" /etc/hosts >"/etc/hosts.slurm-mn.$$"; cat "/etc/hosts.slurm-mn.$$" >/etc/hosts
  rm -f "/etc/hosts.slurm-mn.$$"
fi
for f in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf; do
  head -n1 "$f" 2>/dev/null | grep -q "^$MARK" && rm -f "$f"; done
# Leave a stub slurm.conf that points at loopback: without any slurm.conf, Slurm 22.05 clients (sinfo,
# scancel, ...) look the controller up with a DNS SRV query, i.e. traffic off this machine. With the stub
# they fail locally (connection refused on 127.0.0.1, or no address at all inside a bare namespace).
if [ ! -e /etc/slurm/slurm.conf ] && [ -d /etc/slurm ]; then
  printf '%s stub: no cluster is up; clients fail locally instead of asking DNS\nClusterName=none\nSlurmctldHost=localhost(127.0.0.1)\n' "$MARK" >/etc/slurm/slurm.conf
fi
rm -rf "$S/state" "$S/spool" "$S/run" "$S/ns" "$S/tmp" "$S/munge" "$S/mn.env"
[ "${MN_PURGE:-0}" = 1 ] && rm -rf "$S"
echo "SLURM multinode cluster down"
