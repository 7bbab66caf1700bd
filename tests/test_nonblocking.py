"""Nonblocking collectives: same results as blocking, any completion order, a rank's own bad argument
at the call and the others' errors at wait(),
blocking calls queued behind pending ones, progress while the caller computes, and a wait()
that runs what the progress thread has not started."""
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from collectives import Comm
from collectives.nonblocking import Progress

N = 10007  # prime, uneven over any rank count


def _data(r, n=N, dtype=np.float64):
    return (np.arange(n) % 251 * (r + 1)).astype(dtype)


def _bounded_poll(req, tries=30000):
    """Poll ``req.test()`` with short sleeps; bounded, so a broken request fails instead of hanging."""
    for _ in range(tries):
        if req.test():
            return True
        time.sleep(0.001)
    return req.test()


def test_results_equal_native(comm, mpi_comm):
    p, r = comm.size, comm.rank
    root = p - 1
    send = _data(r)
    want_sum, want_max = np.empty_like(send), np.empty_like(send)
    mpi_comm.Allreduce(send, want_sum)
    mpi_comm.Allreduce(send, want_max, op=MPI.MAX)
    want_gather = np.empty(p * N)
    mpi_comm.Allgather(send, want_gather)
    want_bcast = _data(root).astype(np.int32)

    got_sum, got_max, got_reduce = (np.full_like(send, -1) for _ in range(3))
    got_gather = np.full(p * N, -1.0)
    got_bcast = want_bcast.copy() if r == root else np.zeros_like(want_bcast)
    reqs = [comm.Iallreduce(send, got_sum), comm.Iallreduce(send, got_max, op=MPI.MAX),
            comm.Ireduce(send, got_reduce, root=root), comm.Iallgather(send, got_gather),
            comm.Ibcast(got_bcast, root=root), comm.Ibarrier()]
    for req in reqs:
        assert req.wait() is None
    np.testing.assert_array_equal(got_sum, want_sum)
    np.testing.assert_array_equal(got_max, want_max)
    if r == root:
        np.testing.assert_array_equal(got_reduce, want_sum)
    np.testing.assert_array_equal(got_gather, want_gather)
    np.testing.assert_array_equal(got_bcast, want_bcast)


def test_outstanding_requests_completed_in_reverse_order(comm, mpi_comm):
    sends = [_data(comm.rank) * (k + 1) for k in range(6)]
    outs = [np.zeros(N) for _ in sends]
    reqs = [comm.Iallreduce(s, o) for s, o in zip(sends, outs)]
    for req in reversed(reqs):
        req.wait()
    for s, o in zip(sends, outs):
        want = np.empty(N)
        mpi_comm.Allreduce(s, want)
        np.testing.assert_array_equal(o, want)


def test_test_polling_becomes_true(comm, mpi_comm):
    out = np.zeros(N)
    req = comm.Iallreduce(_data(comm.rank), out)
    assert _bounded_poll(req)
    want = np.empty(N)
    mpi_comm.Allreduce(_data(comm.rank), want)
    np.testing.assert_array_equal(out, want)


def test_blocking_call_queues_behind_pending(comm, mpi_comm):
    outs = [np.zeros(N) for _ in range(4)]
    reqs = [comm.Iallreduce(_data(comm.rank) + k, outs[k]) for k in range(3)]
    comm.Allreduce(_data(comm.rank) + 3, outs[3])
    # Collectives run in the order they were called, so the blocking one finishing means
    # every earlier nonblocking one has finished too, on every rank.
    assert all(req.test() for req in reqs)
    for k, out in enumerate(outs):
        want = np.empty(N)
        mpi_comm.Allreduce(_data(comm.rank) + k, want)
        np.testing.assert_array_equal(out, want)


def test_mismatch_surfaces_at_wait(comm, mpi_comm):
    if comm.size < 2:
        pytest.skip("a mismatch across ranks needs two ranks")
    n = 10 if comm.rank == 0 else 11
    req = comm.Iallreduce(np.ones(n), np.zeros(n))  # the call itself cannot know yet
    with pytest.raises(ValueError, match="arguments differ across ranks: count ranges 10..11"):
        req.wait()
    with pytest.raises(ValueError, match="count ranges 10..11"):
        req.test()
    out = np.zeros(5)
    comm.Iallreduce(np.ones(5), out).wait()  # the communicator is still usable
    assert (out == comm.size).all()


@pytest.mark.serial
def test_wait_runs_what_the_thread_has_not_started():
    """Holding the queue's lock keeps the progress thread from taking a job (the lock is
    reentrant, so this thread still can): wait() on the last of three runs all three here,
    in order; an error stays with its own request; and while the thread runs a job, a wait()
    on the next one does not run it beside it."""
    progress = Progress()
    ran = []

    def job(name, fail=False):
        def run():
            ran.append((name, threading.get_ident()))
            if fail:
                raise ValueError(name)
        return run
    try:
        with progress._cv:
            reqs = [progress.submit(job("a")), progress.submit(job("b", fail=True)), progress.submit(job("c"))]
            reqs[2].wait()
        assert ran == [(name, threading.get_ident()) for name in "abc"]
        assert reqs[0].test()
        with pytest.raises(ValueError, match="b"):
            reqs[1].wait()
        gate, started = threading.Event(), threading.Event()
        busy = progress.submit(lambda: (started.set(), gate.wait(), ran.append(("busy", threading.get_ident()))))
        assert started.wait(60)
        after = progress.submit(job("after"))
        threading.Timer(0.05, gate.set).start()
        after.wait()
        # Run beside the busy job, "after" would come first: it ends only once the gate opens.
        assert busy.test() and [name for name, _ in ran[-2:]] == ["busy", "after"]
    finally:
        progress.close()


def test_free_finishes_pending_work_and_stops_the_thread(mpi_comm):
    c = Comm(mpi_comm)
    out = np.zeros(N)
    req = c.Iallreduce(_data(c.rank), out)
    thread = c._progress._thread
    c.Free()
    assert req.test()
    assert not thread.is_alive()
    want = np.empty(N)
    mpi_comm.Allreduce(_data(c.rank), want)
    np.testing.assert_array_equal(out, want)


def test_below_thread_multiple_completes_at_once(mpi_comm, monkeypatch):
    c = Comm(mpi_comm)
    monkeypatch.setattr(MPI, "Query_thread", lambda: MPI.THREAD_SERIALIZED)
    out = np.zeros(N)
    req = c.Iallreduce(_data(c.rank), out)
    assert req.test() and c._progress is None
    want = np.empty(N)
    mpi_comm.Allreduce(_data(c.rank), want)
    np.testing.assert_array_equal(out, want)
    c.Free()


def test_progress_while_the_caller_computes(comm, mpi_comm):
    """The collective completes while the caller computes, before the caller calls wait().

    Rank 1 of the communicator joins only after rank 0 tells it to, and rank 0 tells it only
    after checking that its own request is not complete: so rank 0's request cannot have
    completed inside Iallreduce, and whatever completes it happens in the background while
    rank 0 runs NumPy work and merely polls.  No time is measured; the loops are bounded
    (a synchronous Iallreduce would make rank 1 give up waiting and rank 0 fail).
    """
    p, r = comm.size, comm.rank
    if p < 2:
        pytest.skip("needs two ranks")
    n = 1 << 20
    send = np.arange(n, dtype=np.float64) % 1000 + r
    out = np.zeros(n)
    go = mpi_comm.irecv(source=0, tag=77) if r == 1 else None
    if r == 1:
        for _ in range(60000):  # up to about a minute
            if go.test()[0]:
                break
            time.sleep(0.001)
    req = comm.Iallreduce(send, out)
    done_at_start = req.test()
    if r == 0:
        mpi_comm.send("go", dest=1, tag=77)
    a = np.random.default_rng(r).random((256, 256))
    deadline = time.monotonic() + 120  # a cap, not an assertion: broken progress fails below
    while not req.test() and time.monotonic() < deadline:
        a = np.tanh(a @ a.T / 256)
    done_before_wait = req.test()
    req.wait()
    if r == 1:
        go.wait()
    if r == 0:
        assert not done_at_start, "rank 0's Iallreduce completed before rank 1 had started it"
    assert done_before_wait, "the collective did not complete while the caller computed"
    want = np.empty(n)
    mpi_comm.Allreduce(send, want)
    np.testing.assert_array_equal(out, want)


def test_rooted_nonblocking_forms_equal_native(comm, mpi_comm):
    """Igather, Igatherv, Iscatter and Iscatterv run our schedules and give MPI's results."""
    p, r, root = comm.size, comm.rank, comm.size - 1
    own = _data(r, 7)
    whole = np.arange(7 * p, dtype=np.float64)
    counts = [i % 3 + 1 for i in range(p)]
    displs = [sum(counts[:i]) for i in range(p)]
    mine = np.arange(counts[r], dtype=np.float64) + 10 * r
    got = {k: np.zeros(7 * p) for k in ("gather", "gatherv")}
    part, partv = np.zeros(7), np.zeros(counts[r])
    reqs = [comm.Igather(own, got["gather"], root=root),
            comm.Igatherv(mine, [got["gatherv"], (counts, displs), MPI.DOUBLE], root=root),
            comm.Iscatter(whole, part, root=root),
            comm.Iscatterv([whole, (counts, displs), MPI.DOUBLE], partv, root=root)]
    for req in reqs:
        req.wait()
    assert comm.last_algorithm != "native"
    want = {k: np.zeros(7 * p) for k in ("gather", "gatherv")}
    wpart, wpartv = np.zeros(7), np.zeros(counts[r])
    mpi_comm.Gather(own, want["gather"], root=root)
    mpi_comm.Gatherv(mine, [want["gatherv"], (counts, displs), MPI.DOUBLE], root=root)
    mpi_comm.Scatter(whole, wpart, root=root)
    mpi_comm.Scatterv([whole, (counts, displs), MPI.DOUBLE], wpartv, root=root)
    if r == root:
        np.testing.assert_array_equal(got["gather"], want["gather"])
        np.testing.assert_array_equal(got["gatherv"], want["gatherv"])
    np.testing.assert_array_equal(part, wpart)
    np.testing.assert_array_equal(partv, wpartv)


def _readonly(n):
    a = np.zeros(n)
    a.setflags(write=False)
    return a


# (nonblocking call, the blocking form) with this rank's arguments bad: the call raises at once.
BAD = {
    "iallreduce-count": (lambda c: c.Iallreduce(np.ones(4), np.zeros(5)), lambda c: c.Allreduce(np.ones(4), np.zeros(5))),
    "iallreduce-dtype": (lambda c: c.Iallreduce(np.ones(4, np.float32), np.zeros(4)),
                         lambda c: c.Allreduce(np.ones(4, np.float32), np.zeros(4))),
    "iallreduce-readonly": (lambda c: c.Iallreduce(np.ones(4), _readonly(4)), lambda c: c.Allreduce(np.ones(4), _readonly(4))),
    "ibcast-root": (lambda c: c.Ibcast(np.zeros(4), root=c.size), lambda c: c.Bcast(np.zeros(4), root=c.size)),
    "ireduce-op": (lambda c: c.Ireduce(np.ones(4), np.zeros(4), op=MPI.BAND), lambda c: c.Reduce(np.ones(4), np.zeros(4), op=MPI.BAND)),
    "iallgather-count": (lambda c: c.Iallgather(np.ones(3), np.zeros(3 * c.size + 1)),
                         lambda c: c.Allgather(np.ones(3), np.zeros(3 * c.size + 1))),
    "iallgatherv-counts": (lambda c: c.Iallgatherv(np.ones(3), [np.zeros(4 * c.size), [4] * c.size]),
                           lambda c: c.Allgatherv(np.ones(3), [np.zeros(4 * c.size), [4] * c.size])),
    "ireduce_scatter_block-longer": (lambda c: c.Ireduce_scatter_block(np.ones(2 * c.size), np.zeros(3)),
                                     lambda c: c.Reduce_scatter_block(np.ones(2 * c.size), np.zeros(3))),
    "ireduce_scatter-counts": (lambda c: c.Ireduce_scatter(np.ones(2 * c.size), np.zeros(2), [2] * (c.size + 1)),
                               lambda c: c.Reduce_scatter(np.ones(2 * c.size), np.zeros(2), [2] * (c.size + 1))),
    "igather-root": (lambda c: c.Igather(np.ones(2), np.zeros(2 * c.size), root=-1),
                     lambda c: c.Gather(np.ones(2), np.zeros(2 * c.size), root=-1)),
    "iscatter-size": (lambda c: c.Iscatter(np.ones(2 * c.size + 1), np.zeros(2), root=c.rank),
                      lambda c: c.Scatter(np.ones(2 * c.size + 1), np.zeros(2), root=c.rank)),
}
# The same calls with good arguments, as the other ranks make them.
GOOD = {
    "iallreduce": lambda c: c.Iallreduce(np.ones(4), np.zeros(4)),
    "ibcast": lambda c: c.Ibcast(np.zeros(4), root=0),
    "ireduce": lambda c: c.Ireduce(np.ones(4), np.zeros(4)),
    "iallgather": lambda c: c.Iallgather(np.ones(3), np.zeros(3 * c.size)),
    "iallgatherv": lambda c: c.Iallgatherv(np.ones(3), [np.zeros(3 * c.size), [3] * c.size]),
    "ireduce_scatter_block": lambda c: c.Ireduce_scatter_block(np.ones(2 * c.size), np.zeros(2)),
    "ireduce_scatter": lambda c: c.Ireduce_scatter(np.ones(2 * c.size), np.zeros(2), [2] * c.size),
    "igather": lambda c: c.Igather(np.ones(2), np.zeros(2 * c.size), root=0),
    "iscatter": lambda c: c.Iscatter(np.ones(2 * c.size), np.zeros(2), root=0),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments_raise_at_the_call_and_peers_at_wait(mpi_comm, case):
    """A nonblocking call with a bad argument raises at the call on the rank that passed it,
    with the blocking call's message; the others, which passed good ones, raise at wait(),
    within 5 seconds (not at the stall limit), and the Comm then still works."""
    call, blocking = BAD[case]
    collective = case.split("-")[0]
    with Comm(mpi_comm, timeout=600) as c:
        with pytest.raises((ValueError, TypeError)) as blocked:  # every rank's arguments bad
            blocking(c)
        if c.rank == 0:
            with pytest.raises(type(blocked.value)) as at_call:
                call(c)
            assert str(at_call.value) == str(blocked.value)
        else:
            req = GOOD[collective](c)
            start = time.monotonic()
            with pytest.raises(ValueError, match="invalid arguments on another rank"):
                req.wait()
            assert time.monotonic() - start < 5
        x = np.arange(6.0) + c.rank
        got, want = np.zeros(6), np.zeros(6)
        c.Iallreduce(x, got).wait()
        mpi_comm.Allreduce(x, want)
        np.testing.assert_array_equal(got, want)


def test_an_unknown_algorithm_raises_at_the_call(mpi_comm):
    """The algorithm's name is the caller's own argument: a nonblocking call naming none that
    exists raises at the call, on every rank that names it."""
    with Comm(mpi_comm) as c:
        with pytest.raises(ValueError, match="unknown allreduce algorithm 'nope'"):
            c.Iallreduce(np.ones(3), np.zeros(3), algorithm="nope")
        got = np.zeros(3)
        c.Iallreduce(np.ones(3), got, algorithm="ring").wait()
        np.testing.assert_array_equal(got, np.full(3, float(c.size)))
