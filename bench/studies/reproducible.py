"""The cost of reproducible training (``--reproducible``) against the default mode.

Run under mpiexec at each rank count, e.g. ``mpiexec -n 4 python -m bench.studies.reproducible``.
Problem: the bundled digits (1438 training rows, 64 features, 10 classes), standardised,
lambda = 1e-3.  Both modes run interleaved in one launch (default, reproducible, default, ...)
so a shared machine's load falls on both alike; the table gives the median seconds of
training per epoch (L-BFGS: per iteration) over the repeats, evaluation excluded, and their
ratio.  ``prepare s`` is the data preparation (reading, split, scaling; reproducible mode
also deals the rows into fixed shards).  Columns:

  run        optimizer (and model)
  default    seconds per epoch, default mode
  repro      seconds per epoch, reproducible mode
  ratio      repro / default
  prepare    data preparation seconds, default / reproducible
"""
import argparse
import contextlib
import io
import time

import numpy as np
from mpi4py import MPI

from collectives import Comm
from collectives.train.data import DIGITS
from collectives.train.job import make_trainer, prepare

RUNS = {
    "sgd": dict(optimizer="sgd", lr=0.01, momentum=0.99, batch=32, epochs=3),
    "adam": dict(optimizer="adam", lr=0.01, batch=32, epochs=3),
    "lbfgs": dict(optimizer="lbfgs", epochs=40, tol=0),
    "mlp/adam": dict(model="mlp", optimizer="adam", lr=0.01, batch=32, epochs=2),
}


def once(comm, run, reproducible):
    """(seconds of training per epoch, seconds of preparation) of one run."""
    options = dict(RUNS[run])
    model = options.pop("model", "softmax")
    comm.comm.Barrier()
    t = time.perf_counter()
    data = prepare(comm, DIGITS, reproducible=reproducible)
    prep = time.perf_counter() - t
    trainer = make_trainer(comm, data, model, progress=False, log_every=10 ** 6, reproducible=reproducible,
                           **options)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit()
    # the slowest rank's time is the job's
    per_epoch = comm.comm.allreduce((trainer.elapsed - trainer.clock.total["eval"]) / options["epochs"], op=MPI.MAX)
    return per_epoch, comm.comm.allreduce(prep, op=MPI.MAX)


def main():
    """Time every run in both modes at this launch's rank count; print the table on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--repeats", type=int, default=5, help="runs of each mode, interleaved")
    args = ap.parse_args()
    comm = Comm(MPI.COMM_WORLD)
    if comm.rank == 0:
        print(f"# np={comm.size}, median of {args.repeats} interleaved runs per mode")
        print(f"{'run':<10} {'default':>9} {'repro':>9} {'ratio':>6} {'prepare':>13}")
    for run in args.runs:
        times = {False: [], True: []}
        for _ in range(args.repeats):
            for mode in (False, True):
                times[mode].append(once(comm, run, mode))
        if comm.rank == 0:
            (d, dp), (r, rp) = (np.median(np.array(times[m]), axis=0) for m in (False, True))
            print(f"{run:<10} {d:>9.4f} {r:>9.4f} {r / d:>6.2f} {dp:>6.3f}/{rp:.3f}", flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
