"""Pipeline bubble against theory, and time per epoch of data, tensor and pipeline parallelism.

Run under mpiexec, e.g. ``mpiexec -n 4 python -m bench.studies.pipeline``.  Two tables, contenders
interleaved ``--repeats`` times in one launch, cells medians (a shared machine: compare
ratios, and above 2 ranks on 2 cores the ranks are oversubscribed, so a waiting stage's core
goes to another stage and the measured bubble is a lower bound of an idle share).

Bubble: an MLP of p equal layers (``--width`` units, one per stage) on one minibatch of
``--rows`` random rows, loss and gradient by GPipe and 1F1B at m micro-batches.  Each stage's
idle share is 1 - (its compute seconds) / (the pass's wall seconds); the columns are the mean
over the stages; "replayed" is the bubble the schedule implies on dedicated cores with the
stages' measured step times and free messages (load on a shared machine inflates the first
through scheduling delays at every hand-off, not the second); "theory" is (p - 1) / (m + p - 1),
for equal stages: "slowest" is the slowest stage's compute time over the mean stage's (the last
stage also computes the loss), which the replay includes and the theory does not.

Epochs: ``python -m collectives train`` on the bundled digits (SGD, batch 64), seconds of
training per epoch (evaluations excluded) for each layout of the same MLP: data parallel over
every rank, tensor parallel over every rank, hybrids, and a pipeline over every rank of an
MLP deep enough to have a layer per stage (beside data parallelism on that MLP).
"""
import argparse
import contextlib
import io
import json
import os
import tempfile
import time

import numpy as np
from mpi4py import MPI

from bench.common import interleaved, table
from collectives import Comm
from collectives.parallel.pipeline import PipelineMLP, replay
from collectives.train.job import main as train


def bubble(comm, name, micro, width, rows):
    """(measured, replayed) mean idle share over the stages of one loss-and-gradient pass, and the
    slowest stage's compute time over the mean stage's."""
    rng = np.random.default_rng(0)
    model = PipelineMLP(comm, [width] * (comm.size + 1), micro, name)
    X, y = rng.standard_normal((rows, width)), rng.integers(0, width, rows)
    w = model.init(rng)
    model.loss_grad(w, X, y)  # warm the buffers and BLAS
    comm.Barrier()
    busy, t = dict(model.busy), time.perf_counter()
    model.loss_grad(w, X, y)
    wall = time.perf_counter() - t
    spent = {k: (model.busy[k] - busy[k]) / micro for k in ("forward", "backward")}
    idle = 1 - sum(spent.values()) * micro / wall
    costs = comm.comm.allgather(spent)
    per_stage = [sum(c.values()) for c in costs]
    return float(np.mean(comm.comm.allgather(idle))), replay(name, comm.size, micro, costs), \
        max(per_stage) / np.mean(per_stage)


def epoch_seconds(comm, argv, epochs):
    """Training seconds per epoch of ``python -m collectives train ARGV`` (rank 0's clock)."""
    path = os.path.join(comm.comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None), "metrics.json")
    with contextlib.redirect_stdout(io.StringIO()):
        train([*argv, "--epochs", str(epochs), "--no-progress", "--metrics", path])
    seconds = None
    if comm.rank == 0:
        with open(path) as f:
            seconds = json.load(f)["history"][-1]["training"] / epochs
        os.remove(path)
        os.rmdir(os.path.dirname(path))
    return comm.comm.bcast(seconds)


def layouts(p, hidden):
    """[(name, train arguments)] of the same MLP laid out every way that fits p ranks."""
    mlp = ["--model", "mlp", "--optimizer", "sgd", "--hidden", str(hidden)]
    out = [("data x%d" % p, mlp), ("tensor x%d" % p, [*mlp, "--tensor-parallel", str(p)])]
    if p % 2 == 0 and p > 2:
        out += [(f"data x{p // 2} tensor x2", [*mlp, "--tensor-parallel", "2"]),
                (f"data x{p // 2} pipeline x2", [*mlp, "--pipeline-parallel", "2"])]
    deep = [*mlp, "--layers", str(max(p, 2))]
    out += [(f"{max(p, 2)} layers: data x{p}", deep),
            (f"{max(p, 2)} layers: pipeline x{p} (1f1b, m=4)", [*deep, "--pipeline-parallel", str(p)])]
    return out


def main():
    """Measure both tables, interleaved; print them on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro", type=int, nargs="*", default=[1, 4, 16])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256, help="hidden units of the MLP trained on the digits")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    comm = Comm(MPI.COMM_WORLD)
    p = comm.size
    shares = interleaved([(name, m) for name in ("gpipe", "1f1b") for m in args.micro], args.repeats,
                         lambda case: bubble(comm, *case, args.width, args.rows))
    rows = [dict(zip(("measured", "replayed", "slowest"), np.median(np.array(shares[name, m]), axis=0)),
                 schedule=name, m=m, theory=(p - 1) / (m + p - 1)) for name, m in shares]
    runs = layouts(p, args.hidden)
    times = interleaved(range(len(runs)), args.repeats, lambda i: epoch_seconds(comm, runs[i][1], args.epochs))
    base = float(np.median(times[0]))
    epochs = [{"layout": name, "s/epoch": float(np.median(times[i])), "ratio": float(np.median(times[i])) / base}
              for i, (name, _) in enumerate(runs)]
    if comm.rank == 0:
        print(f"# np={p} on {os.cpu_count()} cores{' (oversubscribed)' if p > os.cpu_count() else ''}, "
              f"shared machine; medians of {args.repeats} interleaved runs")
        print(f"# bubble: {p} equal stages of {args.width} units, {args.rows} rows per minibatch")
        print("\n".join(table([("schedule", 9, ""), ("m", 4, "d"), ("measured", 9, ".3f"), ("replayed", 9, ".3f"),
                               ("theory", 7, ".3f"), ("slowest", 7, ".2f")],
                              rows)))
        print(f"# seconds per training epoch, digits, SGD batch 64, {args.hidden} hidden units; ratio to data x{p}")
        print("\n".join(table([("layout", 36, ""), ("s/epoch", 8, ".3f"), ("ratio", 6, ".2f")], epochs)))
    comm.Free()


if __name__ == "__main__":
    main()
