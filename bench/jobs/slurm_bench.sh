#!/bin/bash
#SBATCH --job-name=collectives-bench
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --signal=B:TERM@60
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=collectives-bench-%j.out
#
# Benchmark sweep, one collective per job step, each writing its JSON (and the OSU/nccl-tests
# text) into the job's folder.  60 s before the time limit Slurm sends SIGTERM to this batch
# shell (B:): it lets the running step finish or be killed, starts no more, and requeues; the
# requeued job (same id, same folder) skips the collectives already written.
# Submit from the checkout: sbatch bench/jobs/slurm_bench.sh
# Variables: MPI, RESULTS (bench/jobs/common.sh), TESTS (default below), SIZES (-m range).
set -u
HERE=${COLLECTIVES_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
source "$HERE/bench/jobs/common.sh"
start_job bench "${SLURM_JOB_ID:-local}"
stop=0
trap 'stop=1; echo "time limit near: no more tests"' TERM

for test in ${TESTS:-allreduce bcast reduce allgather reduce_scatter alltoall alltoallv gather scatter barrier scan exscan neighbor_allgather neighbor_alltoall}; do
  [ "$stop" -eq 1 ] && break
  [ -s "$OUT/$test.json" ] && continue
  # In the background and waited for, so the trap runs as soon as the signal comes.
  srun "${SRUN_MPI[@]}" --cpu-bind=cores "$PY" -m collectives bench "$test" -m "${SIZES:-8:64M}" -a all \
    --json "$OUT/$test.json.part" --csv "$OUT/$test.csv" --results "$OUT" > "$OUT/$test.txt" &
  wait $! && mv "$OUT/$test.json.part" "$OUT/$test.json"
done
if [ "$stop" -eq 1 ]; then
  scontrol requeue "$SLURM_JOB_ID"
  exit "$PREEMPTED"
fi
