"""Every reduce algorithm x root x op x dtype x awkward size, in place, and what non-roots keep."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives.ops import MPI_OP
from util import (ALL_DTYPES, LARGE, assert_close, expect_error, make_data, native_supports, ops_for,
                  reference, sizes)

ALGORITHMS = collectives.names("reduce") + ["reduce_fused"] + collectives.shm_names("reduce")
SENTINEL = 77


def roots(p):
    """The first, a middle and the last rank."""
    return sorted({0, p // 2, p - 1})


def _ops_at(dtype, n):
    # Every op at small sizes; at ~10^6 elements only float64 and int32, with SUM and MAX.
    if n == LARGE:
        return ["sum", "max"] if dtype in (np.dtype(np.float64), np.dtype(np.int32)) else []
    return ops_for(dtype)


def _want(mpi_comm, send, dtype, op, n, root):
    """Native Reduce where MPI reduces the type, else the exact NumPy fold in rank order."""
    p = mpi_comm.size
    if native_supports(dtype):
        want = np.empty_like(send)
        mpi_comm.Reduce(send, want, op=MPI_OP[op], root=root)
        return want
    return reference(dtype, op, n, p)


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for root in roots(p):
        for n in sizes(p, algorithm, dtype.itemsize):
            for op in _ops_at(dtype, n):
                what = f"{algorithm} {op} {dtype} n={n} p={p} root={root}"
                send = make_data(dtype, op, n, r)
                kept = send.copy()
                got = np.full_like(send, SENTINEL)
                comm.Reduce(send, got, op=MPI_OP[op], root=root, algorithm=algorithm)
                want = _want(mpi_comm, send, dtype, op, n, root)
                assert np.array_equal(send, kept), f"{what}: sendbuf changed"
                if r == root:
                    assert_close(got, want, dtype, p, what)
                else:
                    assert (got == np.array(SENTINEL, dtype)).all(), f"{what}: non-root recvbuf written"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for root in roots(p):
        for n in (0, 1, p + 1, 1000):
            send = make_data(np.float64, "sum", n, r)
            want = _want(mpi_comm, send, np.float64, "sum", n, root)
            if r == root:
                buf = send.copy()
                comm.Reduce(MPI.IN_PLACE, buf, root=root, algorithm=algorithm)
                assert_close(buf, want, np.float64, p, f"{algorithm} in place n={n} root={root}")
            else:
                comm.Reduce(send, None, root=root, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_specs(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    root = p - 1
    send = np.arange(10, dtype=np.int32) * (r + 1)
    got = np.full(10, SENTINEL, np.int32)
    # Only the first 6 elements take part; the rest of the root's buffer stays as it was.
    comm.Reduce([send, 6, MPI.INT], [got, 6, MPI.INT], op=MPI.SUM, root=root, algorithm=algorithm)
    if r == root:
        assert np.array_equal(got[:6], np.arange(6) * p * (p + 1) // 2)
        assert (got[6:] == SENTINEL).all()
    x = np.full(4, float(r + 1))
    y = np.zeros(4)
    comm.Reduce([x, MPI.DOUBLE], [y, MPI.DOUBLE], op=MPI.PROD, root=root, algorithm=algorithm)
    if r == root:
        assert np.array_equal(y, np.full(4, float(np.prod(np.arange(1, p + 1)))))
    comm.Reduce(x, y, op="max", root=root, algorithm=algorithm)
    if r == root:
        assert np.array_equal(y, np.full(4, float(p)))


def test_ireduce(comm):
    p, r = comm.size, comm.rank
    send = [np.full(n, r + 1, np.int64) for n in (3, 5000)]
    got = [np.zeros_like(s) for s in send]
    reqs = [comm.Ireduce(s, g, root=p - 1) for s, g in zip(send, got)]
    collectives.Request.waitall(reqs)
    if r == p - 1:
        for g in got:
            assert (g == p * (p + 1) // 2).all()


@pytest.mark.parametrize("root", [-1, "size", 0.0, None])
def test_reduce_invalid_root(comm, root):
    root = comm.size if root == "size" else root
    with pytest.raises(TypeError if root is None or type(root) is float else ValueError, match="root"):
        comm.Reduce(np.zeros(3), np.zeros(3), root=root)


def test_reduce_bad_arguments(comm):
    p, r = comm.size, comm.rank
    with pytest.raises(TypeError, match="not defined"):
        comm.Reduce(np.zeros(3), np.zeros(3), op=MPI.BAND)
    # MAXLOC is MPI's (delegated, as mpi4py would pass it), and MPI refuses it on plain doubles.
    with pytest.raises(MPI.Exception, match="MPI_Op|MPI_ERR_OP"):  # MPICH's text, Open MPI's
        comm.Reduce(np.zeros(3), np.zeros(3), op=MPI.MAXLOC)
    assert comm.last_algorithm == "native"
    bad = r == 0
    with expect_error(bad, TypeError, "dtype"):
        comm.Reduce(np.zeros(3), np.zeros(3, np.float32) if bad else None)
    with expect_error(bad, ValueError, "elements"):
        comm.Reduce(np.zeros(3), np.zeros(4) if bad else None)
    if p > 1:
        with pytest.raises(ValueError, match="differ across ranks"):
            comm.Reduce(np.zeros(3 + (r == p - 1)), np.zeros(3 + (r == p - 1)), root=0)
        with pytest.raises(ValueError, match="differ across ranks"):
            comm.Reduce(np.zeros(3), np.zeros(3), op=MPI.MAX if r else MPI.SUM, root=0)
