# Runtime environment of the batch jobs, sourced by slurm_*.sh and pbs_*.sh (not run alone).
#
#   HERE     the collectives checkout (the scripts set it from the submit directory)
#   MPI      wheel (default: the mpich wheel in $HERE/.venv, launched by srun --mpi=pmi2 or
#            its own Hydra mpiexec) or system (the cluster's MPI: module load $MPI_MODULE; the
#            extensions must have been built with `make build MPI=system`)
#   RESULTS  root of the per-job folders (default $HERE/runs)

# One BLAS / OpenMP thread per rank: the ranks are the parallelism (python -m collectives sets
# the same defaults; exported here too so every tool the job starts sees them).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}

MPI=${MPI:-wheel}
case "$MPI" in
  wheel)
    PY=${PY:-$HERE/.venv/bin/python}
    MPIEXEC=${MPIEXEC:-$HERE/.venv/bin/mpiexec}
    SRUN_MPI=(--mpi=pmi2) ;;
  system)
    module load "${MPI_MODULE:-mpi}" 2>/dev/null || echo "note: no module ${MPI_MODULE:-mpi}; using the MPI on PATH" >&2
    PY=${PY:-$HERE/.venv/bin/python}
    MPIEXEC=${MPIEXEC:-mpiexec}
    SRUN_MPI=() ;;
  *)
    echo "MPI must be wheel or system, not '$MPI'" >&2
    exit 2 ;;
esac
if [ ! -x "$PY" ]; then
  echo "no Python at $PY: run make in $HERE first (or set PY)" >&2
  exit 2
fi

# start_job NAME ID: OUT, the per-job folder $RESULTS/NAME-ID, made and announced (kept across a
# requeue, which keeps the job's id, so a requeued job finds its checkpoint there).
start_job() {
  OUT="${RESULTS:-$HERE/runs}/$1-$2"
  mkdir -p "$OUT" || exit 2
  echo "job $2 writing to $OUT"
}

# The time limit's warning signal: checkpoint (training) or stop between tests (benchmark).
PREEMPTED=75

# train_args DIR: TRAIN_ARGS, the training command (DATA, EPOCHS) checkpointing into DIR.
train_args() {
  TRAIN_ARGS=(train)
  [ -n "${DATA:-}" ] && TRAIN_ARGS+=(--data "$DATA")
  TRAIN_ARGS+=(--model softmax --optimizer sgd --epochs "${EPOCHS:-50}" --checkpoint "$1/checkpoint.npz"
               --checkpoint-every 50 --resume --metrics "$1/metrics.json" --save "$1/model.npz")
}

# requeue_if_preempted STATUS COMMAND...: run the scheduler's requeue COMMAND when the job
# checkpointed and stopped (STATUS 75).
requeue_if_preempted() {
  local status=$1
  shift
  if [ "$status" -eq "$PREEMPTED" ]; then
    echo "checkpointed before the time limit: requeueing"
    "$@"
  fi
}
