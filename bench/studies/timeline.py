"""What the timeline costs: all-reduce latency of a Comm that records into a timeline against
one that does not (``Comm(comm, timeline=False)``), interleaved in one launch.

Run under mpiexec, e.g. ``mpiexec -bind-to core -n 2 python -m bench.studies.timeline``.  Per
size, the contenders (native MPI ``Allreduce`` as the yardstick, two Comms without the timeline
and one with it) run in random order per repetition, ``bench.default_path.measure``'s way.  The
table gives the median microseconds per call on rank 0 (``off``: the mean of the two Comms
without), the difference on - off in microseconds per call, the ratio on / off (above 1:
recording costs that much) and the ratio of the two Comms without it (``again/off``: how far
two equal Comms differ in one launch).  The trace goes to a temporary directory that is
removed afterwards; ``TL_DIR`` chooses where it is made.
"""
import argparse
import atexit
import os
import shutil
import tempfile

import numpy as np
from mpi4py import MPI

from bench.common import table
from bench.default_path import measure
from collectives import Comm

SIZES = (8, 1 << 20)


def main(argv=None):
    """Print the table on rank 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.studies.timeline", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=30, help="interleaved repetitions per size")
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    where = world.bcast(tempfile.mkdtemp(prefix="timeline-cost-", dir=os.environ.get("TL_DIR")) if world.rank == 0 else None)
    if world.rank == 0:  # registered first, so it runs after the timeline has written its files
        atexit.register(shutil.rmtree, where, True)
    # Made in this order, the Comm with the timeline between two without: at 1 MiB a Comm made
    # later ran a few percent slower than one made earlier, recording or not, so "on" is
    # compared with the mean of the two around it; "off again" / "off" is that spread.
    comms = {"native": world}
    comms["off"] = Comm(world, timeline=False)
    comms["on"] = Comm(world, timeline=os.path.join(where, "trace.json"))
    comms["off again"] = Comm(world, timeline=False)
    rows = []
    for nbytes in SIZES:
        x, y = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
        t = measure(world, comms, lambda comm: comm.Allreduce(x, y), nbytes, args.reps)
        off = (t["off"] + t["off again"]) / 2
        rows.append({"bytes": nbytes, "native us": t["native"] * 1e6, "off us": off * 1e6, "on us": t["on"] * 1e6,
                     "on-off us": (t["on"] - off) * 1e6, "on/off": t["on"] / off,
                     "again/off": t["off again"] / t["off"]})
    if world.rank == 0:
        print(f"# np={world.size}, {args.reps} interleaved repetitions, median us per call on rank 0")
        for line in table([("bytes", 9, "d"), ("native us", 10, ".2f"), ("off us", 9, ".2f"), ("on us", 9, ".2f"),
                           ("on-off us", 10, ".3f"), ("on/off", 7, ".3f"), ("again/off", 10, ".3f")], rows):
            print(line)
    for comm in (comms["off"], comms["off again"], comms["on"]):
        comm.Free()


if __name__ == "__main__":
    main()
