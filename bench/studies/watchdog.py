"""What the stall watchdog costs when it does not fire: all-reduce latency with no timeout
(``Comm(comm, timeout=0)``) against the default one (``Comm(comm)``, 30 minutes),
interleaved in one launch.

Run under mpiexec, e.g. ``mpiexec -n 2 python -m bench.studies.watchdog``.  For each size and each
configuration (argument check on, as users get ``Comm``; off), the contenders alternate in
rounds of ``--calls`` timed calls; the table gives the median per-call microseconds over the
rounds and the ratio default / unwatched (below 1: the watched one was faster).  Native MPI
``Allreduce`` is measured in the same rounds as the yardstick.  Pure Python
(COLLECTIVES_PUREPYTHON=1) runs the same way.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

from bench.common import interleaved, table
from collectives import Comm

SIZES = (8, 1 << 20)
DEFAULT = None  # the Comm's default limit (collectives.config: COLLECTIVES_TIMEOUT)


def per_call(comm, x, calls):
    """Mean seconds per call of ``calls`` in-place all-reduces of ``x`` on ``comm``, after a barrier."""
    MPI.COMM_WORLD.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        comm.Allreduce(MPI.IN_PLACE, x)
    return (time.perf_counter() - start) / calls


def main(argv=None):
    """Print the table on rank 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.studies.watchdog", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    comms = {"native": world}
    for check in (True, False):
        for limit in (0, DEFAULT):
            comms[(check, limit)] = Comm(world, check=check, timeout=limit)
    rows = []
    for nbytes in SIZES:
        x = np.ones(nbytes // 4, np.float32)
        for name in comms:  # warm up: plans, scratch, node discovery
            per_call(comms[name], x, 5)
        got = interleaved(list(comms), args.rounds, lambda name: per_call(comms[name], x, args.calls))
        # every rank's view of a round is the same call sequence; rank 0's medians are the report
        med = {name: float(np.median(t)) * 1e6 for name, t in got.items()}
        for check in (True, False):
            off, on = med[(check, 0)], med[(check, DEFAULT)]
            rows.append({"bytes": nbytes, "check": "on" if check else "off", "native us": med["native"],
                         "no timeout us": off, "default us": on, "ratio": on / off})
    if world.rank == 0:
        print(f"# np={world.size}, {args.rounds} interleaved rounds of {args.calls} calls, median us per call; "
              "shared 2-core machine")
        for line in table([("bytes", 9, "d"), ("check", 6, "s"), ("native us", 10, ".2f"),
                           ("no timeout us", 14, ".2f"), ("default us", 11, ".2f"), ("ratio", 7, ".3f")], rows):
            print(line)


if __name__ == "__main__":
    main()
