#!/usr/bin/env bash
# rlexp's copy of ../shared/tools/slurm_multinode_up.sh (tests/test_slurm_multinode.py runs it): a real
# N-node SLURM cluster on ONE machine, each node a network + UTS namespace with its own slurmd.
# Multi-node SLURM on ONE Linux machine (Debian 12, slurm-wlm 22.05, munge). Run as root.
#
#   bash multinode_up.sh [N]               # N "nodes" (default 2): node1..nodeN
#   bash multinode_down.sh                # stops and removes everything this script made
#
# Each "node" is a network namespace + a UTS namespace: its own hostname (node1, ...), its own
# IP (10.213.0.11, ...) on a veth pair whose host end sits on a bridge (slurmbr0, 10.213.0.1),
# and its own real slurmd. munged, slurmctld (and, with WITH_ACCOUNTING=1, mariadb + slurmdbd)
# run in the host's namespaces and are reached over the bridge. The namespaces do NOT separate
# the filesystem or the PIDs: every node sees the same /, /tmp, /etc and /dev/shm (like a shared
# NFS home on a real cluster), so per-node files (spool dir, pid file, log) use %n in slurm.conf.
# The nodes get no default route and ip_forward is left alone, so nothing in a node can reach
# anything but the bridge subnet.
#
# Environment (all optional):
#   SLURM_MN_DIR     state/logs/pid files           (default /tmp/slurm-mn)
#   WITH_ACCOUNTING  1 = mariadb + slurmdbd, real sacct (default 1; submitit needs sacct to
#                    notice a job that died without a result, see ../reference/slurm-ci.md)
#   MN_NET           first three octets of the /24  (default 10.213.0; .1 = host, .10+i = node i)
#   MN_PREFIX        node name prefix               (default node)
#   MN_CPUS          CPUs declared per node         (default: the cores nproc finds, whatever OMP_NUM_THREADS says)
#   WITH_PMIX        1 = also install libpmix-dev so `srun --mpi=pmix` works (default 0; +8 s apt).
#                    Slurm's mpi/pmix plugin dlopens .../pmix2/lib/libpmix.so, which only the -dev
#                    package ships; slurmd must start after it is installed.
# Tested: Debian 12, slurm-wlm 22.05.8, munge 0.5.15, iproute2 6.1, util-linux 2.38.
set -euo pipefail
N=${1:-${MN_NODES:-2}}
S=${SLURM_MN_DIR:-/tmp/slurm-mn}
WITH_ACCOUNTING=${WITH_ACCOUNTING:-1}
WITH_PMIX=${WITH_PMIX:-0}
NET=${MN_NET:-10.213.0}
PFX=${MN_PREFIX:-node}
BR=slurmbr0                       # bridge (host side); name is fixed so the down script finds it
NSP=slurmmn-                      # netns names: slurmmn-node1 ...; down removes every slurmmn-*
HOSTIP=$NET.1
MARK="# slurm-multinode"          # tags the /etc/hosts lines and config files this script writes
HERE=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
[[ "$N" =~ ^[1-9][0-9]?$ ]] || { echo "N must be 1..99" >&2; exit 1; }
t0=$(date +%s.%N)

# --- idempotency: same N already up and healthy -> nothing to do; anything else -> clean restart
if [ -s "$S/mn.env" ] && grep -qx "N=$N" "$S/mn.env" && grep -qx "ACCT=$WITH_ACCOUNTING" "$S/mn.env" \
   && grep -qx "PMIX=$WITH_PMIX" "$S/mn.env" && [ -s "$S/run/slurmctld.pid" ] \
   && kill -0 "$(cat "$S/run/slurmctld.pid")" 2>/dev/null \
   && [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)$')" = "$N" ]; then
  echo "SLURM multinode cluster already up ($N nodes)"; exit 0
fi
bash "$HERE/multinode_down.sh" >/dev/null 2>&1 || true

# --- refuse to clash with something we did not start
if ss -Hltn 'sport = :6817' | grep -q .; then
  echo "port 6817 is in use (another slurmctld, e.g. slurm_up.sh's?): stop it first" >&2; exit 1; fi
if ip -4 -o addr show | grep -q " $NET\."; then
  echo "subnet $NET.0/24 already has an address on this machine; pick another MN_NET" >&2; exit 1; fi

# --- packages (skipped when present)
export DEBIAN_FRONTEND=noninteractive
PKGS="slurmctld slurmd slurm-client munge"; [ "$WITH_ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
mkdir -p "$S/log"
need=0; for p in slurmctld slurmd sinfo munged; do command -v $p >/dev/null || need=1; done
[ "$WITH_ACCOUNTING" = 1 ] && { command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null || need=1; }
[ "$WITH_PMIX" = 1 ] && { PKGS="$PKGS libpmix-dev"; dpkg -s libpmix-dev >/dev/null 2>&1 || need=1; }
if [ $need = 1 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends $PKGS >"$S/log/apt.log"; fi

rm -rf "$S/state" "$S/spool" "$S/run" "$S/ns" "$S/tmp" "$S/munge"
mkdir -p "$S"/{state,spool,run,ns,log,tmp}
NODES=(); for i in $(seq 1 "$N"); do NODES+=("$PFX$i"); done
# written first, so the down script can undo a half-finished start
printf 'N=%s\nACCT=%s\nPMIX=%s\nPFX=%s\nNET=%s\nBR=%s\nNSP=%s\n' \
  "$N" "$WITH_ACCOUNTING" "$WITH_PMIX" "$PFX" "$NET" "$BR" "$NSP" >"$S/mn.env"

# --- network: bridge on the host + one veth pair per node --------------------------------------
# IPv6 is switched off on every interface made here, so the only traffic is IPv4 between the
# addresses assigned below (no IPv6 link-local addresses, router solicitations or MLD).
ip link add "$BR" type bridge
sysctl -qw "net.ipv6.conf.$BR.disable_ipv6=1"
ip addr add "$HOSTIP/24" dev "$BR"
ip link set "$BR" up
for i in $(seq 1 "$N"); do
  node=$PFX$i; ns=$NSP$node
  ip netns add "$ns"                                       # persistent netns: /run/netns/$ns
  # set before eth0 exists, so eth0 inherits it ("default" applies to interfaces created later)
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  # host end "mnv$i" goes on the bridge; the node end is created inside the netns as "eth0"
  ip link add "mnv$i" type veth peer name eth0 netns "$ns"
  sysctl -qw "net.ipv6.conf.mnv$i.disable_ipv6=1"
  ip link set "mnv$i" master "$BR" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up                             # no default route on purpose
  # persistent UTS namespace (bind-mounted on a file) holding the node's hostname
  : >"$S/ns/$node.uts"
  unshare --uts="$S/ns/$node.uts" hostname "$node"
done
# Every node and the host resolve the node names through the one shared /etc/hosts.
# (rewrite in place with cat, not sed -i, so a bind-mounted /etc/hosts keeps working)
{ grep -v "$MARK" /etc/hosts || true
  for i in $(seq 1 "$N"); do echo "$NET.$((10 + i)) $PFX$i $MARK"; done; } >"$S/hosts.new"
cat "$S/hosts.new" >/etc/hosts; rm -f "$S/hosts.new"

# --- munge: one munged of our own on the host serves every node ---------------------------------
# Its socket is a path in the shared filesystem, and a unix socket is reachable from any network
# namespace. A private socket/pid file (AuthInfo=socket=... below) keeps it apart from any other
# munged (e.g. slurm_up.sh's) and lets the down script stop exactly this one. With one munged,
# the second node that decodes the same job credential makes munged log "Replayed credential";
# Debian's Slurm is built with --enable-multiple-slurmd, which accepts that (jobs ran fine on 2-3
# nodes). A Slurm built without it would presumably need one munged per node (untested).
MSOCK=$S/munge/munge.socket
[ -s /etc/munge/munge.key ] || mungekey --create --force
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 755 "$S/munge"
install -o munge -g munge -m 640 /dev/null "$S/log/munged.log"
runuser -u munge -- /usr/sbin/munged --socket="$MSOCK" --pid-file="$S/munge/munged.pid" \
  --log-file="$S/log/munged.log" --seed-file="$S/munge/munged.seed"   # daemonizes
munge -n --socket="$MSOCK" | unmunge --socket="$MSOCK" >/dev/null

# --- accounting (optional): mariadb + slurmdbd on the host ---------------------------------------
ACCT=accounting_storage/none
if [ "$WITH_ACCOUNTING" = 1 ]; then
  if mariadb -uroot -e 'select 1' >/dev/null 2>&1; then
    echo "a mariadb is already running on /run/mysqld/mysqld.sock (not ours): stop it first" >&2; exit 1; fi
  install -d -o mysql -g mysql /run/mysqld "$S/run/mysql"   # mariadbd writes its pid file as mysql
  setsid -f mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
    --pid-file="$S/run/mysql/mariadb.pid" --bind-address=127.0.0.1 --innodb-buffer-pool-size=64M \
    >"$S/log/mariadb.log" 2>&1
  for i in $(seq 120); do mariadb -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
  mariadb -uroot -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat >/etc/slurm/slurmdbd.conf <<EOC
$MARK (written by slurm_multinode_up.sh)
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=localhost
SlurmUser=root
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOC
  chmod 600 /etc/slurm/slurmdbd.conf
  slurmdbd                                        # listens on all addresses, port 6819
  ACCT=accounting_storage/slurmdbd
fi

# --- slurm.conf (one file, read by slurmctld, every slurmd and every client) --------------------
H=$(hostname -s)                                  # slurmctld must run on the host named here
MEM=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
CPUS=${MN_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}  # nproc alone counts OMP_NUM_THREADS
{
cat <<EOC
$MARK (written by slurm_multinode_up.sh; $N nodes)
ClusterName=mn
# the host's end of the bridge: reachable from the host and from every node netns
SlurmctldHost=$H($HOSTIP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# our munged; a requeued job waits cred_expire s before it restarts (default 120)
AuthInfo=cred_expire=10,socket=$MSOCK
StateSaveLocation=$S/state
# %n = node name: the nodes share the filesystem, so these must differ per slurmd
SlurmdSpoolDir=$S/spool/%n
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmdLogFile=$S/log/slurmd-%n.log
# srun --mpi=pmix makes \$TmpFS/spmix_appdir_<uid>_<job>.<step> on every node of a step: with one
# shared /tmp the second node fails ("File exists"), so give each node its own TmpFS
TmpFS=$S/tmp/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmctldLogFile=$S/log/slurmctld.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=$ACCT
# the bridge address, so sacct also works from inside a node
AccountingStorageHost=$HOSTIP
# connections to slurmdbd (slurmctld, sacct, sacctmgr) take their munge socket from here, not AuthInfo
AccountingStoragePass=$MSOCK
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=0
KillWait=10
MinJobAge=300
EOC
for i in $(seq 1 "$N"); do
  echo "NodeName=$PFX$i NodeHostname=$PFX$i NodeAddr=$NET.$((10 + i)) CPUs=$CPUS RealMemory=$((MEM / N)) State=UNKNOWN"
done
echo "PartitionName=debug Nodes=$PFX[1-$N] Default=YES MaxTime=INFINITE State=UP"
} >/etc/slurm/slurm.conf

if [ "$WITH_ACCOUNTING" = 1 ]; then  # slurmctld starts only if the cluster exists in slurmdbd
  for i in $(seq 60); do
    timeout 10 sacctmgr -i add cluster mn >/dev/null 2>&1 && break
    timeout 10 sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw mn && break; sleep 0.5; done
  timeout 10 sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw mn \
    || { echo "slurmdbd did not accept the cluster" >&2; tail -n 20 "$S/log/slurmdbd.log" >&2; exit 1; }
fi

# --- daemons -------------------------------------------------------------------------------------
slurmctld                                         # daemonizes; pid -> $S/run/slurmctld.pid
for node in "${NODES[@]}"; do
  mkdir -p "$S/spool/$node" "$S/tmp/$node"
  # slurmd (and so every slurmstepd, job script and task it starts) lives in the node's net+UTS
  # namespaces; -N names the node explicitly. It daemonizes; pid -> $S/run/slurmd-$node.pid
  nsenter --net="/run/netns/$NSP$node" --uts="$S/ns/$node.uts" -- slurmd -N "$node"
done
# wait (at most 60 s) for every node to be idle; give up at once if slurmctld died
idle() { timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$'; }
for i in $(seq 120); do
  [ "$(idle)" = "$N" ] && break
  kill -0 "$(cat "$S/run/slurmctld.pid" 2>/dev/null || echo 0)" 2>/dev/null || break; sleep 0.5; done
if [ "$(idle)" != "$N" ]; then
  echo "not all $N nodes are idle" >&2; tail -n 20 "$S"/log/slurm*.log >&2; exit 1; fi
# smoke test: one task per node, each must print its own hostname
got=$(timeout 60 srun -N"$N" -n"$N" hostname | sort | tr '\n' ' ')
want=$(printf '%s\n' "${NODES[@]}" | sort | tr '\n' ' ')
[ "$got" = "$want" ] || { echo "srun -N$N hostname gave '$got', expected '$want'" >&2; exit 1; }
echo "SLURM multinode cluster ready: $N nodes (${want% }) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
