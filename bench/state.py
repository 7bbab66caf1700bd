"""Which state the machine is in: MPI's out-of-place Allgather of 1 MiB beside its in-place one.

    mpiexec -n 2 python -m collectives.bench.state
    until mpiexec -n 2 python -m collectives.bench.state; do sleep 20; done   # wait for the fast state

On the 2-core virtual machine of docs/results/, MPICH 5.0.2's out-of-place
Allgather of 1 MiB at np=2 took 78-82 us, except for a minute or two after a launch that had
moved large buffers: then it took 300-390 us, and its Allreduce of 1 MiB 600-630 us instead of
170-180 us. Its in-place Allgather (the same messages, without copying the own block into the
result first), a Sendrecv and memcpy kept their speed in the same processes. Native ratios
measured in that state flatter ours, so the records in docs/results/ say which launches
waited for this probe to read the fast state.

Prints both medians and their ratio on rank 0; exits 1 when out-of-place / in-place is above
LIMIT (the slow state: 6.5-8.5 here, against 1.7-1.8 in the fast state), else 0, on every
rank.  Needs at least 2 ranks.
"""
import sys

import numpy as np
from mpi4py import MPI

from .common import interleaved, stats

NBYTES = 1 << 20
REPS = 30
LIMIT = 3.0


def medians_us(comm, calls, reps=REPS):
    """{name: median microseconds} of each of ``calls`` {name: call}, after three warm-up calls
    each: ``reps`` rounds in which every call runs once after a Barrier (common.py's
    ``interleaved``, so a passing load falls on both alike), timed on rank 0's clock."""
    for call in calls.values():
        for _ in range(3):
            call()

    def timed(name):
        comm.Barrier()
        t0 = MPI.Wtime()
        calls[name]()
        return MPI.Wtime() - t0

    return {name: stats(times)["median_us"] for name, times in interleaved(calls, reps, timed).items()}


def slow(out_of_place_us, in_place_us, limit=LIMIT):
    """Whether the out-of-place time is more than ``limit`` times the in-place one."""
    return out_of_place_us > limit * in_place_us


def main(comm=MPI.COMM_WORLD):
    """Measure, print on rank 0, and return the exit status (1: slow state; 2: one rank)."""
    if comm.size < 2:
        print("collectives.bench.state: needs at least 2 ranks (mpiexec -n 2 python -m collectives.bench.state)",
              file=sys.stderr)
        return 2
    p = comm.size
    block = np.ones(NBYTES // 4 // p, np.float32)
    whole = np.empty(block.size * p, np.float32)
    us = medians_us(comm, {"out": lambda: comm.Allgather(block, whole),
                           "in": lambda: comm.Allgather(MPI.IN_PLACE, whole)})
    out_us, in_us = comm.bcast((us["out"], us["in"]))
    state = slow(out_us, in_us)
    if comm.rank == 0:
        library = " ".join(MPI.Get_library_version().splitlines()[0].split())
        print(f"collectives.bench.state: np={p} {library}: Allgather of "
              f"{NBYTES >> 20} MiB out of place {out_us:.1f} us, in place {in_us:.1f} us, "
              f"ratio {out_us / in_us:.2f}: {'slow' if state else 'fast'} state")
    return int(state)


if __name__ == "__main__":
    sys.exit(main())
