"""Time to reach the optimum within 1e-4 (and 1e-2) relative objective, per optimizer and synchronisation.

Run under mpiexec (``make bench-train`` runs np = 1, 2, 4).  Problem: softmax regression
on the bundled digits, all 1797 rows, standardised, lambda = 1e-3; F* from scipy's
L-BFGS-B in one process.  The objective is evaluated after every epoch (L-BFGS/Newton:
every iteration); evaluation time is excluded.  Columns:

  run        optimizer/synchronisation
  ep@1e-2    epochs (iterations) until within 1e-2, "-" when not reached in the budget
  s@1e-2     training wall time until then, seconds (rank 0)
  ep@1e-4    the same for 1e-4
  s@1e-4
  comm %     share of compute + communication time spent communicating, over the run
  gap        best relative objective gap reached: (F - F*) / F*
"""
import argparse
import contextlib
import io
import json
import sys

import numpy as np
import scipy.optimize
from mpi4py import MPI

from collectives import Comm
from collectives.train.data import DIGITS
from collectives.train.job import make_trainer, prepare

SGD = dict(optimizer="sgd", lr=0.01, momentum=0.99, batch=32)
RUNS = {
    "lbfgs/sync": dict(optimizer="lbfgs", epochs=300),
    "newton/sync": dict(optimizer="newton", epochs=30),
    "sgd/sync": dict(SGD, epochs=40),
    "adam/sync": dict(optimizer="adam", lr=0.2, adam_decay=True, batch=32, epochs=60),
    "sgd/ddp": dict(SGD, sync="ddp", epochs=40),
    "sgd/local": dict(SGD, sync="local", local_steps=4, epochs=40),
    "sgd/fedavg": dict(SGD, sync="fedavg", local_epochs=1, epochs=40),
    "sgd/ps": dict(SGD, sync="ps", tau=0, epochs=40),
    "sgd/ps-async": dict(SGD, sync="ps", tau=-1, epochs=40),
    "sgd/gossip": dict(SGD, sync="gossip", epochs=40),
}
TARGETS = (1e-2, 1e-4)


def optimum():
    """F* by scipy's L-BFGS-B on the whole data set, in this process."""
    data = prepare(MPI.COMM_SELF, DIGITS, test_fraction=0)
    trainer = make_trainer(Comm(MPI.COMM_SELF), data, optimizer="lbfgs", progress=False)
    size = trainer.model.size

    def f(w):
        loss, g = trainer.model.loss_grad(w, data.train.X, data.train.y)
        pen, pg = trainer.model.penalty(w, trainer.o["lam"])
        n = len(data.train)
        return loss / n + pen, g / n + pg

    res = scipy.optimize.minimize(f, np.zeros(size), jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=10000, gtol=1e-12, ftol=1e-16))
    return res.fun


def main():
    """Run every configuration at this launch's rank count and print the table on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--json", default=None, help="append results as JSON lines here")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    F_star = world.bcast(optimum() if world.rank == 0 else None)
    comm = Comm(world)
    if world.rank == 0:
        print(f"# np={world.size}  F*={F_star:.15f}")
        print(f"{'run':<14} {'ep@1e-2':>7} {'s@1e-2':>7} {'ep@1e-4':>7} {'s@1e-4':>7} {'comm %':>7} {'gap':>10}")
    for name in args.runs:
        options = RUNS[name]
        if options.get("sync") == "ps" and world.size < 2:
            if world.rank == 0:
                print(f"{name:<14} (needs 2+ ranks)")
            continue
        data = prepare(comm, DIGITS, test_fraction=0)
        trainer = make_trainer(comm, data, progress=False, log_every=1, tol=0, **options)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.fit()
        if world.rank != 0:
            continue
        rows = trainer.history or [dict(epoch=0, objective=np.inf, training=trainer.elapsed)]
        hits = [next((r for r in rows if (r["objective"] - F_star) / F_star <= t), None) for t in TARGETS]
        cells = "".join(f" {h['epoch']:>7} {h['training']:>7.2f}" if h else f" {'-':>7} {'-':>7}" for h in hits)
        gap = (min(r["objective"] for r in rows) - F_star) / F_star
        busy = trainer.clock.total["compute"] + trainer.clock.total["comm"]
        share = trainer.clock.total["comm"] / busy if busy else 0.0
        print(f"{name:<14}{cells} {100 * share:>6.1f}% {gap:>10.2e}")
        sys.stdout.flush()
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(dict(run=name, np=world.size, comm_share=share, gap=gap,
                                        **{f"{t:g}": h and [h["epoch"], h["training"]]
                                           for t, h in zip(TARGETS, hits)})) + "\n")
    comm.Free()


if __name__ == "__main__":
    main()
