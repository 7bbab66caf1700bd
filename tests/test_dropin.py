"""Comm as a drop-in for mpi4py: what no algorithm covers runs as MPI's own call (checked
against the same call on the plain communicator), in-place reduce-scatter keeps MPI's
semantics, derived communicators stay Comms, overlapping buffers are refused."""
import logging

import numpy as np
import pytest
from mpi4py import MPI

from collectives import Comm

PAIR = np.dtype([("value", "f4"), ("index", "i4")])  # MPI.FLOAT_INT's layout


class DLPackOnly:
    """An array exposing DLPack but not the buffer interface (as GPU arrays do)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _absmax(inbuf, inoutbuf, datatype):
    a = np.frombuffer(inbuf, np.float64)
    b = np.frombuffer(inoutbuf, np.float64)
    np.copyto(b, np.where(np.abs(a) > np.abs(b), a, b))


def _pairs(rank, n):
    x = np.zeros(n, PAIR)
    x["value"] = (np.arange(n) * (rank + 3)) % 7
    x["index"] = rank
    return x


def _native_cases(rank, size):
    """name -> (call on a communicator, returning the output to compare)."""
    long_double = np.arange(5, dtype=np.longdouble) / 3 + rank
    vector = MPI.INT.Create_vector(3, 1, 2).Commit()

    def allreduce_long_double(c):
        out = np.zeros_like(long_double)
        c.Allreduce(long_double, out)
        return out

    def allreduce_maxloc(c):
        out = np.zeros(4, PAIR)
        c.Allreduce([_pairs(rank, 4), MPI.FLOAT_INT], [out, MPI.FLOAT_INT], op=MPI.MAXLOC)
        return out

    def reduce_minloc(c):
        out = np.zeros(4, PAIR)
        c.Reduce([_pairs(rank, 4), MPI.FLOAT_INT], [out, MPI.FLOAT_INT], op=MPI.MINLOC, root=size - 1)
        return out

    def allreduce_user_op(c):
        op = MPI.Op.Create(_absmax, commute=True)
        out = np.zeros(6)
        c.Allreduce(np.sin(np.arange(6.0) + rank) * (rank + 1), out, op=op)
        op.Free()
        return out

    def bcast_vector(c):
        buf = np.full(5, -1, np.int32) if rank else np.arange(5, dtype=np.int32)
        c.Bcast([buf, 1, vector], root=0)
        return buf

    def allgather_dlpack(c):
        out = np.zeros(2 * size)
        c.Allgather(DLPackOnly(np.full(2, rank + 0.5)), DLPackOnly(out))
        return out

    def iallreduce_long_double(c):
        out = np.zeros_like(long_double)
        c.Iallreduce(long_double, out).Wait()
        return out

    return {f.__name__: f for f in (allreduce_long_double, allreduce_maxloc, reduce_minloc,
                                     allreduce_user_op, bcast_vector, allgather_dlpack,
                                     iallreduce_long_double)}


CASES = list(_native_cases(0, 1))


@pytest.mark.parametrize("case", CASES)
def test_native_delegation_matches_mpi(comm, mpi_comm, case, caplog):
    call = _native_cases(comm.rank, comm.size)[case]
    caplog.set_level(logging.INFO, logger="collectives")
    got = call(comm)
    assert comm.last_algorithm == "native"
    assert any("native MPI call" in rec.getMessage() for rec in caplog.records)
    want = call(mpi_comm)
    np.testing.assert_array_equal(got, want)
    comm.Allreduce(np.ones(3), np.zeros(3))  # and the next call takes our algorithms again
    assert comm.last_algorithm != "native"


@pytest.mark.parametrize("case", ["allreduce_long_double", "allreduce_user_op", "allgather_dlpack"])
def test_native_delegation_unchecked(mpi_comm, case):
    """With the check off (where all-reduce has a fast path) too."""
    call = _native_cases(mpi_comm.rank, mpi_comm.size)[case]
    unchecked = Comm(mpi_comm, check=False)
    got = call(unchecked)
    assert unchecked.last_algorithm == "native"
    np.testing.assert_array_equal(got, call(mpi_comm))
    unchecked.Free()


def test_native_reason_is_logged(comm, caplog):
    caplog.set_level(logging.INFO, logger="collectives")
    x = np.ones(3, np.longdouble)
    comm.Allreduce(MPI.IN_PLACE, x)
    assert x.tolist() == [comm.size] * 3
    assert "Allreduce: dtype float128 has no kernel; native MPI call" in caplog.messages \
        or "Allreduce: dtype float96 has no kernel; native MPI call" in caplog.messages


def test_native_on_some_ranks_only_raises_everywhere(comm, mpi_comm):
    """Rank 0 would delegate (a user-defined op), the others not: an error on every rank, no hang."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    op = MPI.Op.Create(_absmax, commute=True) if comm.rank == 0 else MPI.MAX
    with pytest.raises(ValueError, match="allreduce: arguments differ across ranks: algorithm "
                                         r"ranges .*native.*MPI's own call") as info:
        comm.Allreduce(np.ones(3), np.zeros(3), op=op)
    assert len(set(mpi_comm.allgather(str(info.value)))) == 1
    if comm.rank == 0:
        op.Free()
    comm.Allreduce(np.ones(3), np.zeros(3))  # and the communicator still works


@pytest.mark.parametrize("block", [False, True])
def test_in_place_reduce_scatter_leaves_the_rest(comm, mpi_comm, block):
    """Result at the start of recvbuf, everything after it untouched, exactly as MPI does."""
    p, r = comm.size, comm.rank
    counts = [2] * p if block else [i + 1 for i in range(p)]
    start = np.arange(sum(counts), dtype=np.int32) * (r + 1) + 1
    got, want = start.copy(), start.copy()
    if block:
        comm.Reduce_scatter_block(MPI.IN_PLACE, got)
        mpi_comm.Reduce_scatter_block(MPI.IN_PLACE, want)
    else:
        comm.Reduce_scatter(MPI.IN_PLACE, got, counts)
        mpi_comm.Reduce_scatter(MPI.IN_PLACE, want, counts)
    np.testing.assert_array_equal(got[:counts[r]], want[:counts[r]])
    np.testing.assert_array_equal(got[counts[r]:], start[counts[r]:])


def _check_derived(derived, parent, mpi_derived):
    assert isinstance(derived, Comm)
    assert derived.algorithms == parent.algorithms and derived.check == parent.check
    x = np.arange(7.0) + derived.rank
    got, want = np.zeros(7), np.zeros(7)
    derived.Allreduce(x, got)
    mpi_derived.Allreduce(x, want)
    np.testing.assert_array_equal(got, want)
    assert derived.last_algorithm.startswith("allreduce_")


def test_derived_communicators_are_comms(mpi_comm):
    parent = Comm(mpi_comm, algorithms={"allreduce": "ring"}, check=False)
    r, p = parent.rank, parent.size
    made = {
        "Dup": (parent.Dup(), mpi_comm.Dup()),
        "Clone": (parent.Clone(), mpi_comm.Clone()),
        "Split": (parent.Split(r % 2, -r), mpi_comm.Split(r % 2, -r)),
        "Split_type": (parent.Split_type(MPI.COMM_TYPE_SHARED), mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)),
        "Create": (parent.Create(mpi_comm.group), mpi_comm.Create(mpi_comm.group)),
        "Create_group": (parent.Create_group(mpi_comm.group), mpi_comm.Create_group(mpi_comm.group)),
        "Create_cart": (parent.Create_cart([p], periods=[True]), mpi_comm.Create_cart([p], periods=[True])),
    }
    for name, (derived, mpi_derived) in made.items():
        assert derived.size == mpi_derived.size and derived.rank == mpi_derived.rank, name
        _check_derived(derived, parent, mpi_derived)
    cart, mpi_cart = made["Create_cart"]
    assert isinstance(cart.comm, MPI.Cartcomm)
    assert cart.Get_coords(cart.rank) == mpi_cart.Get_coords(r)
    assert cart.Shift(0, 1) == mpi_cart.Shift(0, 1)
    for derived, mpi_derived in made.values():
        derived.Free()
        assert derived.comm == MPI.COMM_NULL  # it owned the communicator it made
        mpi_derived.Free()
    first = mpi_comm.group.Incl([0])
    only_first = parent.Create(first)
    assert (only_first == MPI.COMM_NULL) == (r != 0)
    if r == 0:
        assert isinstance(only_first, Comm) and only_first.size == 1
        only_first.Free()
    first.Free()
    parent.Free()


def test_overlapping_buffers_raise(comm, mpi_comm):
    a = np.arange(6.0)
    with pytest.raises(ValueError, match=r"Allreduce: sendbuf \(bytes .*\) and recvbuf \(bytes .*\) overlap"):
        comm.Allreduce(a[:4], a[2:])
    with pytest.raises(ValueError, match="Reduce_scatter_block: sendbuf .* overlap"):
        c = np.arange(2.0 * comm.size + 2)
        comm.Reduce_scatter_block(c[:2 * comm.size], c[1:3])
    with pytest.raises(ValueError, match="Allgather: sendbuf .* overlap"):
        b = np.zeros(2 * comm.size)
        comm.Allgather(b[:2], b)
    # The very same buffer as send and receive buffer acts as MPI.IN_PLACE.
    same, in_place = np.arange(5.0) + comm.rank, np.arange(5.0) + comm.rank
    comm.Allreduce(same, same)
    mpi_comm.Allreduce(MPI.IN_PLACE, in_place)
    np.testing.assert_array_equal(same, in_place)


def test_datatypes_named_in_errors(comm, mpi_comm):
    buf = np.zeros(10, np.uint8)
    with pytest.raises(ValueError, match="buf: 10 bytes is not a whole number of MPI_FLOAT"):
        comm.Bcast([buf, MPI.FLOAT])
    # With a count the buffer only needs to hold that many, as in mpi4py.
    got = np.arange(10, dtype=np.uint8) if comm.rank == 0 else np.zeros(10, np.uint8)
    want = got.copy()
    comm.Bcast([got, 2, MPI.FLOAT])
    mpi_comm.Bcast([want, 2, MPI.FLOAT])
    np.testing.assert_array_equal(got, want)
    assert comm.last_algorithm.startswith("bcast_")
