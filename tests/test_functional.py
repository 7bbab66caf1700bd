"""collectives.functional against native MPI, with Comms and plain mpi4py communicators."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import functional as F
from collectives.ops import MPI_OP

SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4)]


def _data(shape, r, dtype=np.float64):
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n) % 13 + 3 * r).astype(dtype).reshape(shape)


def _native(mpi_comm, x, op=MPI.SUM):
    want = np.empty_like(x)
    mpi_comm.Allreduce(np.ascontiguousarray(x), want, op=op)
    return want


@pytest.fixture(params=["comm", "mpi4py"])
def either(request, comm, mpi_comm):
    """The same communicator as a collectives.Comm or as the plain mpi4py one."""
    return comm if request.param == "comm" else mpi_comm


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["sum", "max", MPI.MIN, "PROD"])
def test_allreduce(either, mpi_comm, shape, op):
    x = _data(shape, mpi_comm.rank)
    y = F.allreduce(either, x, op=op)
    name = op if isinstance(op, str) else "min"
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y, _native(mpi_comm, x, MPI_OP[name.lower()]))
    np.testing.assert_array_equal(x, _data(shape, mpi_comm.rank))  # input untouched


def test_allreduce_out_in_place_and_layouts(either, mpi_comm):
    r = mpi_comm.rank
    x = _data((4, 6), r, np.int32)
    want = _native(mpi_comm, x)
    out = np.empty_like(x)
    assert F.allreduce(either, x, out=out) is out
    np.testing.assert_array_equal(out, want)
    y = x.copy()
    assert F.allreduce(either, y, out=y) is y  # in place
    np.testing.assert_array_equal(y, want)
    fortran = np.asfortranarray(x)
    np.testing.assert_array_equal(F.allreduce(either, fortran), want)
    np.testing.assert_array_equal(F.allreduce(either, x[:, ::2]), want[:, ::2])  # strided input
    out_f = np.empty((4, 6), np.int32, order="F")
    F.allreduce(either, x, out=out_f)
    np.testing.assert_array_equal(out_f, want)
    np.testing.assert_array_equal(F.allreduce(either, [1, 2, 3]), np.array([1, 2, 3]) * mpi_comm.size)
    with pytest.raises(ValueError, match="out has shape"):
        F.allreduce(either, x, out=np.empty(5, np.int32))


@pytest.mark.parametrize("algorithm", collectives.names("allreduce"))
def test_allreduce_algorithms(either, mpi_comm, algorithm):
    x = _data((33,), mpi_comm.rank)
    np.testing.assert_array_equal(F.allreduce(either, x, algorithm=algorithm), _native(mpi_comm, x))


def test_wrapping_is_cached_and_freed_with_the_communicator(mpi_comm):
    dup = mpi_comm.Dup()
    wrapped = collectives.wrap(dup)
    assert collectives.wrap(dup) is wrapped
    assert collectives.wrap(wrapped) is wrapped
    F.allreduce(dup, np.ones(3))
    wrapped.Free()  # a wrapper freed by hand is replaced on next use
    rewrapped = collectives.wrap(dup)
    assert rewrapped is not wrapped and collectives.wrap(dup) is rewrapped
    np.testing.assert_array_equal(F.allreduce(dup, np.ones(3)), np.full(3, mpi_comm.size))
    dup.Free()
    assert rewrapped._coll == MPI.COMM_NULL
    with pytest.raises(TypeError, match="expected an mpi4py intracommunicator"):
        collectives.wrap("world")


def test_allreduce_follows_the_communicator_it_is_given(mpi_comm):
    """Calls alternating between communicators of different groups, and a communicator freed
    and another made (MPI may hand out the freed one's handle again), each reduce over the
    ranks of the communicator passed."""
    half = mpi_comm.Split(mpi_comm.rank % 2, mpi_comm.rank)
    x = np.full(3, mpi_comm.rank + 1.0)
    for _ in range(2):
        np.testing.assert_array_equal(F.allreduce(half, x), _native(half, x))
        np.testing.assert_array_equal(F.allreduce(mpi_comm, x), _native(mpi_comm, x))
    for parent in (mpi_comm, half, mpi_comm, half):
        dup = parent.Dup()
        np.testing.assert_array_equal(F.allreduce(dup, x), _native(parent, x))
        dup.Free()
    half.Free()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bcast(either, mpi_comm, shape):
    p, r = mpi_comm.size, mpi_comm.rank
    root = p // 2
    x = _data(shape, r, np.int16)
    y = F.bcast(either, x, root=root)
    np.testing.assert_array_equal(y, _data(shape, root, np.int16))
    np.testing.assert_array_equal(x, _data(shape, r, np.int16))


def test_reduce(either, mpi_comm):
    p, r = mpi_comm.size, mpi_comm.rank
    x = _data((5, 3), r)
    want = np.empty_like(x)
    mpi_comm.Reduce(x, want, op=MPI.MAX, root=p - 1)
    got = F.reduce(either, x, op="max", root=p - 1)
    if r == p - 1:
        np.testing.assert_array_equal(got, want)
    else:
        assert got is None


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_allgather(either, mpi_comm, shape):
    p, r = mpi_comm.size, mpi_comm.rank
    got = F.allgather(either, _data(shape, r))
    assert got.shape == (p, *shape)
    for i in range(p):
        np.testing.assert_array_equal(got[i], _data(shape, i))


@pytest.mark.parametrize("rows", [0, 1, 7, 12])
def test_reduce_scatter(either, mpi_comm, rows):
    p, r = mpi_comm.size, mpi_comm.rank
    x = _data((rows, 3), r)
    total = _native(mpi_comm, x)
    got = F.reduce_scatter(either, x)
    counts = [rows // p + (i < rows % p) for i in range(p)]
    start = sum(counts[:r])
    np.testing.assert_array_equal(got, total[start:start + counts[r]])
    uneven = [rows] + [0] * (p - 1)
    got = F.reduce_scatter(either, x, op="sum", counts=uneven)
    np.testing.assert_array_equal(got, total if r == 0 else total[:0])
    with pytest.raises(ValueError, match="counts .* must be"):
        F.reduce_scatter(either, x, counts=[rows + 1] * p)


def test_gather_and_scatter(either, mpi_comm):
    p, r = mpi_comm.size, mpi_comm.rank
    root = p - 1
    got = F.gather(either, _data((2, 3), r), root=root)
    if r == root:
        assert got.shape == (p, 2, 3)
        for i in range(p):
            np.testing.assert_array_equal(got[i], _data((2, 3), i))
    else:
        assert got is None
    table = _data((p, 4, 2), 5, np.float32) if r == root else None
    mine = F.scatter(either, table, root=root)
    assert mine.shape == (4, 2) and mine.dtype == np.float32
    np.testing.assert_array_equal(mine, _data((p, 4, 2), 5, np.float32)[r])
    with pytest.raises(ValueError, match="scatter: "):
        F.scatter(either, np.zeros(p + 1) if r == root else None, root=root)


def test_barrier_and_iallreduce(either, mpi_comm):
    F.barrier(either)
    x = _data((100,), mpi_comm.rank)
    req = F.iallreduce(either, x, op="max")
    y = req.wait()
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, _native(mpi_comm, x, MPI.MAX))
    out = np.empty_like(x)
    assert F.iallreduce(either, x, out=out).wait() is out
    np.testing.assert_array_equal(out, _native(mpi_comm, x))


@pytest.mark.serial
def test_exported_from_the_package():
    for name in F.__all__:
        assert getattr(collectives, name) is getattr(F, name)
