"""Every all-gather algorithm x dtype x awkward size, uneven and in place, against native MPI."""
import numpy as np
import pytest
from mpi4py import MPI
from mpi4py.util import dtlib

import collectives
from util import LARGE, assert_bytes_equal, assert_everywhere, assert_identical_across_ranks, make_data, sizes, uneven

ALGORITHMS = collectives.names("allgather") + ["allgather_fused"] + collectives.shm_names("allgather")
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint16, np.int64, np.float16,
                                np.float32, np.float64, np.complex128)]


def _native(mpi_comm, send, recv):
    """Native Allgather on byte views, so it handles every dtype."""
    mpi_comm.Allgather(send.view(np.uint8), recv.view(np.uint8))


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allgather(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for n in sizes(p, algorithm, dtype.itemsize * p):
        if n == LARGE and dtype.itemsize != 8:
            continue
        n = n // p if n == LARGE else n
        what = f"{algorithm} {dtype} n={n} p={p}"
        send = make_data(dtype, "sum", n, r)
        got = np.zeros(p * n, dtype)
        comm.Allgather(send, got, algorithm=algorithm)
        want = np.zeros_like(got)
        _native(mpi_comm, send, want)
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
        assert_everywhere(mpi_comm, assert_identical_across_ranks, mpi_comm, got, what)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allgather_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        mine = make_data(np.float64, "sum", n, r)
        buf = np.full(p * n, -1.0)
        buf[r * n:(r + 1) * n] = mine
        comm.Allgather(MPI.IN_PLACE, [buf, MPI.DOUBLE], algorithm=algorithm)
        want = np.empty_like(buf)
        _native(mpi_comm, mine, want)
        assert_everywhere(mpi_comm, assert_bytes_equal, buf, want, f"{algorithm} in place n={n}")


def test_allgather_count_spec(comm, mpi_comm):
    """[buf, count, datatype] gives one rank's count, as in mpi4py; the rest of buf is untouched."""
    p, r = comm.size, comm.rank
    send = make_data(np.float64, "sum", 3, r)
    got = np.full(3 * p + 2, -1.0)
    comm.Allgather(send, [got, 3, MPI.DOUBLE])
    want = np.full_like(got, -1.0)
    mpi_comm.Allgather(send, [want, 3, MPI.DOUBLE])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "Allgather [buf, count, type]")
    with pytest.raises(ValueError, match="too few|buffer"):
        comm.Allgather(np.zeros(6), [got, 6, MPI.DOUBLE])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_iallgather(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    send = make_data(np.int32, "sum", 101, r)
    got = np.zeros(p * 101, np.int32)
    req = comm.Iallgather(send, got, algorithm=algorithm)
    counts, displs, total = uneven(p)
    sendv = make_data(np.int32, "sum", counts[r], r)
    gotv = np.zeros(total, np.int32)
    reqv = comm.Iallgatherv(sendv, [gotv, (counts, displs), MPI.INT], algorithm=algorithm)
    want = np.empty_like(got)
    _native(mpi_comm, send, want)
    wantv = np.zeros_like(gotv)
    mpi_comm.Allgatherv(sendv, [wantv, (counts, displs), MPI.INT])
    req.wait()
    reqv.wait()
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, f"{algorithm} Iallgather")
    assert_everywhere(mpi_comm, assert_bytes_equal, gotv, wantv, f"{algorithm} Iallgatherv")


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in (np.int8, np.float64, np.complex64)], ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allgatherv(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    counts, displs, total = uneven(p)
    mpi_type = dtlib.from_numpy_dtype(dtype)
    send = make_data(dtype, "sum", counts[r], r)
    for packed in (False, True):
        d = list(np.cumsum([0] + counts[:-1])) if packed else displs
        size = sum(counts) if packed else total
        what = f"{algorithm} {dtype} packed={packed} counts={counts} p={p}"
        got = np.zeros(size, dtype)
        comm.Allgatherv(send, [got, (counts, d), mpi_type], algorithm=algorithm)
        want = np.zeros(size, dtype)
        mpi_comm.Allgatherv(send, [want, (counts, d), mpi_type])
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
        assert_everywhere(mpi_comm, assert_identical_across_ranks, mpi_comm, got, what)
        # In place: each rank's block is already at its displacement in recvbuf.
        inplace = np.zeros(size, dtype)
        inplace[d[r]:d[r] + counts[r]] = send
        comm.Allgatherv(MPI.IN_PLACE, [inplace, (counts, d), mpi_type], algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_bytes_equal, inplace, want, what + " in place")


@pytest.mark.parametrize("algorithm", collectives.names("allgather"))
def test_allgather_own_block_copied_late_or_first(comm, mpi_comm, algorithm, monkeypatch):
    """Either side of plans.LATE_COPY_BYTES, against native: the own block sent from the
    input and copied into the result late, or copied first; Allgather and
    packed Allgatherv, out of place and in place; the input is never written."""
    from collectives import plans

    p, r = comm.size, comm.rank
    n = 1000  # 8000 bytes per rank; 8000 (p - 1) received
    calls = []

    def late_copy(*args):
        calls.append(args[1:])
        return real_late_copy(*args)

    real_late_copy = plans.late_copy
    monkeypatch.setattr(plans, "late_copy", late_copy)
    for limit in (8000 * (p - 1), 8000 * (p - 1) - 1):
        monkeypatch.setattr(plans, "LATE_COPY_BYTES", limit)
        calls.clear()
        c = collectives.Comm(mpi_comm, check=comm.check)  # its own plans, made under this limit
        send = make_data(np.float64, "sum", n, r)
        kept = send.copy()
        want = np.empty(p * n)
        _native(mpi_comm, send, want)
        got = np.full(p * n, np.nan)
        c.Allgather(send, got, algorithm=algorithm)
        gotv = np.full(p * n, np.nan)
        c.Allgatherv(send, [gotv, [n] * p], algorithm=algorithm)
        inplace = np.full(p * n, np.nan)
        inplace[r * n:(r + 1) * n] = send
        c.Allgather(MPI.IN_PLACE, inplace, algorithm=algorithm)
        c.Free()
        # Planned (for Allgather, then Allgatherv) within the limit the copy moves; one byte
        # over, it stays first.
        late = p > 1 and limit == 8000 * (p - 1)
        assert calls == ([(8000 * r, 8000)] * 2 if late else []), (limit, calls)
        what = f"{algorithm} limit={limit} p={p}"
        for name, out in (("Allgather", got), ("Allgatherv", gotv), ("in place", inplace)):
            assert_everywhere(mpi_comm, assert_bytes_equal, out, want, f"{what} {name}")
        assert_everywhere(mpi_comm, assert_bytes_equal, send, kept, f"{what}: input untouched")


@pytest.mark.serial
def test_late_copy_moves_the_own_block_copy_as_late_as_the_rows_allow():
    """plans.late_copy on real schedules, checked row by row: sends of exactly the own
    block read IN, the copy goes before the first row reading the block otherwise (recursive
    doubling's second step sends it with the partner's) or last (ring: only the first step
    sends it); a rank whose rows receive into its block keeps the schedule as it is."""
    from collectives.plans import late_copy
    from collectives.registry import schedule
    from collectives.schedule import ACC, COPY, IN, NONE, SENDRECV

    counts = (2, 3, 4, 5)
    ring, _, _ = schedule("allgather_ring", 1, 4, counts)
    assert list(ring[0]) == [SENDRECV, ACC, 2, 3, 2, ACC, 0, 2, 0]
    out, copied = late_copy(ring, 2, 3)
    assert copied
    assert [list(r) for r in out] == ([[SENDRECV, IN, 0, 3, 2, ACC, 0, 2, 0]] + [list(r) for r in ring[1:]]
                                      + [[COPY, ACC, 2, 3, NONE, IN, 0, 0, NONE]])
    rd, _, _ = schedule("allgather_recursive_doubling", 1, 4, counts)
    assert list(rd[1][1:4]) == [ACC, 0, 5]  # the second step sends blocks 0 and 1
    out, copied = late_copy(rd, 2, 3)
    assert copied
    assert [list(r) for r in out] == [[SENDRECV, IN, 0, 3, *rd[0][4:]], [COPY, ACC, 2, 3, NONE, IN, 0, 0, NONE],
                                      *[list(r) for r in rd[1:]]]
    folded, _, _ = schedule("allgather_recursive_doubling", 0, 3, (10, 10, 10))  # receives the whole result
    for steps, offset, count in ((ring, 0, 2), (ring, 2, 2), (ring, 2, 0), (folded, 0, 10)):
        same, copied = late_copy(steps, offset, count)
        assert not copied and np.array_equal(same, steps)


def test_allgatherv_all_empty_but_one(comm, mpi_comm):
    p, r = comm.size, comm.rank
    counts = [0] * p
    counts[p - 1] = 7
    send = np.arange(counts[r], dtype=np.float32) + r
    got = np.zeros(7, np.float32)
    comm.Allgatherv(send, [got, counts])
    assert np.array_equal(got, np.arange(7, dtype=np.float32) + p - 1)


def test_allgatherv_specs_as_mpi4py_reads_them(comm, mpi_comm):
    """No counts: recvbuf split into p near-equal blocks, the first ones longer; one count for
    every rank and one displacement as a stride: each against native MPI on the same spec."""
    p, r = comm.size, comm.rank
    send = np.arange(2 if r == 0 else 1, dtype=np.float64) + 10 * r
    got, want = np.full(p + 1, -1.0), np.full(p + 1, -1.0)
    comm.Allgatherv(send, got)
    mpi_comm.Allgatherv(send, want)
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "no counts")
    got, want = np.full(3 * p, -1.0), np.full(3 * p, -1.0)
    comm.Allgatherv(send[:1], [got, (1, 3), MPI.DOUBLE])
    mpi_comm.Allgatherv(send[:1], [want, (1, 3), MPI.DOUBLE])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, want, "one count, a stride")


def test_allgather_errors(comm):
    p = comm.size
    with pytest.raises(TypeError, match="dtype"):
        comm.Allgather(np.zeros(2, np.float32), np.zeros(2 * p, np.float64))
    with pytest.raises(ValueError, match="recvbuf has"):
        comm.Allgather(np.zeros(2), np.zeros(2 * p + 1))
    with pytest.raises(ValueError, match="counts"):
        comm.Allgatherv(np.zeros(1), [np.zeros(4 * p), ([1] * (p + 1), None), MPI.DOUBLE])
    with pytest.raises(ValueError, match="sendbuf has"):
        comm.Allgatherv(np.zeros(2), [np.zeros(p), [1] * p])
    with pytest.raises(ValueError, match="unknown allgather algorithm"):
        comm.Allgather(np.zeros(1), np.zeros(p), algorithm="bogus")


def test_allgather_mismatch_raises_everywhere(comm):
    p, r = comm.size, comm.rank
    if p == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(ValueError, match="differ across ranks"):
        comm.Allgather(np.zeros(1 + (r == 0)), np.zeros(p * (1 + (r == 0))))
