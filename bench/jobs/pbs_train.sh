#!/bin/bash
#PBS -N collectives-train
#PBS -l select=1:ncpus=4:mpiprocs=4
#PBS -l walltime=00:30:00
#PBS -r y
#PBS -j oe
#
# Training run with checkpoints under PBS.  PBS has no --signal: the job gives the run the
# walltime less MARGIN seconds (timeout sends SIGTERM to mpiexec, which passes it on to the
# ranks), the job checkpoints at the next step and exits 75, and this script requeues itself
# with qrerun (same job id, same folder), resuming from the checkpoint.
# Submit from the checkout: qsub bench/jobs/pbs_train.sh
# Variables: MPI, RESULTS (bench/jobs/common.sh), DATA, EPOCHS, NP (default 4), SECONDS_LIMIT
# (default 1800, the walltime above), MARGIN (default 60).
set -u
HERE=${COLLECTIVES_HOME:-${PBS_O_WORKDIR:-$PWD}}
source "$HERE/bench/jobs/common.sh"
start_job train "${PBS_JOBID:-local}"

train_args "$OUT"
timeout --preserve-status --signal=TERM --kill-after=120 "$(( ${SECONDS_LIMIT:-1800} - ${MARGIN:-60} ))" \
  "$MPIEXEC" -n "${NP:-4}" -bind-to core "$PY" -m collectives "${TRAIN_ARGS[@]}"
status=$?
requeue_if_preempted "$status" qrerun "$PBS_JOBID"
exit "$status"
