"""Every all-to-all algorithm x dtype x awkward block size, in place, nonblocking, the count
spec, and mismatches across ranks: against native MPI's Alltoall, byte for byte."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import LARGE, assert_bytes_equal, assert_everywhere, make_data, sizes, waiting

ALGORITHMS = collectives.names("alltoall") + ["alltoall_fused"]
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16,
                                np.float32, np.float64, np.complex128)]
SENTINEL = 77


def _send(dtype, n, p, r):
    """Rank ``r``'s p blocks of ``n`` elements, every block different."""
    return make_data(dtype, "sum", n * p, r)


def _native(mpi_comm, send, recv):
    """Native Alltoall on byte views, so it handles every dtype."""
    mpi_comm.Alltoall(send.view(np.uint8), recv.view(np.uint8))


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_alltoall(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for n in sizes(p):
        # About 10^6 elements in all, p blocks of them.
        n = max(n // p, 1) if n == LARGE else n
        what = f"{algorithm} {dtype} block of {n} p={p}"
        send = _send(dtype, n, p, r)
        kept = send.copy()
        got = np.full(p * n, SENTINEL, dtype)
        comm.Alltoall(send, got, algorithm=algorithm)
        # The fused form falls back where the gathered buffers do not fit, or on a segment.
        assert comm.last_algorithm == algorithm or algorithm == "alltoall_fused", what
        want = np.empty_like(got)
        _native(mpi_comm, send, want)
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
        assert_everywhere(mpi_comm, assert_bytes_equal, send, kept, f"{what}: sendbuf changed")


@pytest.mark.parametrize("algorithm", ALGORITHMS + ["auto"])
def test_alltoall_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        send = _send(np.float64, n, p, r)
        buf = send.copy()
        comm.Alltoall(MPI.IN_PLACE, [buf, MPI.DOUBLE], algorithm=algorithm)
        want = np.empty_like(buf)
        _native(mpi_comm, send, want)
        assert_everywhere(mpi_comm, assert_bytes_equal, buf, want, f"{algorithm} in place n={n}")
        # sendbuf that is recvbuf exactly runs as MPI.IN_PLACE.
        buf[:] = send
        comm.Alltoall(buf, buf, algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_bytes_equal, buf, want, f"{algorithm} same buffer n={n}")


def test_alltoall_fused_where_it_fits(p2p_comm, mpi_comm):
    """Without a segment, the fused form runs while p whole send buffers fit the exchange's
    payload, in place too, and hands over to a schedule above that."""
    comm, p, r = p2p_comm, p2p_comm.size, p2p_comm.rank
    fits = comm._engine.fused_bytes // (8 * p * p)
    for n, want_fused in ((1, True), (fits, True), (fits + 1, False)):
        for in_place in (False, True):
            send = _send(np.float64, n, p, r)
            got = send.copy() if in_place else np.full_like(send, SENTINEL)
            comm.Alltoall(MPI.IN_PLACE if in_place else send, got, algorithm="fused")
            ran = comm.last_algorithm
            want = np.empty_like(got)
            _native(mpi_comm, send, want)
            what = f"fused block of {n} in place={in_place}: ran {ran}"
            assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
            assert (ran == "alltoall_fused") == want_fused, what


def test_alltoall_count_spec(comm, mpi_comm):
    """[buf, count, datatype] gives one block's count, as in mpi4py; the rest of each buffer
    is neither read nor written."""
    p, r = comm.size, comm.rank
    send = _send(np.int32, 3, p, r)
    send = np.concatenate([send, np.full(2, -5, np.int32)])
    got = np.full(3 * p + 2, SENTINEL, np.int32)
    comm.Alltoall([send, 3, MPI.INT], [got, 3, MPI.INT])
    want = np.full_like(got, SENTINEL)
    mpi_comm.Alltoall([send, 3, MPI.INT], [want, 3, MPI.INT])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "Alltoall [buf, count, type]")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ialltoall(comm, mpi_comm, algorithm):
    """Two nonblocking all-to-alls in flight, then the blocking one, in order."""
    p, r = comm.size, comm.rank
    sends = [_send(np.int64, n, p, r) for n in (2, 4099)]
    gots = [np.zeros_like(s) for s in sends]
    reqs = [comm.Ialltoall(s, g, algorithm=algorithm) for s, g in zip(sends, gots)]
    last = np.zeros_like(sends[0])
    comm.Alltoall(sends[0], last, algorithm=algorithm)
    collectives.Request.waitall(reqs)
    for s, g in zip(sends + sends[:1], gots + [last]):
        want = np.empty_like(g)
        _native(mpi_comm, s, want)
        assert_everywhere(mpi_comm, assert_bytes_equal, g, want, f"I{algorithm} of {s.size // p}")


def test_alltoall_bad_arguments(comm):
    p = comm.size
    with pytest.raises(TypeError, match="dtype"):
        comm.Alltoall(np.zeros(p), np.zeros(p, np.float32))
    with pytest.raises(ValueError, match="sendbuf has"):
        comm.Alltoall(np.zeros(2 * p), np.zeros(p))
    if p > 1:
        with pytest.raises(ValueError, match="not divisible"):
            comm.Alltoall(np.zeros(p + 1), np.zeros(p + 1))
    with pytest.raises(ValueError, match="use Alltoallv"):
        comm.Alltoall(np.zeros(p), [np.zeros(p), ([1] * p, list(range(p))), MPI.DOUBLE])
    with pytest.raises(ValueError, match="unknown alltoall algorithm"):
        comm.Alltoall(np.zeros(p), np.zeros(p), algorithm="ring")
    buf = np.zeros(3 * p)
    with pytest.raises(ValueError, match="overlap"):
        comm.Alltoall(buf[:2 * p], buf[1:2 * p + 1])


@pytest.mark.parametrize("method", ["Alltoall", "Ialltoall"])
def test_alltoall_mismatch_raises_everywhere(comm, method):
    p, r = comm.size, comm.rank
    if p < 2:
        pytest.skip("needs two ranks")
    run = waiting(getattr(comm, method))
    n = p * (3 + (r == p - 1))
    with pytest.raises(ValueError, match="differ across ranks.*count"):
        run(np.zeros(n), np.zeros(n))
    with pytest.raises(ValueError, match="differ across ranks.*dtype"):
        run(np.zeros(p, np.float32 if r else np.float64), np.zeros(p, np.float32 if r else np.float64))
    # Then the Comm still exchanges as it should.
    got = np.zeros(p)
    comm.Alltoall(np.arange(p, dtype=np.float64) + 10 * r, got)
    assert np.array_equal(got, 10 * np.arange(p) + r)
