"""What Alltoallv's cross-rank check and its plans cost: per-call time of Alltoallv with the
check on and off, with counts fixed and with counts that change on every call, and with a
plan made for every call, beside native MPI, interleaved in one launch.

Run under mpiexec, e.g. ``mpiexec -n 2 python -m bench.studies.alltoallv``.  A size is a
rank's whole send buffer, about p blocks.  The contenders:

* ``native``: MPI's Alltoallv on the plain communicator, counts fixed;
* ``checked`` / ``unchecked``: ``Comm(comm)`` and ``Comm(comm, check=False)``, counts fixed;
* ``checked, changing``: counts drawn anew for every call from LAYOUTS layouts, cycled (a
  mixture-of-experts layer's routing), the blocks still adding up to about the size;
  ``native, changing`` the same calls through MPI;
* ``planned per call``: ``Comm(comm)`` with counts fixed and every call planned for itself,
  as a plan cache keyed by counts would plan each call whose counts are new.  The engine
  plans a call for itself when a block is over schedule.MAX_COUNT, so this contender lowers
  that limit below its largest block during its calls: its schedule has one more message per
  such block than the others'.

The contenders alternate in rounds of ``--calls`` timed calls; the table gives the median
microseconds per call over the rounds and each contender's time over ``checked``'s.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

from bench.common import interleaved, table
from collectives import Comm, schedule

SIZES = (64, 4096, 65536, 1 << 20)
LAYOUTS = 8


def layouts(p, n, rng, how_many):
    """``how_many`` count matrices (element (i, j): what rank i sends j), each row adding up to
    about ``n`` elements, uneven; the same on every rank (``rng`` seeded alike)."""
    out = []
    for _ in range(how_many):
        weights = rng.random((p, p)) + 0.25
        out.append(np.floor(weights / weights.sum(axis=1, keepdims=True) * n).astype(np.int64))
    return out


def arguments(counts, rank, send, recv):
    """Alltoallv's send and receive specs of ``rank`` for the count matrix ``counts``."""
    sent, got = counts[rank], counts[:, rank]
    return ([send, (sent, np.cumsum(sent) - sent)], [recv, (got, np.cumsum(got) - got)])


def main(argv=None):
    """Print the table on rank 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.studies.alltoallv", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    p, rank = world.size, world.rank
    checked, unchecked = Comm(world), Comm(world, check=False)
    rows = []
    for nbytes in SIZES:
        n = max(nbytes // 4, p)
        counts = layouts(p, n, np.random.default_rng(nbytes), LAYOUTS + 1)
        send, recv = np.arange(2 * n, dtype=np.float32), np.empty(2 * n, np.float32)
        fixed = arguments(counts[0], rank, send, recv)
        changing = [arguments(c, rank, send, recv) for c in counts[1:]]
        largest = int(counts[0].max()) * 4

        def run(comm, specs, calls):
            world.Barrier()
            start = time.perf_counter()
            for k in range(calls):
                comm.Alltoallv(*specs[k % len(specs)])
            return (time.perf_counter() - start) / calls

        def planned(calls):
            limit, schedule.MAX_COUNT = schedule.MAX_COUNT, max(largest - 1, 1)
            try:
                return run(checked, [fixed], calls)
            finally:
                schedule.MAX_COUNT = limit

        contenders = {
            "native": lambda calls: run(world, [fixed], calls),
            "checked": lambda calls: run(checked, [fixed], calls),
            "unchecked": lambda calls: run(unchecked, [fixed], calls),
            "native, changing": lambda calls: run(world, changing, calls),
            "checked, changing": lambda calls: run(checked, changing, calls),
            "planned per call": planned,
        }
        for measure in contenders.values():  # warm up: plans, scratch
            measure(5)
        got = interleaved(list(contenders), args.rounds, lambda name: contenders[name](args.calls))
        med = {name: float(np.median(t)) * 1e6 for name, t in got.items()}
        for name in contenders:
            rows.append({"bytes": nbytes, "contender": name, "us": med[name], "/ checked": med[name] / med["checked"]})
    checked.Free()
    unchecked.Free()
    if rank == 0:
        print(f"# Alltoallv np={p}, {args.rounds} interleaved rounds of {args.calls} calls, median us per call; "
              f"{MPI.Get_library_version().splitlines()[0].strip()}, thread level {MPI.Query_thread()}")
        for line in table([("bytes", 9, "d"), ("contender", 18, "s"), ("us", 9, ".2f"), ("/ checked", 9, ".2f")],
                          rows):
            print(line)


if __name__ == "__main__":
    main()
