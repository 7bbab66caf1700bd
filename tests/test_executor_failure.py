"""A step that fails mid-schedule: no hang, no request left open, and the Comm marked unusable.

Failures are injected with schedules built directly (collectives.schedule.Schedule): a
step whose peer is not a rank of the communicator (MPI_ERR_RANK) and a receive shorter
than the message (MPI_ERR_TRUNCATE).  Every rank fails, so none is left waiting.
"""
import time

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import comm as comm_module, plans, transport
from collectives.ops import dtype_code
from collectives.schedule import ACC, Schedule

pytestmark = pytest.mark.skipif(not comm_module.NATIVE, reason="the native executor's behaviour")

ScheduleError = pytest.importorskip("collectives._executor").ScheduleError
TAG = 7
INT64 = dtype_code(np.int64)


def bad_peer_schedule(rank, size):
    """Start a receive nobody sends, then fail on a peer outside the communicator."""
    s = Schedule(rank, size)
    s.irecv((rank + 1) % size, ACC, 0, 4)
    s.send(size + 3, ACC, 4, 1)
    s.waitall()
    return s


@pytest.fixture
def raw(mpi_comm):
    """A duplicate of ``mpi_comm`` that returns MPI errors instead of aborting."""
    c = mpi_comm.Dup()
    c.Set_errhandler(MPI.ERRORS_RETURN)
    yield c
    c.Free()


def receive_within(comm, buf, source, seconds=20.0):
    """Receive into ``buf`` from ``source``, failing instead of hanging after ``seconds``."""
    req = comm.Irecv(buf, source, TAG)
    deadline = time.monotonic() + seconds
    while not req.Test():
        if time.monotonic() > deadline:
            req.Cancel()
            req.Wait()
            pytest.fail("the message went to a request the failed schedule left open")
        time.sleep(1e-4)


def test_failed_step_cancels_started_receives(raw):
    """The cancelled receive must neither take a later message nor write its buffer."""
    from collectives._executor import execute

    p, r = raw.size, raw.rank
    steps = bad_peer_schedule(r, p)
    acc = np.full(8, -1, np.int64)
    with pytest.raises(ScheduleError) as info:
        execute(raw, steps.finish(), acc, None, None, INT64, 0, TAG, steps.nreq, "test")
    assert info.value.step == 1 and info.value.rank == r
    assert info.value.Get_error_class() == MPI.ERR_RANK
    assert f"test: step 1 failed on rank {r}" in str(info.value)
    # Every rank has cancelled its receive before anyone sends: a message sent earlier could
    # match a receive that is still posted, and then no cancel could take it back.
    raw.Barrier()
    # The message the receive was waiting for arrives now, on the same tag.
    sent = raw.Isend(np.full(4, r, np.int64), (r - 1) % p, TAG)
    got = np.zeros(4, np.int64)
    receive_within(raw, got, (r + 1) % p)
    sent.Wait()
    assert (got == (r + 1) % p).all()
    assert (acc == -1).all()


def test_truncating_receive_raises(raw):
    from collectives._executor import execute

    p, r = raw.size, raw.rank
    if p == 1 and transport._SILENT_SELF_TRUNCATION:
        pytest.skip("Open MPI does not report the truncation of a message a rank sends to itself")
    s = Schedule(r, p)
    s.sendrecv((r + 1) % p, (ACC, 0, 4), (r - 1) % p, (ACC, 4, 2))
    acc = np.arange(8, dtype=np.int64)
    with pytest.raises(ScheduleError) as info:
        execute(raw, s.finish(), acc, None, None, INT64, 0, TAG, s.nreq)
    assert info.value.Get_error_class() == MPI.ERR_TRUNCATE and info.value.step == 0


@pytest.mark.parametrize("form", ["contiguous", "strided"])
def test_comm_is_unusable_after_a_failure(mpi_comm, check, monkeypatch, form):
    monkeypatch.setattr(plans, "schedule", lambda name, rank, size, *args: (
        lambda s: (s.finish(), s.tmp_count, s.nreq))(bad_peer_schedule(rank, size)))
    c = collectives.Comm(mpi_comm, check=check)
    x = np.ones(8, np.int64)
    send = x if form == "contiguous" else np.ones(16, np.int64)[::2]
    if c.size == 1:
        call = lambda: c.Reduce(send, np.zeros(8, np.int64), root=0, algorithm="binomial")  # noqa: E731
        name = "reduce"
    else:
        call = lambda: c.Allreduce(send, np.zeros(8, np.int64), algorithm="ring")  # noqa: E731
        name = "allreduce"
    with pytest.raises(ScheduleError, match=f"{name} .* step 1 failed on rank {c.rank}"):
        call()
    for later in (call, lambda: c.Bcast(np.zeros(2)), c.Barrier, lambda: c.Ibarrier()):
        with pytest.raises(RuntimeError, match=f"unusable: {name} .*step 1 failed on rank {c.rank}"):
            later()
    c.Free()
