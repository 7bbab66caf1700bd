#!/bin/bash
#SBATCH --job-name=collectives-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --signal=TERM@60
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=collectives-train-%j.out
#
# Training run with checkpoints.  60 s before the time limit Slurm sends SIGTERM to the job
# steps' tasks (--signal without B:, so the ranks get it): the job writes a checkpoint at the
# next step and exits 75; this script then requeues itself, and the requeued run (same job id,
# same folder) resumes from the checkpoint.  Submit from the checkout: sbatch bench/jobs/slurm_train.sh
# Variables: MPI, RESULTS (bench/jobs/common.sh), DATA (default: the bundled digits), EPOCHS.
set -u
HERE=${COLLECTIVES_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
source "$HERE/bench/jobs/common.sh"
start_job train "${SLURM_JOB_ID:-local}"

train_args "$OUT"
srun "${SRUN_MPI[@]}" --cpu-bind=cores "$PY" -m collectives "${TRAIN_ARGS[@]}"
status=$?
requeue_if_preempted "$status" scontrol requeue "$SLURM_JOB_ID"
exit "$status"
