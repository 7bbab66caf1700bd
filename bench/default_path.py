"""The path users get: native MPI, the default ``Comm(w)`` (check on) and ``Comm(w, check=False)``.

    mpiexec -n 2 python -m collectives.bench.default_path [--reps 30]

Every row times the three contenders interleaved in one launch: each repetition runs a
batch of calls per contender, in a fresh random order (the same on every rank), after a
native barrier; the table gives
the median per-call time over repetitions on rank 0 and the ratio native / ours (above 1:
ours is faster), and the algorithm the default ran.  Rows: float32 all-reduce at 8 B, 1 KiB,
8 KiB, 64 KiB, 1 MiB and 16 MiB, the buffer-spec form ``[buf, count, MPI.FLOAT]`` at 8 B, and
bcast, reduce, allgather and barrier at 8 B.
"""
import argparse

import numpy as np
from mpi4py import MPI

from collectives import Comm
from .common import environment, human, table

ALLREDUCE_BYTES = (8, 1 << 10, 8 << 10, 64 << 10, 1 << 20, 16 << 20)


def cases(p):
    """(row name, bytes, call(comm)) for every row; ``comm`` is native or a Comm."""
    out = []
    for nbytes in ALLREDUCE_BYTES:
        x = np.ones(nbytes // 4, np.float32)
        y = np.empty_like(x)
        out.append(("allreduce", nbytes, lambda c, x=x, y=y: c.Allreduce(x, y)))
    x, y = np.ones(2, np.float32), np.empty(2, np.float32)
    out.append(("allreduce [buf, count, MPI.FLOAT]", 8,
                lambda c: c.Allreduce([x, 2, MPI.FLOAT], [y, 2, MPI.FLOAT])))
    out.append(("bcast", 8, lambda c: c.Bcast(y)))
    out.append(("reduce", 8, lambda c: c.Reduce(x, y)))
    g = np.empty(2 * p, np.float32)
    out.append(("allgather", 8, lambda c: c.Allgather(x, g)))
    out.append(("barrier", 0, lambda c: c.Barrier()))
    return out


def measure(world, contenders, call, nbytes, reps):
    """Median seconds per call of each contender, from ``reps`` interleaved batches.

    The order is random per repetition, not rotated: rotating keeps the cycle, so each
    contender always ran right after the same one and paid what that one left in the caches.
    At 16 MiB, np=2, the contender after native's Allreduce took about 90 us (4-5%) longer,
    whichever it was (swapping the two Comms in the cycle moved the loss with them).
    """
    iters = int(max(3, min(300, (8 << 20) // max(nbytes, 1))))
    samples = {name: [] for name in contenders}
    names = list(contenders)
    for name in names:  # warm-up: plans, scratch and page faults out of the timings
        for _ in range(3):
            call(contenders[name])
    orders = np.random.default_rng(0)  # a fixed seed: every rank draws the same orders
    for _ in range(reps):
        for k in orders.permutation(len(names)):
            name = names[k]
            comm = contenders[name]
            world.Barrier()
            t0 = MPI.Wtime()
            for _ in range(iters):
                call(comm)
            samples[name].append((MPI.Wtime() - t0) / iters)
    return {name: float(np.median(s)) for name, s in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=30, help="interleaved repetitions per row")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    contenders = {"native": world.Dup(), "default": Comm(world), "check=False": Comm(world, check=False)}
    rows = []
    for name, nbytes, call in cases(world.size):
        t = measure(world, contenders, call, nbytes, args.reps)
        rows.append({"collective": name, "bytes": human(nbytes), "native_us": t["native"] * 1e6,
                     "default_us": t["default"] * 1e6, "default_x": t["native"] / t["default"],
                     "unchecked_us": t["check=False"] * 1e6,
                     "unchecked_x": t["native"] / t["check=False"],
                     "default/unchecked": t["check=False"] / t["default"],
                     # What ran: the fused checked exchange (collectives.exchange) or a schedule.
                     "default_ran": contenders["default"].last_algorithm})
    if world.rank == 0:
        env = environment()
        print(f"# collectives.bench.default_path: np={world.size}, {env['mpi_library']}, "
              f"MPIR_CVAR_DEVICE_COLLECTIVES={env['env']['MPIR_CVAR_DEVICE_COLLECTIVES']}, "
              f"median of {args.reps} interleaved repetitions; x = native / ours")
        columns = [("collective", 34, "s"), ("bytes", 8, "s"), ("native_us", 10, ".2f"),
                   ("default_us", 11, ".2f"), ("default_x", 9, ".2f"), ("unchecked_us", 12, ".2f"),
                   ("unchecked_x", 11, ".2f"), ("default/unchecked", 17, ".2f"), ("default_ran", 28, "s")]
        print("\n".join(table(columns, rows)))
    for name, comm in contenders.items():
        comm.Free()


if __name__ == "__main__":
    main()
