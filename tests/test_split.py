"""Messages cut into eager pieces, against native MPI.

A Comm made with COLLECTIVES_EAGER_BYTES=EAGER and COLLECTIVES_SPLIT_BYTES=MOST cuts every
message of its schedules of more than EAGER bytes, up to MOST, into pieces of at most EAGER,
all in flight (``plans.split_messages``), and the checked exchange cuts each of its messages
longer than its piece (``Exchange.piece``: here an eighth of its room, since EAGER is smaller).
Every algorithm of every collective runs at counts whose messages fall just below, at and
above each switch point: the whole vector of the recursive-doubling and tree algorithms, a
rank's block of the ring, pairwise and linear ones, and the fused forms' payloads around the
exchange's pieces.  The schedules' split forms are checked symbolically in test_schedules.py.
"""
import os

import numpy as np
import pytest
from mpi4py import MPI

import collectives
import collectives.eager
from collectives.exchange import FUSED_BYTES
from util import assert_close, make_data, native_supports, reference

EAGER, MOST = 64, 1024
DTYPES = [np.dtype(t) for t in (np.int8, np.float32, np.float64, np.complex128)]


@pytest.fixture(scope="module")
def split(mpi_comm, check):
    """A Comm over ``mpi_comm`` that cuts messages between EAGER and MOST bytes."""
    saved = {k: os.environ.get(k) for k in ("COLLECTIVES_EAGER_BYTES", "COLLECTIVES_SPLIT_BYTES")}
    os.environ.update(COLLECTIVES_EAGER_BYTES=str(EAGER), COLLECTIVES_SPLIT_BYTES=str(MOST))
    try:
        comm = collectives.Comm(mpi_comm, check=check)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    yield comm
    comm.Free()


def counts(p, itemsize, fused=False):
    """Element counts around the switch points for messages of whole vectors and of blocks of
    ``1/p`` of them; with ``fused``, payloads around the exchange's pieces and its room."""
    edges = set()
    for nbytes in (EAGER, MOST):
        for per in (1, p):
            n = per * (nbytes // itemsize)
            edges |= {n - 1, n, n + 1, n + per}
    if fused:
        edges |= {n // itemsize for n in (2000, 2200, 7000, FUSED_BYTES)}
    return sorted(n for n in edges if n > 0)


def test_the_comm_cuts(split):
    """The fixture's Comm takes the limits it was given, and its plans cut: a recursive-doubling
    all-reduce of EAGER + 8 bytes sends two pieces, one of MOST + 8 bytes one message."""
    from collectives import plans
    from collectives.ops import DTYPE_CODE
    from collectives.schedule import ISEND, SENDRECV

    assert (split._engine.eager, split._engine.split_most) == (EAGER, MOST)
    assert split._engine.fused_bytes == collectives.eager.learned()["fused"]
    if split.size == 1:
        return
    for nbytes, messages in ((EAGER + 8, 2), (MOST + 8, 1)):
        n = nbytes // 4
        steps = plans.make(split._engine, "allreduce", "recursive_doubling", n, nbytes, True, (n,), 0,
                           DTYPE_CODE[np.dtype(np.float32)], True)[0]
        sent = [row for row in steps if row[0] == ISEND or (row[0] == SENDRECV and row[4] >= 0)]
        assert len(sent) >= messages and sum(row[3] for row in sent[:messages]) == n, steps


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", collectives.names("allreduce") + ["allreduce_fused"])
def test_allreduce(split, mpi_comm, algorithm, dtype):
    p, r = mpi_comm.size, mpi_comm.rank
    for n in counts(p, dtype.itemsize, algorithm.endswith("fused")):
        for op in ("sum", "max") if dtype.kind != "c" else ("sum",):
            send = make_data(dtype, op, n, r)
            got = np.full_like(send, 7)
            split.Allreduce(send, got, op=getattr(MPI, op.upper()), algorithm=algorithm)
            if native_supports(dtype):
                want = np.empty_like(send)
                mpi_comm.Allreduce(send, want, op=getattr(MPI, op.upper()))
            else:
                want = reference(dtype, op, n, p)
            assert_close(got, want, dtype, p, f"{algorithm} {op} {dtype} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", collectives.names("reduce") + ["reduce_fused"])
def test_reduce(split, mpi_comm, algorithm, dtype):
    p, r = mpi_comm.size, mpi_comm.rank
    for n in counts(p, dtype.itemsize, algorithm.endswith("fused")):
        send = make_data(dtype, "sum", n, r)
        got, want = np.full_like(send, 7), np.full_like(send, 7)
        split.Reduce(send, got, root=p - 1, algorithm=algorithm)
        if native_supports(dtype):
            mpi_comm.Reduce(send, want, root=p - 1)
        else:
            want = reference(dtype, "sum", n, p)
        if r == p - 1:
            assert_close(got, want, dtype, p, f"{algorithm} {dtype} n={n}")


@pytest.mark.parametrize("algorithm", collectives.names("reduce_scatter") + ["reduce_scatter_fused"])
def test_reduce_scatter_block(split, mpi_comm, algorithm):
    p, r = mpi_comm.size, mpi_comm.rank
    for n in counts(p, 8, algorithm.endswith("fused")):
        send = make_data(np.float64, "sum", n * p, r)
        got, want = np.full(n, 7.0), np.full(n, 7.0)
        split.Reduce_scatter_block(send, got, algorithm=algorithm)
        mpi_comm.Reduce_scatter_block(send, want)
        assert_close(got, want, np.float64, p, f"{algorithm} n={n}")


@pytest.mark.parametrize("algorithm", collectives.names("bcast") + ["bcast_fused"])
def test_bcast(split, mpi_comm, algorithm):
    p, r = mpi_comm.size, mpi_comm.rank
    for n in counts(p, 1, algorithm.endswith("fused")):
        want = make_data(np.uint8, "sum", n, p // 2)
        buf = want.copy() if r == p // 2 else np.zeros(n, np.uint8)
        split.Bcast(buf, root=p // 2, algorithm=algorithm)
        assert np.array_equal(buf, want), f"{algorithm} n={n}"


@pytest.mark.parametrize("algorithm", collectives.names("allgather") + ["allgather_fused"])
def test_allgather(split, mpi_comm, algorithm):
    p, r = mpi_comm.size, mpi_comm.rank
    for n in counts(p, 4, algorithm.endswith("fused")):
        send = make_data(np.float32, "sum", n // p, r)
        got, want = np.zeros(send.size * p, np.float32), np.zeros(send.size * p, np.float32)
        split.Allgather(send, got, algorithm=algorithm)
        mpi_comm.Allgather(send, want)
        assert np.array_equal(got, want), f"{algorithm} n={n}"


@pytest.mark.parametrize("algorithm", collectives.names("allgather"))
def test_allgatherv(split, mpi_comm, algorithm):
    """Blocks of different lengths, so some ranks' messages are cut and others not."""
    p, r = mpi_comm.size, mpi_comm.rank
    sizes = [(EAGER + 1) * (i % 3) + i for i in range(p)]
    send = make_data(np.int8, "sum", sizes[r], r)
    got, want = np.zeros(sum(sizes), np.int8), np.zeros(sum(sizes), np.int8)
    split.Allgatherv(send, [got, sizes], algorithm=algorithm)
    mpi_comm.Allgatherv(send, [want, sizes])
    assert np.array_equal(got, want), algorithm


@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_gather_scatter(split, mpi_comm, kind):
    p, r = mpi_comm.size, mpi_comm.rank
    for algorithm in collectives.names(kind) + [f"{kind}_fused"]:
        for n in counts(p, 1, algorithm.endswith("fused")):
            per = max(n // p, 1)
            whole = make_data(np.uint8, "sum", per * p, 0)
            own = make_data(np.uint8, "sum", per, r + 1)
            got, want = np.zeros(per * p, np.uint8), np.zeros(per * p, np.uint8)
            if kind == "gather":
                split.Gather(own, got, root=p - 1, algorithm=algorithm)
                mpi_comm.Gather(own, want, root=p - 1)
            else:
                got, want = np.zeros(per, np.uint8), np.zeros(per, np.uint8)
                split.Scatter(whole, got, root=p - 1, algorithm=algorithm)
                mpi_comm.Scatter(whole, want, root=p - 1)
            assert np.array_equal(got, want), f"{algorithm} n={n}"


# (call(c, n), collective) with ``n`` elements: a long message in pieces on some ranks, a short
# one on others, so the receiver's pieces and the sender's differ in number.
DIFFER = {
    "allreduce": lambda c, n: c.Allreduce(np.ones(n), np.zeros(n)),
    "bcast": lambda c, n: c.Bcast(np.ones(n) if c.rank == 0 else np.zeros(n), root=0),
    "allgather": lambda c, n: c.Allgather(np.ones(n), np.zeros(n * c.size)),
}


@pytest.mark.parametrize("long_on", ["rank 0", "the others"])
@pytest.mark.parametrize("call", list(DIFFER))
def test_mismatch_of_pieces(split, mpi_comm, call, long_on):
    """Ranks whose fused messages differ in length, one piece against several: every rank
    raises the mismatch, none hangs, no piece is left behind (the next calls compute what
    native MPI does)."""
    if split.size < 2:
        pytest.skip("needs two ranks")
    short, long = 4, (FUSED_BYTES // 8) // split.size
    odd = (split.rank == 0) == (long_on == "rank 0")
    with pytest.raises(ValueError, match="count|nbytes"):
        DIFFER[call](split, long if odd else short)
    for n in (short, long, 3 * long // 2):
        x = np.arange(n, dtype=np.float64) + split.rank
        got, want = np.empty(n), np.empty(n)
        split.Allreduce(x, got)
        mpi_comm.Allreduce(x, want)
        assert np.array_equal(got, want), n
