"""Messages over MPI's int count, split into rows of at most ``schedule.MAX_COUNT`` elements.

The limit is lowered to a few elements, so every split path runs at small sizes: the
schedules are checked without MPI (no row over the limit, pieces that concatenate to the
unsplit messages, no deadlock even when MPI buffers nothing), then every collective runs
under mpiexec against native MPI at sizes around the limit.  The real thing, just over 2^31
int8 elements, is ``make test-large`` (tests/large_counts.py).
"""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
import test_schedules as symbolic
from collectives import registry, schedule
from collectives.ops import dtype_code
from collectives.schedule import (ACC, COPY, IRECV, ISEND, NONE, REDUCE, SENDRECV, TMP,
                                  WAITALL, Schedule, check_counts)
from util import assert_close, make_data

LIMIT = 7


@pytest.fixture(scope="module", autouse=True)
def lowered():
    """Every test of this module runs with the split limit at LIMIT elements (its Comms, made
    after this, plan their calls under it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schedule, "MAX_COUNT", LIMIT)
        yield


# ---- schedules, without MPI ---------------------------------------------------------------

def _args(collective, p, n):
    """Arguments of a ``collective`` schedule moving about ``n`` elements per rank."""
    counts = tuple(n + (3 * i) % 5 for i in range(p))
    return {"allreduce": (n,), "bcast": (n, p - 1), "reduce": (n, p // 2),
            "allgather": (counts,), "reduce_scatter": (counts,), "gather": (counts, p - 1),
            "scatter": (counts, p // 2), "barrier": (), "scan": (n, True), "exscan": (n, False),
            "alltoall": (tuple((i * n, n) for i in range(p)),) * 2,
            "neighbor_allgather": (((0, 0, n), (p - 1, 0, n)), ((0, 0, n), (p - 1, n, n))),
            "neighbor_alltoall": (((0, 0, n), (p - 1, n, n)),) * 2}[collective]


def _build(name, p, args, limit):
    """Every rank's (Schedule, steps) for algorithm ``name`` under ``limit``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schedule, "MAX_COUNT", limit)
        out = []
        for r in range(p):
            s = Schedule(r, p)
            registry._BY_NAME[name].build(s, *args)
            out.append((s, s.finish()))
        return out


def _messages(steps):
    """Per (direction, peer): the element indices a rank sends or receives, in order."""
    out = {}
    for kind, ab, ao, ac, ap, bb, bo, bc, bp in steps.tolist():
        if kind in (SENDRECV, ISEND) and ap != NONE:
            out.setdefault(("to", ap), []).extend((ab, i) for i in range(ao, ao + ac))
        if kind in (SENDRECV, IRECV) and bp != NONE:
            out.setdefault(("from", bp), []).extend((bb, i) for i in range(bo, bo + bc))
    return out


ALL = [(c, a.name) for c, rows in registry.ALGORITHMS.items() for a in rows]


@pytest.mark.serial
@pytest.mark.parametrize("collective,name", ALL, ids=[n for _, n in ALL])
def test_split_rows(collective, name):
    """No row over the limit; the pieces are the unsplit messages cut in order; nreq covers them."""
    split_seen = False
    for p in (1, 2, 3, 5, 8):
        for n in (0, 1, 3, 7, 8, 23):
            args = _args(collective, p, n)
            whole = _build(name, p, args, schedule.INT_MAX)
            cut = _build(name, p, args, 3)
            for (ws, wsteps), (cs, csteps) in zip(whole, cut):
                moves = csteps[np.isin(csteps[:, 0], (SENDRECV, ISEND, IRECV))]
                assert moves.size == 0 or moves[:, [3, 7]].max() <= 3, (name, p, n)
                assert _messages(csteps) == _messages(wsteps), (name, p, n)
                kept = wsteps[np.isin(wsteps[:, 0], (REDUCE, COPY))]
                assert np.array_equal(csteps[np.isin(csteps[:, 0], (REDUCE, COPY))], kept)
                pending = most = 0
                for kind in csteps[:, 0]:
                    pending = 0 if kind == WAITALL else pending + (kind in (ISEND, IRECV))
                    most = max(most, pending)
                assert cs.nreq == most and cs.tmp_count == ws.tmp_count, (name, p, n)
                split_seen |= len(csteps) > len(wsteps)
    assert split_seen or collective == "barrier", f"{name}: no message was ever split"


@pytest.mark.serial
def test_executors_refuse_over_int_max():
    """Both executors refuse a send of 2^32 + 5 elements (C int: 5) instead of narrowing it;
    a REDUCE row that long is fine."""
    s = Schedule(0, 2)
    s.reduce((0, 0, 2**32 + 5), (1, 0, 2**32 + 5))
    check_counts(s.finish())
    # A message to itself, which a narrowed count would let complete with 5 elements.
    rows = np.array([[ISEND, ACC, 0, 2**32 + 5, 0, NONE, 0, 0, NONE],
                     [IRECV, NONE, 0, 0, NONE, TMP, 0, 2**32 + 5, 0],
                     [WAITALL, NONE, 0, 0, NONE, NONE, 0, 0, NONE]], np.int64)
    acc, tmp, code = np.zeros(8, np.uint8), np.zeros(8, np.uint8), dtype_code(np.uint8)
    with pytest.raises(ValueError, match="4294967301 elements in one message"):
        schedule.run_python(MPI.COMM_SELF, rows, [acc, tmp, None], code, 0, 1)
    engine = pytest.importorskip("collectives._executor")
    with pytest.raises(MPI.Exception) as err:
        engine.execute(MPI.COMM_SELF, rows, acc, tmp, None, code, 0, 1, 2)
    assert err.value.Get_error_class() == MPI.ERR_COUNT


@pytest.mark.serial
def test_bad_limit(monkeypatch):
    monkeypatch.setattr(schedule, "MAX_COUNT", 0)
    with pytest.raises(ValueError, match="COLLECTIVES_MAX_COUNT must be"):
        Schedule(0, 2)


@pytest.mark.serial
def test_sendrecv_while_pending():
    s = Schedule(0, 2)
    s.isend(1, 0, 0, 4)
    with pytest.raises(RuntimeError, match="pending"):
        s.sendrecv(1, (0, 0, 4), 1, (1, 0, 4))


SYMBOLIC = {c: getattr(symbolic, f"test_{c}_schedule") for c in registry.ALGORITHMS}


@pytest.mark.serial
@symbolic.MODELS
@pytest.mark.parametrize("limit", [2, schedule.INT_MAX], ids=["split", "whole"])
@pytest.mark.parametrize("collective", list(SYMBOLIC))
def test_symbolic(monkeypatch, collective, limit, eager):
    """test_schedules' checks of every algorithm, with messages split into pieces of at most
    two elements or whole, with MPI buffering eager sends or none: every result right, no
    deadlock, no message left over."""
    monkeypatch.setattr(schedule, "MAX_COUNT", limit)
    for algorithm in registry.ALGORITHMS[collective]:
        SYMBOLIC[collective](algorithm, eager)


# ---- under mpiexec, against native MPI ------------------------------------------------------

@pytest.mark.serial
def test_limit_in_effect():
    """The plans the collectives below use are built under LIMIT."""
    steps = registry.schedule("allreduce_recursive_doubling", 0, 2, 3 * LIMIT)[0]
    assert steps[steps[:, 0] == IRECV][:, 7].tolist() == [LIMIT] * 3

def _sizes(p):
    """Around the limit and its multiples, per rank."""
    return sorted({0, 1, LIMIT - 1, LIMIT, LIMIT + 1, 2 * LIMIT + 3, p * LIMIT + 1, 61})


def _both(mpi_comm):
    """The checked Comm and the unchecked one (Allreduce's fast path), fresh so no plan is cached."""
    return [collectives.Comm(mpi_comm), collectives.Comm(mpi_comm, check=False)]


@pytest.mark.parametrize("dtype", [np.int32, np.float64], ids=str)
@pytest.mark.parametrize("algorithm", collectives.names("allreduce") + collectives.shm_names("allreduce"))
def test_allreduce(mpi_comm, algorithm, dtype):
    for comm in _both(mpi_comm):
        for n in _sizes(mpi_comm.size):
            send = make_data(dtype, "sum", n, mpi_comm.rank)
            got, want = np.zeros(n, dtype), np.zeros(n, dtype)
            comm.Allreduce(send, got, algorithm=algorithm)
            mpi_comm.Allreduce(send, want)
            assert_close(got, want, dtype, mpi_comm.size, f"{algorithm} n={n}")
        comm.Free()


@pytest.mark.parametrize("algorithm", collectives.names("bcast") + collectives.shm_names("bcast"))
def test_bcast(mpi_comm, algorithm):
    comm = collectives.Comm(mpi_comm)
    for n in _sizes(mpi_comm.size):
        for root in {0, mpi_comm.size - 1}:
            got = make_data(np.int16, "sum", n, mpi_comm.rank)
            want = got.copy()
            comm.Bcast(got, root=root, algorithm=algorithm)
            mpi_comm.Bcast(want, root=root)
            assert np.array_equal(got, want), f"{algorithm} n={n} root={root}"
    comm.Free()


def test_reduce(mpi_comm):
    comm = collectives.Comm(mpi_comm)
    root = mpi_comm.size // 2
    for n in _sizes(mpi_comm.size):
        send = make_data(np.int64, "sum", n, mpi_comm.rank)
        got, want = np.zeros(n, np.int64), np.zeros(n, np.int64)
        comm.Reduce(send, got, root=root)
        mpi_comm.Reduce(send, want, root=root)
        assert np.array_equal(got, want), f"n={n}"
    comm.Free()


def _counts(p, n):
    return [n + (2 * i) % 3 for i in range(p)]


@pytest.mark.parametrize("algorithm", collectives.names("allgather") + collectives.shm_names("allgather"))
def test_allgatherv(mpi_comm, algorithm):
    comm, p = collectives.Comm(mpi_comm), mpi_comm.size
    for n in _sizes(p):
        counts = _counts(p, n)
        send = make_data(np.float32, "sum", counts[mpi_comm.rank], mpi_comm.rank)
        got, want = np.zeros(sum(counts), np.float32), np.zeros(sum(counts), np.float32)
        comm.Allgatherv(send, [got, counts], algorithm=algorithm)
        mpi_comm.Allgatherv(send, [want, counts])
        assert np.array_equal(got, want), f"{algorithm} counts={counts}"
    comm.Free()


@pytest.mark.parametrize("algorithm", collectives.names("reduce_scatter") + collectives.shm_names("reduce_scatter"))
def test_reduce_scatter(mpi_comm, algorithm):
    comm, p, r = collectives.Comm(mpi_comm), mpi_comm.size, mpi_comm.rank
    for n in _sizes(p):
        counts = _counts(p, n)
        send = make_data(np.int32, "sum", sum(counts), r)
        got, want = np.zeros(counts[r], np.int32), np.zeros(counts[r], np.int32)
        comm.Reduce_scatter(send, got, counts, algorithm=algorithm)
        mpi_comm.Reduce_scatter(send, want, counts)
        assert np.array_equal(got, want), f"{algorithm} counts={counts}"
    comm.Free()


@pytest.mark.parametrize("algorithm", collectives.names("gather") + collectives.names("scatter")
                         + collectives.shm_names("gather") + collectives.shm_names("scatter"))
def test_gather_scatter(mpi_comm, algorithm):
    """Gather, or Scatter, with equal blocks around the limit, against native MPI."""
    comm, p, r = collectives.Comm(mpi_comm), mpi_comm.size, mpi_comm.rank
    root = p - 1
    for n in _sizes(p):
        mine = make_data(np.int8, "sum", n, r)
        whole = make_data(np.int8, "sum", n * p, root) if r == root else None
        got, want = [np.zeros(n * p if algorithm.startswith("gather") else n, np.int8)
                     if r == root or algorithm.startswith("scatter") else None for _ in range(2)]
        if algorithm.startswith("gather"):
            comm.Gather(mine, got, root=root, algorithm=algorithm)
            mpi_comm.Gather(mine, want, root=root)
        else:
            comm.Scatter(whole, got, root=root, algorithm=algorithm)
            mpi_comm.Scatter(whole, want, root=root)
        if got is not None:
            assert np.array_equal(got, want), f"{algorithm} n={n}"
    comm.Free()


@pytest.mark.parametrize("method", ["Scan", "Exscan"])
def test_scan(mpi_comm, method):
    for comm in _both(mpi_comm):
        for n in _sizes(mpi_comm.size):
            send = make_data(np.int64, "sum", n, mpi_comm.rank)
            got, want = np.zeros(n, np.int64), np.zeros(n, np.int64)
            getattr(comm, method)(send, got)
            getattr(mpi_comm, method)(send, want)
            assert np.array_equal(got, want), f"{method} n={n}"
        comm.Free()


@pytest.mark.parametrize("algorithm", collectives.names("alltoall"))
def test_alltoall(mpi_comm, algorithm):
    """Blocks around the limit (in bytes: an all-to-all moves bytes), against native MPI."""
    for comm in _both(mpi_comm):
        for n in _sizes(mpi_comm.size):
            send = make_data(np.int8, "sum", n * mpi_comm.size, mpi_comm.rank)
            got, want = np.zeros_like(send), np.zeros_like(send)
            comm.Alltoall(send, got, algorithm=algorithm)
            mpi_comm.Alltoall(send, want)
            assert np.array_equal(got, want), f"{algorithm} n={n}"
        comm.Free()


@pytest.mark.parametrize("algorithm", ["alltoall_pairwise", "alltoall_scattered"])
def test_alltoallv(mpi_comm, algorithm):
    """Blocks on both sides of the limit in one call: the ranks whose blocks are over it plan
    the call alone and cut those messages, the others fill in their template; against native."""
    p, r = mpi_comm.size, mpi_comm.rank
    for comm in _both(mpi_comm):
        for n in _sizes(p):
            C = n + (np.add.outer(np.arange(p), 2 * np.arange(p)) % 3) * (LIMIT // 2)
            send = make_data(np.int8, "sum", int(C[r].sum()), r)
            got, want = np.zeros(int(C[:, r].sum()), np.int8), np.zeros(int(C[:, r].sum()), np.int8)
            comm.Alltoallv([send, list(C[r])], [got, list(C[:, r])], algorithm=algorithm)
            mpi_comm.Alltoallv([send, list(C[r])], [want, list(C[:, r])])
            assert np.array_equal(got, want), f"{algorithm} n={n}"
        comm.Free()


@pytest.mark.parametrize("call", ["push", "receive", "pull", "serve"])
def test_p2p_needs_large_count(comm, monkeypatch, call):
    """Without MPI-4 large counts a buffer over INT_MAX bytes is refused before any message."""
    from collectives import p2p, transport

    monkeypatch.setattr(transport, "LARGE_COUNT", False)
    big = np.zeros(schedule.INT_MAX + 1, np.uint8)  # never touched, so never backed by memory
    with pytest.raises(ValueError, match=f"{call}: a 2147483648-byte buffer needs MPI-4"):
        getattr(p2p, call)(comm, big, 0)
