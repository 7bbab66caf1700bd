"""Every scan and exscan algorithm x op x dtype x awkward size, in place, nonblocking, the
ops MPI runs itself, and mismatches across ranks: against native MPI's Scan and Exscan and the
exact NumPy prefix in rank order."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives.ops import MPI_OP
from util import ALL_DTYPES, assert_close, make_data, native_supports, ops_at, reference, sizes, waiting

ALGORITHMS = [("scan", name) for name in collectives.names("scan")] + [
    ("exscan", name) for name in collectives.names("exscan")]
SENTINEL = 77


def _method(collective):
    return "Exscan" if collective == "exscan" else "Scan"


def _prefix_ranks(collective, rank):
    """How many ranks' inputs rank ``rank``'s result combines."""
    return rank if collective == "exscan" else rank + 1


def _want(mpi_comm, collective, send, dtype, op, n):
    """Native MPI's result where MPI reduces the type, else the exact NumPy fold in rank
    order; None on rank 0 of an exscan, whose buffer stays as it was."""
    if collective == "exscan" and mpi_comm.rank == 0:
        if native_supports(dtype):
            mpi_comm.Exscan(send, np.empty_like(send), op=MPI_OP[op])
        return None
    if native_supports(dtype):
        want = np.empty_like(send)
        getattr(mpi_comm, _method(collective))(send, want, op=MPI_OP[op])
        return want
    return reference(dtype, op, n, _prefix_ranks(collective, mpi_comm.rank))


def _check(got, want, dtype, p, what):
    if want is None:
        assert (got == np.array(SENTINEL, got.dtype)).all(), f"{what}: rank 0's recvbuf written"
    else:
        assert_close(got, want, dtype, p, what)


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("collective,algorithm", ALGORITHMS, ids=[a for _, a in ALGORITHMS])
def test_scan(comm, mpi_comm, collective, algorithm, dtype):
    p, r = comm.size, comm.rank
    for n in sizes(p, algorithm, dtype.itemsize):
        for op in ops_at(dtype, n, p):
            what = f"{algorithm} {op} {dtype} n={n} p={p} rank {r}"
            send = make_data(dtype, op, n, r)
            kept = send.copy()
            got = np.full_like(send, SENTINEL)
            getattr(comm, _method(collective))(send, got, op=MPI_OP[op], algorithm=algorithm)
            assert comm.last_algorithm == algorithm, what
            want = _want(mpi_comm, collective, send, dtype, op, n)
            assert np.array_equal(send, kept), f"{what}: sendbuf changed"
            _check(got, want, dtype, p, what)


@pytest.mark.parametrize("collective,algorithm", ALGORITHMS, ids=[a for _, a in ALGORITHMS])
def test_scan_exact_prefix(comm, collective, algorithm):
    """Integers bit for bit against the NumPy prefix in rank order, whatever MPI does."""
    p, r = comm.size, comm.rank
    for dtype in (np.int8, np.int32, np.uint64):
        for n in (1, max(p - 1, 1), p + 1, 13):
            for op in ("sum", "prod", "max", "bxor"):
                send = make_data(dtype, op, n, r)
                got = np.full_like(send, SENTINEL)
                getattr(comm, _method(collective))(send, got, op=MPI_OP[op], algorithm=algorithm)
                want = None if collective == "exscan" and r == 0 else reference(
                    dtype, op, n, _prefix_ranks(collective, r))
                _check(got, want, dtype, p, f"{algorithm} {op} {np.dtype(dtype)} n={n} rank {r}")


@pytest.mark.parametrize("collective,algorithm", ALGORITHMS, ids=[a for _, a in ALGORITHMS])
def test_scan_in_place(comm, mpi_comm, collective, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p - 1, p + 1, 13, 1000):
        for dtype, op in ((np.float64, "sum"), (np.int64, "prod"), (np.float32, "min")):
            what = f"{algorithm} in place {op} {np.dtype(dtype)} n={n} rank {r}"
            send = make_data(dtype, op, n, r)
            buf = send.copy()
            getattr(comm, _method(collective))(MPI.IN_PLACE, buf, op=MPI_OP[op], algorithm=algorithm)
            assert comm.last_algorithm == algorithm, what
            want = _want(mpi_comm, collective, send, dtype, op, n)
            # In place, rank 0's exscan buffer keeps its own input.
            assert_close(buf, send if want is None else want, dtype, p, what)


@pytest.mark.parametrize("collective,algorithm", ALGORITHMS, ids=[a for _, a in ALGORITHMS])
def test_scan_same_buffer(comm, mpi_comm, collective, algorithm):
    """sendbuf that is recvbuf exactly runs as MPI.IN_PLACE."""
    r = comm.rank
    send = make_data(np.float64, "sum", 9, r)
    buf = send.copy()
    getattr(comm, _method(collective))(buf, buf, algorithm=algorithm)
    want = _want(mpi_comm, collective, send, np.float64, "sum", 9)
    assert_close(buf, send if want is None else want, np.float64, comm.size, f"{algorithm} same buffer")


def test_iscan_iexscan(comm, mpi_comm):
    p, r = comm.size, comm.rank
    sends = [np.full(n, r + 1, np.int64) for n in (3, 5000)]
    scans = [np.zeros_like(s) for s in sends]
    exscans = [np.full_like(s, SENTINEL) for s in sends]
    reqs = [comm.Iscan(s, g) for s, g in zip(sends, scans)]
    reqs += [comm.Iexscan(s, g, op=MPI.PROD) for s, g in zip(sends, exscans)]
    collectives.Request.waitall(reqs)
    assert comm.last_algorithm == "exscan_recursive_doubling"
    for s, g, e in zip(sends, scans, exscans):
        assert (g == (r + 1) * (r + 2) // 2).all()
        assert (e == (SENTINEL if r == 0 else np.prod(np.arange(1, r + 1)))).all()


def test_scan_specs(comm):
    """[buf, count, datatype] specs: only the first ``count`` elements take part."""
    r = comm.rank
    send = np.arange(10, dtype=np.int32) * (r + 1)
    got = np.full(10, SENTINEL, np.int32)
    comm.Scan([send, 6, MPI.INT], [got, 6, MPI.INT], op=MPI.SUM)
    assert np.array_equal(got[:6], np.arange(6) * (r + 1) * (r + 2) // 2)
    assert (got[6:] == SENTINEL).all()
    got[:] = SENTINEL
    comm.Exscan([send, 6, MPI.INT], [got, 6, MPI.INT], op="max")
    assert np.array_equal(got[:6], np.full(6, SENTINEL) if r == 0 else np.arange(6) * r)
    assert (got[6:] == SENTINEL).all()


def _first(inbuf, inoutbuf, datatype):
    """x op y = x: associative, not commutative."""
    np.copyto(np.frombuffer(inoutbuf, np.float64), np.frombuffer(inbuf, np.float64))


@pytest.mark.parametrize("method", ["Scan", "Exscan"])
def test_scan_user_op_is_mpis_own(comm, mpi_comm, method):
    """A user-defined op runs MPI's own Scan or Exscan, in its order (lower ranks on the left)."""
    r = comm.rank
    op = MPI.Op.Create(_first, commute=False)
    try:
        send = np.arange(4.0) + 10 * r
        got = np.full(4, float(SENTINEL))
        getattr(comm, method)(send, got, op=op)
        assert comm.last_algorithm == "native"
        if method == "Scan" or r > 0:
            assert np.array_equal(got, np.arange(4.0))  # rank 0's input, from the left
    finally:
        op.Free()


def test_scan_bad_arguments(comm):
    with pytest.raises(TypeError, match="not defined"):
        comm.Scan(np.zeros(3), np.zeros(3), op=MPI.BAND)
    with pytest.raises(TypeError, match="dtype"):
        comm.Exscan(np.zeros(3), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="elements"):
        comm.Scan(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="unknown scan algorithm"):
        comm.Scan(np.zeros(3), np.zeros(3), algorithm="ring")


@pytest.mark.parametrize("method", ["Scan", "Exscan", "Iscan", "Iexscan"])
def test_scan_mismatch_raises_everywhere(comm, method):
    p, r = comm.size, comm.rank
    if p < 2:
        pytest.skip("needs two ranks")
    run = waiting(getattr(comm, method))
    n = 3 + (r == p - 1)
    with pytest.raises(ValueError, match="differ across ranks.*count"):
        run(np.zeros(n), np.zeros(n))
    with pytest.raises(ValueError, match="differ across ranks.*op"):
        run(np.zeros(3), np.zeros(3), op=MPI.MAX if r else MPI.SUM)
    with pytest.raises(ValueError, match="differ across ranks.*dtype"):
        run(np.zeros(3, np.float32 if r else np.float64), np.zeros(3, np.float32 if r else np.float64))
    # Then the Comm still scans as it should.
    got = np.zeros(2)
    comm.Scan(np.ones(2), got)
    assert (got == r + 1).all()
