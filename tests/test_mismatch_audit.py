"""Calls that differ across ranks, through every entry point, with the check on (the default):
every rank raises, none hangs, and the same Comm then still computes what native MPI does.

Rank 0 of the communicator calls differently from the others.  Complements test_errors.py
(sizes, dtype, op and root of the blocking calls; one rank's invalid arguments) and
test_check_overlap.py (the overlapped all-reduce): here the nonblocking forms, the
v-variants, a call delegated to MPI on one rank only, a count of 0 on one rank,
Reduce_scatter without counts, the functional family, and a Comm's first all-reduce under
a node layout.  A hang shows as the launch's timeout.
"""
import re

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import functional as F

BIG = 20000  # float64 elements: far above FUSED_BYTES, a header-only agreement


def _ones(n, dtype=np.float64):
    return np.ones(n, dtype)


def _zeros(n, dtype=np.float64):
    return np.zeros(n, dtype)


def _works(c, mpi_comm):
    """The Comm still all-reduces (fused and scheduled sizes) and broadcasts as MPI does."""
    for n in (5, BIG):
        x = np.arange(n, dtype=np.float64) + c.rank
        got, want = np.empty(n), np.empty(n)
        c.Allreduce(x, got)
        mpi_comm.Allreduce(x, want)
        np.testing.assert_array_equal(got, want)
    buf = np.arange(7.0) if c.rank == 0 else np.zeros(7)
    c.Bcast(buf)
    np.testing.assert_array_equal(buf, np.arange(7.0))


def _need_two(c):
    if c.size < 2:
        pytest.skip("needs two ranks")


# (call(c, odd), what the one message every rank raises says): ``odd`` on rank 0.
MISMATCHES = {
    "ibcast-root": (lambda c, odd: c.Ibcast(_zeros(4), root=1 if odd else 0).wait(), "root ranges 0..1"),
    "iallgather-count": (lambda c, odd: c.Iallgather(_ones(2 if odd else 3), _zeros((2 if odd else 3) * c.size))
                         .wait(), "count0 ranges 2..3"),
    "ireduce_scatter_block-count": (lambda c, odd: c.Ireduce_scatter_block(_ones(c.size * (1 if odd else 2)),
                                                                           _zeros(1 if odd else 2)).wait(),
                                    "count0 ranges 1..2"),
    "ibarrier-iallreduce": (lambda c, odd: c.Ibarrier().wait() if odd else c.Iallreduce(_ones(4), _zeros(4)).wait(),
                            "ranks called different collectives"),
    "allgatherv-counts": (lambda c, odd: c.Allgatherv(_ones(1), [_zeros(c.size + 1), [1] * (c.size - 1) + [2 if odd else 1],
                                                                 MPI.DOUBLE]), "ranges 1..2"),
    "gatherv-counts": (lambda c, odd: c.Gatherv(_ones(1), [_zeros(c.size + 1), [1] * (c.size - 1) + [2], MPI.DOUBLE]
                                                if odd else None), "count.* ranges 1..2"),
    "scatterv-counts": (lambda c, odd: c.Scatterv([_ones(c.size + 1), [1] * (c.size - 1) + [2], MPI.DOUBLE]
                                                  if odd else None, _zeros(1)), "count.* ranges 1..2"),
    # one rank's call goes to MPI's own (long double, MAXLOC), the others' to an algorithm
    "allreduce-native-small": (lambda c, odd: c.Allreduce(_ones(4, np.longdouble if odd else np.float64),
                                                          _zeros(4, np.longdouble if odd else np.float64)), "native"),
    "allreduce-native-big": (lambda c, odd: c.Allreduce(_ones(BIG, np.longdouble if odd else np.float64),
                                                        _zeros(BIG, np.longdouble if odd else np.float64)), "native"),
    "reduce-native": (lambda c, odd: c.Reduce(_ones(4), _zeros(4), op=MPI.MAXLOC if odd else MPI.MAX), "native"),
    # a count of 0 on one rank: its call has nothing to move, the others' have
    "allreduce-zero": (lambda c, odd: c.Allreduce(_ones(0 if odd else 4), _zeros(0 if odd else 4)), "count ranges 0..4"),
    "bcast-zero": (lambda c, odd: c.Bcast(_zeros(0 if odd else 4)), "nbytes ranges 0..32"),
    "reduce-zero": (lambda c, odd: c.Reduce(_ones(0 if odd else 4), _zeros(0 if odd else 4)), "count ranges 0..4"),
    "allgather-zero": (lambda c, odd: c.Allgather(_ones(0 if odd else 1), _zeros(0 if odd else c.size)),
                       "ranges 0..1"),
    "reduce_scatter_block-zero": (lambda c, odd: c.Reduce_scatter_block(_ones(0 if odd else c.size),
                                                                        _zeros(0 if odd else 1)), "ranges 0..1"),
    # above the fused sizes: header-only agreements before different schedules
    "bcast-algorithm": (lambda c, odd: c.Bcast(_zeros(BIG), algorithm="binomial" if odd else "scatter_allgather"),
                        "algorithm ranges"),
    "barrier-allreduce": (lambda c, odd: c.Barrier() if odd else c.Allreduce(_ones(BIG), _zeros(BIG)),
                          "ranks called different collectives"),
    "bcast-reduce": (lambda c, odd: c.Bcast(_zeros(BIG)) if odd else c.Reduce(_ones(BIG), _zeros(BIG)),
                     "ranks called different collectives"),
    # Reduce_scatter without counts learns them in an exchange before its agreement
    "reduce_scatter-allreduce": (lambda c, odd: c.Reduce_scatter(_ones(c.size), _zeros(1)) if odd
                                 else c.Allreduce(_ones(4), _zeros(4)), "ranks called different collectives"),
    "reduce_scatter-with-counts": (lambda c, odd: c.Reduce_scatter(_ones(c.size), _zeros(1),
                                                                   recvcounts=None if odd else [1] * c.size),
                                   "ranks called different collectives"),
    "ireduce_scatter-iallreduce": (lambda c, odd: (c.Ireduce_scatter(_ones(c.size), _zeros(1)) if odd
                                                   else c.Iallreduce(_ones(4), _zeros(4))).wait(),
                                   "ranks called different collectives"),
    # the prefix reductions: Scan and Exscan are different collectives
    "iscan-count": (lambda c, odd: c.Iscan(_ones(2 if odd else 3), _zeros(2 if odd else 3)).wait(),
                    "count ranges 2..3"),
    "scan-exscan": (lambda c, odd: (c.Exscan if odd else c.Scan)(_ones(BIG), _zeros(BIG)),
                    "ranks called different collectives"),
    # the functional family
    "functional-count": (lambda c, odd: F.allreduce(c, _ones(4 if odd else 5)), "count ranges 4..5"),
    "functional-root": (lambda c, odd: F.gather(c, _ones(2), root=1 if odd else 0), "root ranges 0..1"),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_mismatch_raises_the_same_error_everywhere(comm, mpi_comm, case):
    _need_two(comm)
    call, says = MISMATCHES[case]
    with pytest.raises(ValueError, match="arguments differ across ranks") as info:
        call(comm, comm.rank == 0)
    messages = mpi_comm.allgather(str(info.value))
    assert messages == [messages[0]] * comm.size, messages
    assert re.search(says, messages[0]), messages[0]
    _works(comm, mpi_comm)


# (call(c, bad), what the other ranks raise): the call is invalid on rank 0 only, which raises
# its own error; the others must not wait for it.
LOCAL = {
    "functional-allreduce-out": lambda c, bad: F.allreduce(c, _ones(4), out=_zeros(5) if bad else None),
    "functional-iallreduce-out": lambda c, bad: F.iallreduce(c, _ones(4), out=_zeros(5) if bad else None).wait(),
    "functional-bcast-out": lambda c, bad: F.bcast(c, _ones(4), out=_zeros(5) if bad else None),
    "functional-allgather-out": lambda c, bad: F.allgather(c, _ones(4), out=_zeros(5) if bad else None),
    "functional-reduce-out": lambda c, bad: F.reduce(c, _ones(4), out=_zeros(5) if bad else None),
    "functional-reduce_scatter-counts": lambda c, bad: F.reduce_scatter(
        c, _ones(c.size), counts=[2] + [1] * (c.size - 1) if bad else None),
    "functional-reduce_scatter-0d": lambda c, bad: F.reduce_scatter(c, np.float64(1) if bad else _ones(c.size)),
    "reduce_scatter-read-only": lambda c, bad: c.Reduce_scatter(
        _ones(c.size), np.frombuffer(bytes(8)) if bad else _zeros(1)),
    "ireduce_scatter-read-only": lambda c, bad: c.Ireduce_scatter(
        _ones(c.size), np.frombuffer(bytes(8)) if bad else _zeros(1)).wait(),
    "allreduce-unknown-algorithm-big": lambda c, bad: c.Allreduce(_ones(BIG), _zeros(BIG),
                                                                  algorithm="fastest" if bad else None),
    "allreduce-list": lambda c, bad: c.Allreduce([1.0, 2.0] if bad else _ones(2), _zeros(2)),
    "allgatherv-too-many-counts": lambda c, bad: c.Allgatherv(
        _ones(1), [_zeros(c.size), [1] * (c.size + bad), MPI.DOUBLE]),
}


@pytest.mark.parametrize("case", list(LOCAL))
def test_bad_arguments_on_one_rank_raise_everywhere(comm, mpi_comm, case):
    _need_two(comm)
    bad = comm.rank == 0
    with pytest.raises((ValueError, TypeError)) as info:
        LOCAL[case](comm, bad)
    if bad:
        assert "another rank" not in str(info.value)
    else:
        assert "invalid arguments on another rank" in str(info.value)
    _works(comm, mpi_comm)


def test_functional_scatter_of_an_unusable_root_array(comm, mpi_comm):
    """The root's array cannot even become an ndarray (ragged rows): every rank raises."""
    _need_two(comm)
    with pytest.raises(ValueError, match="scatter: ") as info:
        F.scatter(comm, [[1.0]] + [[1.0, 2.0]] * (comm.size - 1) if comm.rank == 0 else None)
    assert ("inhomogeneous" in str(info.value)) == (comm.rank == 0)
    _works(comm, mpi_comm)


# Calls that differ in form only (in place on some ranks, a strided input the fast path
# declines on one rank): MPI's result, on every rank.
SAME_RESULT = {
    "allreduce-in-place-small": 5,
    "allreduce-in-place-big": BIG,
    "allreduce-strided-small": -5,
    "allreduce-strided-big": -BIG,
}


@pytest.mark.parametrize("case", list(SAME_RESULT))
def test_calls_that_differ_in_form_only_agree(comm, mpi_comm, case):
    n = abs(SAME_RESULT[case])
    x = np.arange(n, dtype=np.float64) * (comm.rank + 1)
    want = np.empty(n)
    mpi_comm.Allreduce(x, want)
    if comm.rank == 0 and "in-place" in case:
        got = x.copy()
        comm.Allreduce(MPI.IN_PLACE, got)
    elif comm.rank == 0:
        strided = np.zeros((n, 2))
        strided[:, 0] = x
        got = np.empty(n)
        comm.Allreduce(strided[:, 0], got)
    else:
        got = np.empty(n)
        comm.Allreduce(x, got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.mpi(min_size=4)
@pytest.mark.parametrize("n", [64, 1 << 17], ids=["fused", "scheduled"])
@pytest.mark.parametrize("spec", ["2x2", "2"])
def test_first_allreduce_against_iallreduce_under_nodes(monkeypatch, spec, n):
    """On a fresh Comm over several nodes (it found them when made), Allreduce on some ranks
    and Iallreduce with the same arguments on the others are one description: the same
    algorithm, node-aware or not, and native's result everywhere."""
    world = MPI.COMM_WORLD
    if spec == "2x2" and world.size != 4:
        pytest.skip("layout 2x2 needs 4 ranks")
    monkeypatch.setenv("COLLECTIVES_NODE", spec)
    with collectives.Comm(world, timeout=0) as c:
        x = np.arange(n, dtype=np.float32) % 7 + c.rank
        got, want = np.empty_like(x), np.empty_like(x)
        if c.rank == 0:
            c.Iallreduce(x, got).wait()
        else:
            c.Allreduce(x, got)
        world.Allreduce(x, want)
        np.testing.assert_array_equal(got, want)
        names = world.allgather(c.last_algorithm)
        assert names == [names[0]] * world.size, names
        _works(c, world)
