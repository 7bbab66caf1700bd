#!/bin/bash
#PBS -N collectives-bench
#PBS -l select=1:ncpus=4:mpiprocs=4
#PBS -l walltime=01:00:00
#PBS -r y
#PBS -j oe
#
# Benchmark sweep under PBS, one collective per mpiexec, each writing its JSON (and the
# OSU/nccl-tests text) into the job's folder.  No test starts once less than MARGIN seconds
# of the walltime are left; the job then requeues itself with qrerun (same id, same folder)
# and the rerun skips the collectives already written.
# Submit from the checkout: qsub bench/jobs/pbs_bench.sh
# Variables: MPI, RESULTS (bench/jobs/common.sh), TESTS, SIZES, NP (default 4),
# SECONDS_LIMIT (default 3600, the walltime above), MARGIN (default 300: the longest test).
set -u
HERE=${COLLECTIVES_HOME:-${PBS_O_WORKDIR:-$PWD}}
source "$HERE/bench/jobs/common.sh"
start_job bench "${PBS_JOBID:-local}"
deadline=$(( SECONDS + ${SECONDS_LIMIT:-3600} - ${MARGIN:-300} ))

for test in ${TESTS:-allreduce bcast reduce allgather reduce_scatter alltoall alltoallv gather scatter barrier scan exscan neighbor_allgather neighbor_alltoall}; do
  [ -s "$OUT/$test.json" ] && continue
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "walltime near: requeueing before $test"
    qrerun "$PBS_JOBID"
    exit "$PREEMPTED"
  fi
  "$MPIEXEC" -n "${NP:-4}" -bind-to core "$PY" -m collectives bench "$test" -m "${SIZES:-8:64M}" -a all \
    --json "$OUT/$test.json.part" --csv "$OUT/$test.csv" --results "$OUT" > "$OUT/$test.txt" \
    && mv "$OUT/$test.json.part" "$OUT/$test.json"
done
