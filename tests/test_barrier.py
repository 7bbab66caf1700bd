"""Every barrier algorithm really synchronises: no rank leaves before every rank has entered.

Before entering, each rank writes a flag into a one-sided window on every rank and
completes the write there (Unlock returns only when the data is at the target).  After
leaving, each rank reads its own window: every flag of the round must be set.  In each
round one rank dawdles before writing, so a barrier that lets anyone out early is caught
with that rank's flag missing.  No clock is read; the sleep only widens the window.
"""
import time

import numpy as np
import pytest
from mpi4py import MPI

import collectives

ALGORITHMS = collectives.names("barrier") + ["barrier_fused"] + collectives.shm_names("barrier")


@pytest.fixture(scope="module")
def unchecked(mpi_comm):
    """A Comm without the argument check, whose all-reduce would synchronise by itself."""
    c = collectives.Comm(mpi_comm, check=False)
    yield c
    c.Free()


@pytest.fixture
def flags(mpi_comm):
    """A window of one int per rank on every rank, zeroed."""
    win = MPI.Win.Allocate(mpi_comm.size * 4, 4, comm=mpi_comm)
    np.frombuffer(win.tomemory(), np.int32)[:] = 0
    mpi_comm.Barrier()
    yield win
    win.Free()


def _enter(win, p, r, value):
    mine = np.array([value], np.int32)
    for t in range(p):
        win.Lock(t, MPI.LOCK_SHARED)
        win.Put(mine, t, target=r)
        win.Unlock(t)


def _seen(win, p, r):
    got = np.zeros(p, np.int32)
    win.Lock(r, MPI.LOCK_SHARED)
    win.Get(got, r)
    win.Unlock(r)
    return got


@pytest.mark.parametrize("nonblocking", [False, True], ids=["Barrier", "Ibarrier"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_barrier_synchronises(unchecked, mpi_comm, flags, algorithm, nonblocking):
    comm = unchecked
    p, r = comm.size, comm.rank
    early = []
    for late in range(p):
        value = late + 1
        if r == late:
            time.sleep(0.05)
        _enter(flags, p, r, value)
        if nonblocking:
            comm.Ibarrier(algorithm=algorithm).wait()
        else:
            comm.Barrier(algorithm=algorithm)
        missing = np.flatnonzero(_seen(flags, p, r) != value)
        if missing.size:
            early.append(f"rank {r} left round {late} before ranks {missing.tolist()} entered")
        # Nobody may write the next round's flags while someone still reads this round's.
        mpi_comm.Barrier()
    # Every rank fails alike, so none runs ahead into the next test's collectives.
    early = sum(mpi_comm.allgather(early), [])
    assert not early, f"{algorithm}: " + "; ".join(early)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_barrier_repeated(comm, algorithm):
    for _ in range(50):
        comm.Barrier(algorithm=algorithm)
    reqs = [comm.Ibarrier(algorithm=algorithm) for _ in range(10)]
    collectives.Request.waitall(reqs)


def test_barrier_unknown_algorithm(comm):
    with pytest.raises(ValueError, match="unknown barrier algorithm"):
        comm.Barrier(algorithm="tree")
