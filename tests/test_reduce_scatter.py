"""Every reduce-scatter algorithm x op x dtype x awkward size, uneven and in place, against MPI."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives.ops import MPI_OP
from util import (ops_at, ALL_DTYPES, LARGE, assert_close, assert_everywhere, make_data, native_supports,
                  ops_for, reference, sizes)

ALGORITHMS = collectives.names("reduce_scatter") + ["reduce_scatter_fused"] + collectives.shm_names("reduce_scatter")



def _want(mpi_comm, send, counts, dtype, op):
    """This rank's block of the reduction: native MPI where it reduces ``dtype``, else NumPy."""
    p, r = mpi_comm.size, mpi_comm.rank
    if native_supports(dtype):
        want = np.empty(counts[r], dtype)
        mpi_comm.Reduce_scatter(send, want, list(counts), op=MPI_OP[op])
        return want
    start = sum(counts[:r])
    return reference(dtype, op, sum(counts), p)[start:start + counts[r]]


def _uneven(p):
    """Per-rank counts with zeros and a spread, different for every p."""
    return [(5 * i + 3) % 7 for i in range(p)]


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_block(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for n in sizes(p, algorithm, dtype.itemsize * p):
        for op in ops_at(dtype, n, p):
            block = n // p if n == LARGE else n
            what = f"{algorithm} {op} {dtype} block={block} p={p}"
            send = make_data(dtype, op, block * p, r)
            got = np.full(block, 7, dtype)
            comm.Reduce_scatter_block(send, got, op=MPI_OP[op], algorithm=algorithm)
            want = _want(mpi_comm, send, (block,) * p, dtype, op)
            assert_everywhere(mpi_comm, assert_close, got, want, dtype, p, what)


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", [np.dtype(t) for t in (np.bool_, np.int8, np.float16,
                                                          np.float64, np.complex64)], ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_uneven(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    counts = _uneven(p)
    for op in ops_for(dtype):
        what = f"{algorithm} {op} {dtype} counts={counts}"
        send = make_data(dtype, op, sum(counts), r)
        want = _want(mpi_comm, send, counts, dtype, op)
        got = np.zeros(counts[r], dtype)
        comm.Reduce_scatter(send, got, counts, op=MPI_OP[op], algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_close, got, want, dtype, p, what)
        # Without recvcounts they come from every rank's recvbuf size, as in mpi4py.
        got = np.zeros(counts[r], dtype)
        comm.Reduce_scatter(send, got, op=MPI_OP[op], algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_close, got, want, dtype, p,
                          what + " counts from recvbuf")
        inplace = send.copy()
        comm.Reduce_scatter(MPI.IN_PLACE, inplace, counts, op=MPI_OP[op], algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_close, inplace[:counts[r]], want, dtype, p,
                          what + " in place")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_block_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for block in (0, 1, p + 1, 1000):
        buf = make_data(np.float64, "sum", block * p, r)
        want = _want(mpi_comm, buf, (block,) * p, np.float64, "sum")
        comm.Reduce_scatter_block(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_close, buf[:block], want, np.float64, p,
                          f"{algorithm} in place block={block}")


def test_reduce_scatter_behind_nonblocking(comm, mpi_comm):
    """Counts gathered from recvbuf sizes queue behind pending nonblocking collectives."""
    p, r = comm.size, comm.rank
    counts = _uneven(p)
    data = make_data(np.float64, "sum", 200000, r)
    total = np.empty_like(data)
    req = comm.Iallreduce(data, total)
    send = make_data(np.float64, "sum", sum(counts), r)
    got = np.zeros(counts[r])
    comm.Reduce_scatter(send, got)
    req.wait()
    want = _want(mpi_comm, send, counts, np.float64, "sum")
    assert_everywhere(mpi_comm, assert_close, got, want, np.float64, p, "after Iallreduce")
    want = np.empty_like(data)
    mpi_comm.Allreduce(data, want)
    assert_everywhere(mpi_comm, assert_close, total, want, np.float64, p, "Iallreduce")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ireduce_scatter(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    counts = _uneven(p)
    send = make_data(np.int64, "sum", sum(counts), r)
    got = np.zeros(counts[r], np.int64)
    req = comm.Ireduce_scatter(send, got, counts, algorithm=algorithm)
    sendb = make_data(np.float32, "max", 3 * p, r)
    gotb = np.zeros(3, np.float32)
    reqb = comm.Ireduce_scatter_block(sendb, gotb, op=MPI.MAX, algorithm=algorithm)
    want = _want(mpi_comm, send, counts, np.int64, "sum")
    wantb = _want(mpi_comm, sendb, (3,) * p, np.float32, "max")
    req.wait()
    reqb.wait()
    assert_everywhere(mpi_comm, assert_close, got, want, np.int64, p, "Ireduce_scatter")
    assert_everywhere(mpi_comm, assert_close, gotb, wantb, np.float32, p, "Ireduce_scatter_block")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_leaves_the_rest(comm, mpi_comm, algorithm):
    """sendbuf is never written, and recvbuf past the rank's block keeps its contents, out of
    place and in place, blocking and nonblocking (the job path under COLLECTIVES_PUREPYTHON=1)."""
    p, r = comm.size, comm.rank
    for counts in (_uneven(p), [1000 + 7 * i for i in range(p)]):
        send = make_data(np.int64, "sum", sum(counts), r)
        want = _want(mpi_comm, send, counts, np.int64, "sum")
        mine = counts[r]
        for name, call in (("Reduce_scatter", comm.Reduce_scatter),
                           ("Ireduce_scatter", lambda *a, **k: comm.Ireduce_scatter(*a, **k).wait())):
            what = f"{name} {algorithm} counts={counts}"
            kept = send.copy()
            got = np.full(mine + 5, -3, np.int64)
            call(send, got, counts, algorithm=algorithm)
            assert_everywhere(mpi_comm, assert_close, send, kept, np.int64, p, what + ": sendbuf written")
            assert_everywhere(mpi_comm, assert_close, got[:mine], want, np.int64, p, what)
            assert_everywhere(mpi_comm, assert_close, got[mine:], np.full(5, -3, np.int64), np.int64, p,
                              what + ": recvbuf past the block written")
            inplace = send.copy()
            call(MPI.IN_PLACE, inplace, counts, algorithm=algorithm)
            assert_everywhere(mpi_comm, assert_close, inplace[:mine], want, np.int64, p, what + " in place")
            assert_everywhere(mpi_comm, assert_close, inplace[mine:], send[mine:], np.int64, p,
                              what + " in place: recvbuf past the block written")


def test_reduce_scatter_errors(comm):
    p = comm.size
    with pytest.raises(TypeError, match="dtype"):
        comm.Reduce_scatter_block(np.zeros(2 * p, np.int32), np.zeros(2))
    if p > 1:
        with pytest.raises(ValueError, match="do not split evenly"):
            comm.Reduce_scatter_block(np.zeros(2 * p + 1), np.zeros(2))
    # recvbuf holds exactly one block, as mpi4py requires: shorter and longer are refused.
    for longer in (False, True):
        with pytest.raises(ValueError, match="mismatch in send count 2 and receive count"):
            comm.Reduce_scatter_block(np.zeros(2 * p), np.zeros(3 if longer else 1))
    with pytest.raises(ValueError, match="recvcounts"):
        comm.Reduce_scatter(np.zeros(2 * p), np.zeros(2), [2] * (p + 1))
    with pytest.raises(ValueError, match="recvcounts"):
        comm.Reduce_scatter(np.zeros(2 * p), np.zeros(2), [-1] + [2] * (p - 1))
    with pytest.raises(ValueError, match="add up to"):
        comm.Reduce_scatter(np.zeros(2 * p + 1), np.zeros(2), [2] * p)
    with pytest.raises(TypeError, match="not defined"):
        comm.Reduce_scatter_block(np.zeros(2 * p), np.zeros(2), op=MPI.BAND)
    with pytest.raises(ValueError, match="unsupported reduction op"):
        comm.Reduce_scatter_block(np.zeros(2 * p), np.zeros(2), op=MPI.REPLACE)


def test_reduce_scatter_mismatch_raises_everywhere(comm):
    p, r = comm.size, comm.rank
    if p == 1:
        pytest.skip("needs two ranks")
    op = MPI.SUM if r else MPI.MAX
    with pytest.raises(ValueError, match="differ across ranks"):
        comm.Reduce_scatter_block(np.zeros(2 * p), np.zeros(2), op=op)
