#!/bin/sh
# PRRTE's launch agent for runs over several SLURM nodes (rlexp/cluster.py): PRRTE starts its daemon
# (prted, given as the arguments) on the other nodes with srun, and SLURM sends its preemption and
# time-limit signal (USR2, submitit's) to every job step, that daemon included, which it would kill
# while mpiexec exits 0. The daemon ignores USR1 and USR2; the ranks it starts install their own
# handler (they finish the epoch and save a checkpoint). Ranks inherit the ignored disposition until then.
trap '' USR1 USR2
exec "$@"
