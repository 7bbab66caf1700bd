"""Alltoallv: every algorithm that takes blocks of different sizes x dtype x count patterns with
empty blocks and gaps, in place, nonblocking, the buffer specs, counts that change on every
call, and counts that do not match across ranks: against native MPI's Alltoallv, byte for byte."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import LARGE, assert_bytes_equal, assert_everywhere, make_data, sizes, waiting

ALGORITHMS = ["alltoall_pairwise", "alltoall_scattered"]
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16,
                                np.float32, np.float64, np.complex128)]
SENTINEL = 77


def matrix(p, n):
    """C[i][j]: what rank i sends rank j, about ``n`` elements with empty blocks among them."""
    i, j = np.indices((p, p))
    return (n * ((3 * i + 5 * j) % 4)) // 3 + ((i + j) % 2 if n else 0)


def layout(counts, reverse, gap=2):
    """Displacements of ``counts`` with ``gap`` elements between blocks (in reverse rank order
    with ``reverse``), and the length of the buffer they lie in."""
    displs, at = [0] * len(counts), 1
    for k in (reversed(range(len(counts))) if reverse else range(len(counts))):
        displs[k] = at
        at += int(counts[k]) + gap
    return displs, at


def buffers(dtype, counts_out, counts_in, r):
    """(sendbuf spec, recvbuf spec, send array, receive array) for rank ``r``: send blocks in
    reverse rank order, receive blocks in rank order, gaps between them; the receive array
    holds SENTINEL, which the gaps must keep."""
    sd, slen = layout(counts_out, True)
    rd, rlen = layout(counts_in, False)
    send = make_data(dtype, "sum", slen, r)
    recv = np.full(rlen, SENTINEL, dtype)
    return [send, (list(counts_out), sd)], [recv, (list(counts_in), rd)], send, recv


def native(mpi_comm, sendspec, recvspec):
    """Native Alltoallv of the same specs, on byte views (so it handles every dtype)."""
    send, (sc, sd) = sendspec
    recv, (rc, rd) = recvspec
    k = send.itemsize
    out = np.full_like(recv, SENTINEL)
    mpi_comm.Alltoallv([send.view(np.uint8), ([c * k for c in sc], [d * k for d in sd]), MPI.BYTE],
                       [out.view(np.uint8), ([c * k for c in rc], [d * k for d in rd]), MPI.BYTE])
    return out


def run_against_native(comm, mpi_comm, dtype, C, what, **kwargs):
    """One Alltoallv of count matrix ``C`` through ``comm``, against native MPI's."""
    r = comm.rank
    sendspec, recvspec, send, got = buffers(dtype, C[r], C[:, r], r)
    kept = send.copy()
    comm.Alltoallv(sendspec, recvspec, **kwargs)
    want = native(mpi_comm, sendspec, recvspec)
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
    assert_everywhere(mpi_comm, assert_bytes_equal, send, kept, f"{what}: sendbuf changed")


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_alltoallv(comm, mpi_comm, algorithm, dtype):
    p = comm.size
    for n in sizes(p):
        # About 10^6 elements in all.
        n = max(n // p, 1) if n == LARGE else n
        what = f"{algorithm} {dtype} blocks of about {n} p={p}"
        run_against_native(comm, mpi_comm, dtype, matrix(p, n), what, algorithm=algorithm)
        assert comm.last_algorithm == algorithm, what


@pytest.mark.parametrize("asked", [None, "bruck", "fused"])
def test_alltoallv_auto(comm, mpi_comm, asked):
    """auto chooses by the rank count alone (the bytes differ per rank): pairwise up to 2
    ranks, scattered above; Bruck's and the fused form need equal blocks and fall back."""
    p = comm.size
    run_against_native(comm, mpi_comm, np.float32, matrix(p, 5), f"asked {asked}", algorithm=asked)
    assert comm.last_algorithm == ("alltoall_pairwise" if p <= 2 else "alltoall_scattered")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_alltoallv_in_place(comm, mpi_comm, algorithm):
    """MPI.IN_PLACE: the receive counts and displacements serve both ways (a symmetric count
    matrix, as MPI requires)."""
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        C = matrix(p, n)
        C = np.minimum(C, C.T)
        displs, length = layout(C[r], True)
        buf = make_data(np.float64, "sum", length, r)
        send = buf.copy()
        comm.Alltoallv(MPI.IN_PLACE, [buf, (list(C[r]), displs), MPI.DOUBLE], algorithm=algorithm)
        want = send.copy()
        mpi_comm.Alltoallv([send, (list(C[r]), displs)], [want, (list(C[r]), displs)])
        assert_everywhere(mpi_comm, assert_bytes_equal, buf, want, f"{algorithm} in place n={n}")


def test_alltoallv_counts_change_without_new_plans(comm, mpi_comm):
    """Counts drawn afresh on every call, as in a mixture-of-experts layer, run one plan."""
    p = comm.size
    draw = np.random.default_rng(11)  # the same counts on every rank
    plans = None
    for call in range(12):
        C = draw.integers(0, 40, size=(p, p)) * (draw.random((p, p)) > 0.3)
        run_against_native(comm, mpi_comm, np.int32, C, f"call {call}")
        plans = len(comm._engine) if plans is None else plans
        assert len(comm._engine) == plans, f"call {call} made a plan"


def test_alltoallv_buffer_specs(comm, mpi_comm):
    """mpi4py's specs: [buf, counts] (displacements in rank order), [buf, counts, displs,
    datatype], and a buffer alone, split into p equal blocks."""
    p, r = comm.size, comm.rank
    C = matrix(p, 3)
    send = make_data(np.int32, "sum", int(C[r].sum()), r)
    got = np.full(int(C[:, r].sum()), SENTINEL, np.int32)
    want = got.copy()
    comm.Alltoallv([send, list(C[r])], [got, list(C[:, r])])
    mpi_comm.Alltoallv([send, list(C[r])], [want, list(C[:, r])])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "[buf, counts]")
    packed = [np.concatenate([[0], np.cumsum(c)[:-1]]).tolist() for c in (C[r], C[:, r])]
    got[:] = SENTINEL
    comm.Alltoallv([send, list(C[r]), packed[0], MPI.INT], [got, list(C[:, r]), packed[1], MPI.INT])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "[buf, counts, displs, datatype]")
    send = make_data(np.int64, "sum", 3 * p, r)
    got, want = np.zeros_like(send), np.zeros_like(send)
    comm.Alltoallv(send, got)
    mpi_comm.Alltoallv(send, want)
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "buffers alone")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ialltoallv(comm, mpi_comm, algorithm):
    """Two nonblocking all-to-alls in flight, then the blocking one, in order."""
    p, r = comm.size, comm.rank
    calls = [buffers(np.int64, matrix(p, n)[r], matrix(p, n)[:, r], r) for n in (2, 4099)]
    reqs = [comm.Ialltoallv(s, g, algorithm=algorithm) for s, g, _, _ in calls]
    last = buffers(np.int64, matrix(p, 2)[r], matrix(p, 2)[:, r], r)
    comm.Alltoallv(last[0], last[1], algorithm=algorithm)
    collectives.Request.waitall(reqs)
    for k, (s, g, _, got) in enumerate(calls + [last]):
        assert_everywhere(mpi_comm, assert_bytes_equal, got, native(mpi_comm, s, g), f"I{algorithm} call {k}")


def test_alltoallv_bad_arguments(comm):
    p, r = comm.size, comm.rank
    ones = [1] * p
    with pytest.raises(TypeError, match="dtype"):
        comm.Alltoallv([np.zeros(p), ones], [np.zeros(p, np.float32), ones])
    with pytest.raises(ValueError, match=f"rank {r} sends itself 2 elements but receives 1"):
        comm.Alltoallv([np.zeros(p + 1), [1] * r + [2] + [1] * (p - r - 1)], [np.zeros(p), ones])
    with pytest.raises(ValueError, match=f"{p + 1} counts for a communicator of size {p}"):
        comm.Alltoallv([np.zeros(p + 1), [1] * (p + 1)], [np.zeros(p), ones])
    with pytest.raises(ValueError, match="reach element"):
        comm.Alltoallv([np.zeros(p), ones], [np.zeros(p - 1), ones])
    with pytest.raises(ValueError, match="overlap"):
        buf = np.zeros(p + 2)
        comm.Alltoallv([buf[:p + 1], ones], [buf[1:], ones])
    with pytest.raises(ValueError, match="unknown alltoall algorithm"):
        comm.Alltoallv([np.zeros(p), ones], [np.zeros(p), ones], algorithm="ring")


@pytest.mark.parametrize("method", ["Alltoallv", "Ialltoallv"])
@pytest.mark.parametrize("fixture", ["comm", "p2p_comm"])
def test_alltoallv_mismatch_raises_everywhere(request, mpi_comm, method, fixture):
    """Counts whose transpose does not match raise on every rank, naming a pair of ranks, over
    the shared segment and point to point alike; then the Comm exchanges as it should."""
    comm = request.getfixturevalue(fixture)
    p, r = comm.size, comm.rank
    if p < 2:
        pytest.skip("needs two ranks")
    run = waiting(getattr(comm, method))
    sends = [1] * p
    sends[p - 1] += r == 0  # rank 0 sends rank p-1 one element more than it receives
    with pytest.raises(ValueError, match=f"rank 0 sends 2 elements to rank {p - 1}, which receives 1 "
                                         "from rank 0: the counts differ across ranks"):
        run([np.zeros(sum(sends)), sends], [np.zeros(p), [1] * p])
    with pytest.raises(ValueError, match="differ across ranks.*dtype"):
        dtype = np.float32 if r else np.float64
        run([np.zeros(p, dtype), [1] * p], [np.zeros(p, dtype), [1] * p])
    run_against_native(comm, mpi_comm, np.float64, matrix(p, 4), "after the mismatches")
