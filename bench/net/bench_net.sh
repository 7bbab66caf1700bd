#!/bin/bash
# make bench-net: Allreduce on an emulated slow network (topology and shaping: testbed.sh).
#
# For each link RATE (default "1gbit 10gbit", each with DELAY 50us when the kernel can delay):
# build 4 nodes, check the wire (16 MiB Allreduce on 2 nodes x 1 rank beside 1 node x 2 ranks),
# then run bench/net/measure.py on each LAYOUT (NODESxK: K ranks on each of NODES nodes;
# default "2x2 4x1"): the node layout MPI sees, ping-pong alpha/beta per link type, and
# native Allreduce beside ours, LAUNCHES times (default 3), each launch its own fits and cells
# in bench/results/net_<rate>_<layout>_launch<i>.json; then model_check.py, the cost model (each
# algorithm's schedule walked over the node map, with each launch's own fits) beside the
# measured times: per cell the median over the launches of the measured and of the predicted
# time, the spread of the launches' own errors, and the count within 25% on the medians and in
# each launch (at 2x2, 4 ranks on 2 cores, one launch in four ran its whole 64 KiB row 24-43%
# slower than the model, which one launch's figures cannot tell from a model error).  The combination:
# bench/results/net_<rate>_<layout>.json.  LAUNCHES=1: one launch, written to that file as
# measure.py's result with its model.  Everything is torn down on exit, failure included.
#
# `bench_net.sh train` (make bench-net-train) instead trains on 2 nodes x 2 ranks at each RATE
# (default 1gbit): bench/net/train.py, time to accuracy per compressor.
#
# Settings (environment): RATES, DELAY, LOSS (percent, needs sch_netem), LAYOUTS, LAUNCHES
# (measure.py launches per layout; not for train), BUDGET (seconds per message size), MPIEXEC, PYTHON.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTBED=$HERE/testbed.sh
MODE=${1:-allreduce}
[[ $MODE == allreduce || $MODE == train ]] || { echo "bench-net: unknown mode '$MODE' (allreduce or train)" >&2; exit 1; }
if [ "$MODE" = train ]; then RATES=${RATES:-1gbit}; else RATES=${RATES:-1gbit 10gbit}; fi
DELAY=${DELAY:-50us}
LOSS=${LOSS:-0}
LAYOUTS=${LAYOUTS:-2x2 4x1}
LAUNCHES=${LAUNCHES:-3}
BUDGET=${BUDGET:-3}
PYTHON=${PYTHON:-python3}
RESULTS=$HERE/../results
[[ $LAUNCHES =~ ^[1-9][0-9]*$ ]] || { echo "bench-net: LAUNCHES must be a positive integer, not '$LAUNCHES'" >&2; exit 1; }

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
        files=() combined=()
        for ((i = 1; i <= LAUNCHES; i++)); do
            echo "-- layout $layout (nodes x ranks per node), launch $i of $LAUNCHES"
            label=${rate}_$layout
            if ((LAUNCHES > 1)); then
                label+=_launch$i
                combined=(-o "$RESULTS/net_${rate}_$layout.json")
            fi
            "$TESTBED" mpiexec "${layout%x*}" "${layout#*x}" \
                "$PYTHON" "$HERE/measure.py" --label "$label" --budget "$BUDGET"
            files+=("$RESULTS/net_$label.json")
        done
        "$PYTHON" "$HERE/model_check.py" "${combined[@]}" "${files[@]}"
    done
    "$TESTBED" down
done
