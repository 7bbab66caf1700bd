#!/bin/bash
# make bench-net: Allreduce on an emulated slow network (topology and shaping: testbed.sh).
#
# For each link RATE (default "1gbit 10gbit", each with DELAY 50us when the kernel can delay):
# build 4 nodes, check the wire (16 MiB Allreduce on 2 nodes x 1 rank beside 1 node x 2 ranks),
# then run bench/net/measure.py on each LAYOUT (NODESxK: K ranks on each of NODES nodes;
# default "2x2 4x1"): the node layout MPI sees, ping-pong alpha/beta per link type, and
# native Allreduce beside ours; then model_check.py, the cost model (each algorithm's schedule
# walked over the node map, with those fits) beside the measured times.  Results: bench/results/net_<rate>_<layout>.json.
# Everything is torn down on exit, failure included.
#
# `bench_net.sh train` (make bench-net-train) instead trains on 2 nodes x 2 ranks at each RATE
# (default 1gbit): bench/net/train.py, time to accuracy per compressor.
#
# Settings (environment): RATES, DELAY, LOSS (percent, needs sch_netem), LAYOUTS, BUDGET
# (seconds per message size), MPIEXEC, PYTHON.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTBED=$HERE/testbed.sh
MODE=${1:-allreduce}
[[ $MODE == allreduce || $MODE == train ]] || { echo "bench-net: unknown mode '$MODE' (allreduce or train)" >&2; exit 1; }
if [ "$MODE" = train ]; then RATES=${RATES:-1gbit}; else RATES=${RATES:-1gbit 10gbit}; fi
DELAY=${DELAY:-50us}
LOSS=${LOSS:-0}
LAYOUTS=${LAYOUTS:-2x2 4x1}
BUDGET=${BUDGET:-3}
PYTHON=${PYTHON:-python3}

if ! why=$("$TESTBED" check); then
    echo "bench-net: skipped, nothing measured: ${why#testbed: }"
    exit 0
fi
if [ -n "$("$TESTBED" list)" ]; then
    # Not removed here: they may belong to a run still going.
    echo "bench-net: ctb-* namespaces exist (another run?); 'make bench-net-clean' removes them" >&2
    exit 1
fi
trap '"$TESTBED" down' EXIT

# Oversubscribed ranks: MPICH's own shared-memory collectives spin (NOTES.md), so the native
# reference runs without them; one BLAS thread per rank.
export MPIR_CVAR_DEVICE_COLLECTIVES=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

if [ "$MODE" = train ]; then
    for rate in $RATES; do
        echo "== training on 2 nodes x 2 ranks, links $rate, delay $DELAY, loss $LOSS%"
        "$TESTBED" up 2 "$rate" "$DELAY" "$LOSS"
        "$PYTHON" "$HERE/train.py" --label "${rate}_2x2" --python "$PYTHON"
        "$TESTBED" down
    done
    exit 0
fi

max_nodes=1
for layout in $LAYOUTS; do
    [[ $layout =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "bench-net: bad layout '$layout' (want NODESxK)" >&2; exit 1; }
    ((BASH_REMATCH[1] > max_nodes)) && max_nodes=${BASH_REMATCH[1]}
done
((max_nodes >= 2)) || max_nodes=2

for rate in $RATES; do
    echo "== links $rate, delay $DELAY, loss $LOSS%"
    "$TESTBED" up "$max_nodes" "$rate" "$DELAY" "$LOSS"
    echo "-- wire check: native 16 MiB float32 Allreduce, 2 nodes x 1 rank, then 1 node x 2 ranks"
    for layout in "2 1" "1 2"; do
        # shellcheck disable=SC2086  # two words: NODES K
        "$TESTBED" mpiexec $layout "$PYTHON" "$HERE/wire_check.py"
    done
    for layout in $LAYOUTS; do
        echo "-- layout $layout (nodes x ranks per node)"
        "$TESTBED" mpiexec "${layout%x*}" "${layout#*x}" \
            "$PYTHON" "$HERE/measure.py" --label "${rate}_$layout" --budget "$BUDGET"
        "$PYTHON" "$HERE/model_check.py" "$HERE/../results/net_${rate}_$layout.json"
    done
    "$TESTBED" down
done
