"""Time to accuracy with and without a straggler: BSP, SSP at several tau, asynchronous PS,
local SGD and gossip.

Run under mpiexec, e.g. ``mpiexec -n 4 python -m bench.studies.stragglers``.  Problem: softmax
regression on the bundled digits (all 1797 rows, standardised, lambda = 1e-3), SGD with
lr 0.01, momentum 0.99, global batch 32 (within 1% of F* in about 32 epochs synchronously);
F* from scipy's L-BFGS-B.  Each mode runs without a straggler, with rank 1 (a worker in
every mode) computing FACTOR times slower (``--straggler 1:FACTOR``), and with every rank's
every step slowed with probability P (``--straggler random:P:FACTOR``); the whole set runs
``--repeats`` times interleaved in one launch, so a shared machine's load falls on all
alike; cells are medians over the repeats.  Every mode evaluates the objective at each
epoch's end, a collective that lines the ranks up once per epoch (so a persistent straggler
bounds every mode's rate, SSP's too; SSP and asynchronous PS can absorb only what varies
within an epoch).  Columns:

  run        synchronisation (ps: one server rank, the others workers)
  straggler  none, rank 1 xFACTOR, or random P:FACTOR
  ep         epochs until the objective is within 1% of F* ("-": not within the budget)
  s          training wall time until then (rank 0, evaluations excluded), seconds
  s/ep       training seconds per epoch over the whole run
  wait %     share of rank 0's compute + comm + wait time spent waiting for slower peers
             (a barrier before each all-reduce, zero-byte messages before a gossip
             exchange, a parameter server holding a pull back for the staleness bound)
  gap        best relative gap (F - F*) / F* reached in the budget
  slow x     time to 1% against no straggler (per epoch when either misses 1%)
"""
import argparse
import contextlib
import io

import numpy as np
from mpi4py import MPI

from collectives import Comm
from collectives.train.data import DIGITS
from collectives.train.job import make_trainer, prepare

from bench.common import interleaved, table
from bench.studies.train import optimum

SGD = dict(optimizer="sgd", lr=0.01, momentum=0.99, batch=32)
RUNS = {
    "bsp": dict(sync="sync"),
    "ssp tau=1": dict(sync="ps", tau=1),
    "ssp tau=4": dict(sync="ps", tau=4),
    "ssp tau=16": dict(sync="ps", tau=16),
    "async ps": dict(sync="ps", tau=-1),
    "local H=4": dict(sync="local", local_steps=4),
    "gossip ring": dict(sync="gossip", topology="ring"),
    "gossip expo": dict(sync="gossip", topology="exponential"),
}
TARGET = 0.01


def once(comm, data, F_star, options, straggler, epochs):
    """(epochs to TARGET or None, seconds to TARGET or None, seconds per epoch, wait share, best gap) on rank 0."""
    trainer = make_trainer(comm, data, progress=False, log_every=1, measure_wait=True, epochs=epochs,
                           straggler=straggler, **SGD, **options)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit()
    rows = trainer.history
    hit = next((r for r in rows if (r["objective"] - F_star) / F_star <= TARGET), None)
    total = trainer.clock.total
    busy = total["compute"] + total["comm"] + total["wait"]
    per_epoch = rows[-1]["training"] / rows[-1]["epoch"] if rows else float("nan")
    gap = min((r["objective"] - F_star) / F_star for r in rows) if rows else float("nan")
    return (hit and hit["epoch"], hit and hit["training"], per_epoch, total["wait"] / busy if busy else 0.0, gap)


def _median(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def main():
    """Run every mode under every straggler condition, interleaved; print the table on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--factor", type=float, default=4.0, help="rank 1's slowdown")
    ap.add_argument("--random", default="0.1:10", metavar="P:FACTOR", help="the random straggler mode")
    ap.add_argument("--epochs", type=int, default=60, help="budget per run")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    if world.size < 3:
        raise SystemExit("bench.stragglers needs 3 ranks or more (rank 1 straggles; ps needs a server)")
    F_star = world.bcast(optimum() if world.rank == 0 else None)
    comm = Comm(world)
    data = prepare(comm, DIGITS, test_fraction=0)
    conditions = {"none": (), f"rank 1 x{args.factor:g}": (f"1:{args.factor:g}",),
                  f"random {args.random}": (f"random:{args.random}",)}
    results = interleaved([(run, c) for run in args.runs for c in conditions], args.repeats,
                          lambda case: once(comm, data, F_star, RUNS[case[0]], conditions[case[1]], args.epochs))
    rows = []
    for run in args.runs:
        base = None
        for c in conditions:
            rs = results[run, c]
            ep, s, per, wait, gap = (_median([r[i] for r in rs]) for i in range(5))
            if sum(r[0] is not None for r in rs) * 2 <= len(rs):  # most repeats missed 1%
                ep = s = None
            base = base or (s, per)
            # time to 1% against no straggler; per epoch when either run missed 1%
            ratio = s / base[0] if s and base[0] else per / base[1]
            rows.append({"run": run, "straggler": c, "ep": ep, "s": s, "s/ep": per, "wait %": 100 * wait,
                         "gap": gap, "slow x": ratio})
    if comm.rank == 0:
        print(f"# np={world.size}, F*={F_star:.12f}, target {TARGET:.0%} above F*, median of {args.repeats} "
              f"interleaved runs (shared machine: compare ratios)")
        print("\n".join(table([("run", 12, ""), ("straggler", 16, ""), ("ep", 4, ".0f"), ("s", 7, ".3f"),
                               ("s/ep", 7, ".4f"), ("wait %", 6, ".1f"), ("gap", 8, ".1e"), ("slow x", 6, ".2f")],
                              rows)))
    comm.Free()


if __name__ == "__main__":
    main()
