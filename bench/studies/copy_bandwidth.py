"""A float32 all-reduce's bus bandwidth against a copy of the same bytes on one core.

The default ``Comm``'s ``Allreduce``, native MPI's and ``np.copyto`` of the vector run
interleaved in one launch, each repetition after a barrier; a call's time is the slowest
rank's.  The bus bandwidth is 2 (p - 1) / p n / t (nccl-tests' busbw), the copy's n / t.
Prints GB/s at the median of each, ours / copy, and native / ours (above 1, ours is faster).

    mpiexec -bind-to core -n 2 python -m bench.studies.copy_bandwidth [--bytes 16M] [--reps 15]
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import collectives
from bench.common import parse_bytes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=parse_bytes, default=16 << 20, help="vector size (default 16M)")
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions, after two untimed")
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    ours = collectives.Comm(world)
    n = args.bytes // 4
    send = np.random.default_rng(world.rank).random(n, dtype=np.float32)
    recv = np.empty_like(send)
    source, target = np.ones_like(send), np.empty_like(send)
    runs = {"ours": lambda: ours.Allreduce(send, recv), "native": lambda: world.Allreduce(send, recv),
            "copy": lambda: np.copyto(target, source)}
    times = {name: [] for name in runs}
    for rep in range(args.reps + 2):
        for name, run in runs.items():
            world.Barrier()
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
            if rep >= 2:
                times[name].append(took if name == "copy" else world.allreduce(took, op=MPI.MAX))
    if world.rank == 0:
        nbytes, p = 4 * n, world.size
        median = {name: float(np.median(t)) for name, t in times.items()}
        bus = {name: 2 * (p - 1) / p * nbytes / median[name] / 1e9 for name in ("ours", "native")}
        copy = nbytes / median["copy"] / 1e9
        print(f"np={p} {nbytes} B: ours {bus['ours']:.2f} GB/s, native {bus['native']:.2f} GB/s, "
              f"copy {copy:.2f} GB/s; ours / copy {bus['ours'] / copy:.2f}, "
              f"native / ours {median['native'] / median['ours']:.2f}")


if __name__ == "__main__":
    main()
