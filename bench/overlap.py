"""Communication hidden behind computation: Iallreduce beside NumPy work, ours and native.

    mpiexec -n 2 python -m bench.overlap [--mib 16] [--reps 15]

Contenders: ``collectives.Comm.Iallreduce`` (a progress thread runs the schedule) and
mpi4py's ``Iallreduce`` (MPI_Iallreduce) on the plain communicator.  Each repetition takes,
per contender, three samples, each after a Barrier and taken as the slowest rank's:

* ``t_comm``: start the all-reduce and wait for it at once;
* ``t_compute``: the NumPy work alone: k products of 192 x 192 float64 matrices, with k
  chosen once, at the start, so that the work lasts about as long as our ``t_comm``;
* ``t_both``: start the all-reduce, do the work, then wait.

overlap = (t_comm + t_compute - t_both) / min(t_comm, t_compute): 1 when the shorter of the
two is hidden entirely, 0 when they run one after the other, below 0 when doing both costs
more than the sum.  It is reported from the minimum and from the median times over the
repetitions.  Native MPICH advances a nonblocking collective only inside MPI calls, so it is
expected near 0 here (the work never calls MPI).  With 2 ranks on 2 cores the progress
thread shares its rank's core with the work; the work runs in BLAS, which releases the GIL.
Results go to bench/results/overlap_np<p>.json.
"""
import argparse
import os
import sys
import time

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
from mpi4py import MPI

import collectives
from bench.common import environment, stats, table, write_json

COLUMNS = [("size", 10, "d"), ("contender", 9, "s"), ("stat", 6, "s"), ("t_comm(us)", 11, ".1f"),
           ("t_compute(us)", 13, ".1f"), ("t_both(us)", 11, ".1f"), ("overlap", 7, ".2f"),
           ("#wrong", 6, "d")]
MATRIX = 192


def _slowest(comm, seconds):
    return comm.allreduce(seconds, op=MPI.MAX)


def _work(a, k):
    for _ in range(k):
        a = np.tanh(a @ a.T / MATRIX)
    return a


def _sample(comm, start, compute, k):
    """(t_comm, t_compute, t_both) of one repetition, each the slowest rank's, in seconds."""
    out = []
    for comm_part, compute_part in ((True, False), (False, True), (True, True)):
        comm.Barrier()
        t = time.perf_counter()
        req = start() if comm_part else None
        if compute_part:
            _work(compute, k)
        if req is not None:
            req.Wait()
        out.append(_slowest(comm, time.perf_counter() - t))
    return out


def _overlap(t_comm, t_compute, t_both):
    return (t_comm + t_compute - t_both) / min(t_comm, t_compute)


def main():
    """Measure and print the overlap of both contenders at one message size."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=16, help="all-reduce size in MiB of float32")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    world = MPI.COMM_WORLD
    plain = world.Dup()
    ours = collectives.Comm(world)
    p, r = world.size, world.rank
    n = int(args.mib * (1 << 20)) // 4
    send = ((np.arange(n) + r) % 1024).astype(np.float32)
    recv = {"ours": np.zeros(n, np.float32), "native": np.zeros(n, np.float32)}
    start = {"ours": lambda: ours.Iallreduce(send, recv["ours"]),
             "native": lambda: plain.Iallreduce(send, recv["native"])}
    compute = np.random.default_rng(r).random((MATRIX, MATRIX))

    # Warm up (first calls pay page faults on fresh buffers), then size the work to last
    # about as long as our all-reduce alone.
    for _ in range(3):
        for name in start:
            start[name]().Wait()
    t_comm = np.median([_sample(world, start["ours"], compute, 0)[0] for _ in range(5)])
    t_unit = np.median([_sample(world, start["ours"], compute, 5)[1] for _ in range(5)]) / 5
    k = world.bcast(max(1, round(t_comm / t_unit)), root=0)

    want = np.zeros(n, np.float32)
    plain.Allreduce(send, want)
    samples = {name: [] for name in start}
    for rep in range(args.reps):
        for name in (list(start) if rep % 2 == 0 else list(start)[::-1]):
            samples[name].append(_sample(world, start[name], compute, k))
    rows = []
    for name, s in samples.items():
        wrong = world.allreduce(int(np.count_nonzero(recv[name] != want)))
        for stat in ("min", "median"):
            t_c, t_w, t_b = (stats(col)[f"{stat}_us"] for col in zip(*s))
            rows.append({"size": n * 4, "contender": name, "stat": stat, "t_comm(us)": t_c,
                         "t_compute(us)": t_w, "t_both(us)": t_b, "overlap": _overlap(t_c, t_w, t_b),
                         "#wrong": wrong})
    if r == 0:
        print(f"# overlap: np={p}, {args.reps} repetitions, work = {k} x {MATRIX}^2 matmul, "
              f"native executor {collectives.comm.NATIVE}")
        print("\n".join(table(COLUMNS, rows)))
        path = write_json(f"overlap_np{p}.json", {"environment": environment(), "k": k,
                                                   "rows": rows, "samples_s": samples})
        print(f"# wrote {path}")
    ours.Free()
    plain.Free()


if __name__ == "__main__":
    main()
