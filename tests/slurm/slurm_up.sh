#!/usr/bin/env bash
# Single-node SLURM (22.05, Debian 12) for CI. Run as root. WITH_ACCOUNTING=1 adds mariadb+slurmdbd (real sacct).
set -euo pipefail
S=${SLURM_CI_DIR:-/tmp/slurm-ci}; WITH_ACCOUNTING=${WITH_ACCOUNTING:-1}
mkdir -p "$S"/{state,spool,log}
export DEBIAN_FRONTEND=noninteractive
PKGS="slurmctld slurmd slurm-client munge"; [ "$WITH_ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
command -v slurmctld >/dev/null && { [ "$WITH_ACCOUNTING" != 1 ] || command -v slurmdbd >/dev/null; } \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $PKGS >"$S/log/apt.log"; }

# --- munge ---
[ -s /etc/munge/munge.key ] || mungekey --create --force   # Debian postinst usually made one already
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 755 /run/munge
runuser -u munge -- /usr/sbin/munged            # daemonizes; pid in /run/munge/munged.pid
cp /run/munge/munged.pid "$S/munged.pid"
munge -n | unmunge >/dev/null

# --- accounting (optional but recommended: submitit polls `sacct`) ---
ACCT=accounting_storage/none
if [ "$WITH_ACCOUNTING" = 1 ]; then
  install -d -o mysql -g mysql /run/mysqld
  mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
    --pid-file=/run/mysqld/mysqld.pid --bind-address=127.0.0.1 --innodb-buffer-pool-size=64M >"$S/log/mariadb.log" 2>&1 &
  for i in $(seq 120); do mariadb -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
  cp /run/mysqld/mysqld.pid "$S/mariadb.pid"
  mariadb -uroot -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat > /etc/slurm/slurmdbd.conf <<EOC
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$S/log/slurmdbd.log
PidFile=$S/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOC
  chmod 600 /etc/slurm/slurmdbd.conf
  slurmdbd
  ACCT=accounting_storage/slurmdbd
fi

# --- slurm.conf ---
H=$(hostname -s); MEM=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p'); CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone counts OMP_NUM_THREADS
cat > /etc/slurm/slurm.conf <<EOC
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# requeued jobs wait cred_expire seconds before restarting (default 120)
AuthInfo=cred_expire=10
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=$ACCT
AccountingStorageHost=localhost
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=0
KillWait=10
MinJobAge=300
NodeName=$H NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOC
if [ "$WITH_ACCOUNTING" = 1 ]; then
  for i in $(seq 60); do sacctmgr -i add cluster ci >/dev/null 2>&1 && break; sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw ci && break; sleep 0.5; done
fi
slurmctld; slurmd                                   # both daemonize, pids -> $S/*.pid
for i in $(seq 120); do sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 0.5; done
sinfo -h -o %T | grep -qx idle || { tail -n 30 "$S"/log/*.log; exit 1; }
JOB=$(timeout 60 srun -n1 sh -c 'echo $SLURM_JOB_ID')
if [ "$WITH_ACCOUNTING" = 1 ]; then  # accounting works end to end: slurmdbd has recorded that job
  for i in $(seq 240); do
    [ "$(sacct -X -n --parsable2 -o State -j "$JOB" 2>/dev/null)" = COMPLETED ] && break; sleep 0.5
  done
  [ "$(sacct -X -n --parsable2 -o State -j "$JOB")" = COMPLETED ] \
    || { echo "slurmdbd has no record of job $JOB after 120 s"; tail -n 30 "$S"/log/slurm*.log; exit 1; }
fi
echo "SLURM ready"
