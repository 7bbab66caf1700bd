"""Training throughput with data servers (``--data-servers K``) against partitioned reading.

Run under mpiexec, e.g. ``mpiexec -n 4 python -m bench.studies.dataservers``.  Problem: the bundled
digits (1438 training rows, 64 features, 10 classes), standardised, synchronous SGD with the
same seed, so every contender trains on the same minibatches.  Partitioned reading uses
every rank as a worker; K data servers leave size - K workers, which receive each step's rows
from the servers (a request, then one message per server) before computing.  Contenders run
interleaved ``--repeats`` times in one launch; cells are medians.  Columns:

  run        model and global batch size
  reading    partitioned, or K data server(s)
  workers    ranks computing gradients
  rows/s     training rows processed per second of training (evaluations excluded)
  s/epoch    seconds of training per epoch
  comm %     share of rank 0's time in communication (for data servers, receiving batches too)
  ratio      rows/s against partitioned reading
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

RUNS = {
    "softmax b=32": dict(optimizer="sgd", lr=0.01, momentum=0.9, batch=32, epochs=20),
    "softmax b=256": dict(optimizer="sgd", lr=0.05, momentum=0.9, batch=256, epochs=60),
    "mlp b=64": dict(model="mlp", optimizer="sgd", lr=0.05, momentum=0.9, batch=64, epochs=10),
}


def once(comm, data, run, servers):
    """(training seconds per epoch, rank 0's communication share) of one run, the slowest rank's time."""
    options = dict(RUNS[run])
    model = options.pop("model", "softmax")
    trainer = make_trainer(comm, data, model, progress=False, log_every=10 ** 6, data_servers=servers, **options)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit()
    per_epoch = comm.comm.allreduce((trainer.elapsed - trainer.clock.total["eval"]) / options["epochs"], op=MPI.MAX)
    total = trainer.clock.total
    return per_epoch, total["comm"] / max(total["comm"] + total["compute"], 1e-12)


def main():
    """Time partitioned reading and each data-server count, interleaved; print the table on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--servers", type=int, nargs="*", default=[1, 2], help="data-server counts to try")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    comm = Comm(MPI.COMM_WORLD)
    servers = [0] + [k for k in args.servers if 1 <= k < comm.size]
    data = prepare(comm, DIGITS)
    n = comm.comm.allreduce(len(data.train))
    times = interleaved([(run, k) for run in args.runs for k in servers], args.repeats,
                        lambda case: once(comm, data, *case))
    rows = []
    for run in args.runs:
        base = None
        for k in servers:
            per_epoch, share = np.median(np.array(times[run, k]), axis=0)
            rate = n / per_epoch
            base = base or rate
            rows.append({"run": run, "reading": f"{k} data server{'s' * (k > 1)}" if k else "partitioned",
                         "workers": comm.size - k, "rows/s": rate, "s/epoch": per_epoch, "comm %": 100 * share,
                         "ratio": rate / base})
    if comm.rank == 0:
        print(f"# np={comm.size}, {n} training rows, median of {args.repeats} interleaved runs "
              f"(shared machine: compare ratios)")
        print("\n".join(table([("run", 14, ""), ("reading", 16, ""), ("workers", 7, "d"), ("rows/s", 9, ".0f"),
                               ("s/epoch", 8, ".4f"), ("comm %", 6, ".1f"), ("ratio", 6, ".2f")], rows)))
    comm.Free()


if __name__ == "__main__":
    main()
