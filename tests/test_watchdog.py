"""The stall watchdog: a wait with no progress for longer than the limit raises StallError naming
the collective, its call number and the ranks still awaited; the Comm is unusable afterwards.

In-suite stalls are built so that no message is ever sent: a receive nobody sends (every rank
waits for its right neighbour), so nothing is left in flight for a later test.  Stalls that
involve a missing rank (a skipped collective, a killed rank) are whole launches, in
tests/test_faults.py.
"""
import re

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import comm as comm_module, plans, watchdog
from collectives.comm import NATIVE
from collectives.exchange import FUSED_BYTES
from collectives.ops import dtype_code
from collectives.schedule import ACC, Schedule, run_python
from collectives.watchdog import StallError
from tests.util import check_allreduce, point_to_point

LIMIT = 0.2  # seconds; only ever reached by the stalls built here
INT64 = dtype_code(np.int64)
TAG = 7


def unanswered(rank, size, blocking):
    """Every rank waits for a message from its right neighbour, which nobody sends."""
    s = Schedule(rank, size)
    if blocking:
        s.recv((rank + 1) % size, ACC, 0, 4)
    else:
        s.irecv((rank + 1) % size, ACC, 0, 4)
        s.waitall()
    return s


@pytest.mark.serial
def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("COLLECTIVES_TIMEOUT", "2.5")
    monkeypatch.setenv("COLLECTIVES_TIMEOUT_MODE", "abort")
    assert watchdog.settings() == (2.5, "abort")
    assert watchdog.settings(0, "raise") == (0.0, "raise")
    monkeypatch.delenv("COLLECTIVES_TIMEOUT")
    monkeypatch.delenv("COLLECTIVES_TIMEOUT_MODE")
    assert watchdog.settings() == (1800.0, "raise")  # watched unless told otherwise


@pytest.mark.serial
@pytest.mark.parametrize("env, value, match", [
    ("COLLECTIVES_TIMEOUT", "soon", "COLLECTIVES_TIMEOUT must be a number of seconds, got 'soon'"),
    ("COLLECTIVES_TIMEOUT", "-1", "finite and >= 0"),
    ("COLLECTIVES_TIMEOUT", "inf", "finite and >= 0"),
    ("COLLECTIVES_TIMEOUT_MODE", "kill", "one of raise, abort .*got 'kill'"),
])
def test_bad_settings_name_the_variable(monkeypatch, env, value, match):
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=match):
        collectives.Comm(MPI.COMM_SELF)


@pytest.mark.parametrize("blocking", [False, True], ids=["waitall", "recv"])
@pytest.mark.parametrize("executor_kind", ["native", "python"])
def test_a_stalled_step_names_the_peer(mpi_comm, blocking, executor_kind):
    raw = mpi_comm.Dup()
    raw.Set_errhandler(MPI.ERRORS_RETURN)
    r, p = raw.rank, raw.size
    s = unanswered(r, p, blocking)
    acc = np.full(4, -1, np.int64)
    if executor_kind == "native":
        if not comm_module.NATIVE:
            pytest.skip("the native executor is not in use")
        from collectives._executor import execute

        run = lambda: execute(raw, s.finish(), acc, None, None, INT64, 0, TAG, s.nreq, "test",  # noqa: E731
                              LIMIT)
    else:
        run = lambda: run_python(raw, s.finish(), [acc.view(np.uint8), None, None], INT64, 0,  # noqa: E731
                                 TAG, LIMIT, "test")
    with pytest.raises(StallError) as info:
        run()
    err = info.value
    assert isinstance(err, TimeoutError)
    assert (err.step, err.rank, err.peers) == (0 if blocking else 1, r, [((r + 1) % p, "receive")])
    assert LIMIT <= err.waited < 60
    assert (f"test: rank {r} has waited {err.waited:.1f} s at step {err.step} for rank(s) "
            f"{(r + 1) % p} (receive from {(r + 1) % p})") in str(err)
    # Every rank has cancelled its receive: a message sent now must reach a new one, not it.
    raw.Barrier()
    sent = raw.Isend(np.full(4, r, np.int64), (r - 1) % p, TAG)
    got = np.zeros(4, np.int64)
    raw.Recv(got, (r + 1) % p, TAG)
    sent.Wait()
    assert (got == (r + 1) % p).all() and (acc == -1).all()
    raw.Free()


@pytest.mark.parametrize("form", ["contiguous", "strided"])
def test_comm_is_unusable_after_a_stall(mpi_comm, check, monkeypatch, form):
    monkeypatch.setattr(plans, "schedule", lambda name, rank, size, *args: (
        lambda s: (s.finish(), s.tmp_count, s.nreq))(unanswered(rank, size, False)))
    c = collectives.Comm(mpi_comm, check=check, timeout=LIMIT)
    c.Allreduce(np.zeros(0), np.zeros(0))  # call 1: no schedule runs
    send = np.ones(8, np.int64) if form == "contiguous" else np.ones(16, np.int64)[::2]
    if c.size == 1:  # one rank runs no all-reduce schedule: Reduce
        call = lambda: c.Reduce(send, np.zeros(8, np.int64), root=0, algorithm="binomial")  # noqa: E731
        name = re.escape("reduce (reduce_binomial)")
    else:
        call = lambda: c.Allreduce(send, np.zeros(8, np.int64), algorithm="ring")  # noqa: E731
        name = re.escape("allreduce (allreduce_ring)")
    right = (c.rank + 1) % c.size
    with pytest.raises(StallError, match=rf"^{name}, call 2 on this communicator: rank {c.rank} has "
                                         rf"waited .* s at step 1 for rank\(s\) {right} "
                                         rf"\(receive from {right}\)"):
        call()
    for later in (call, lambda: c.Bcast(np.zeros(2)), c.Barrier, lambda: c.Ibarrier()):
        with pytest.raises(RuntimeError, match=rf"unusable: {name}, call 2 on this communicator"):
            later()
    c.Free()


@pytest.mark.parametrize("purepython", [False, True])
def test_watched_collectives_match_native(mpi_comm, monkeypatch, purepython):
    """With a limit that never fires, every all-reduce algorithm gives native MPI's result."""
    monkeypatch.setattr(comm_module, "NATIVE", NATIVE and not purepython)
    for check in (True, False):
        c = collectives.Comm(mpi_comm, check=check, timeout=60)
        for name in ("ring", "recursive_doubling", "rabenseifner", "ring_segmented", "binomial"):
            check_allreduce(c, mpi_comm, np.float64, [0, 1, c.size + 1, 1000], f"watched {name}",
                            algorithm=name)
        got = np.arange(5.0) if c.rank == 0 else np.zeros(5)
        c.Bcast(got, root=0)
        assert (got == np.arange(5.0)).all()
        c.Barrier()
        c.Free()


def test_unanswered_receive_primitive_raises(mpi_comm):
    c = collectives.Comm(mpi_comm, timeout=LIMIT)
    r, p = c.rank, c.size
    with pytest.raises(StallError, match=rf"receive from rank {(r + 1) % p}: rank {r} has waited "
                                         rf".* s for rank\(s\) {(r + 1) % p} \(receive from"):
        c.Receive(np.zeros(3), (r + 1) % p).wait()
    with pytest.raises(RuntimeError, match="unusable: receive from rank"):
        c.Barrier()
    c.Free()
    c = collectives.Comm(mpi_comm, timeout=LIMIT)
    with pytest.raises(StallError, match=rf"serve to any rank: rank {r} has waited"):
        c.Serve(np.zeros(3))
    c.Free()


@pytest.mark.parametrize("count, label", [(2, "allreduce_fused"), (FUSED_BYTES // 4 + 1, "argument check")],
                         ids=["fused", "header"])
@pytest.mark.parametrize("path", ["native", "purepython"])
def test_stall_in_the_checked_exchange_names_the_partner(mpi_comm, monkeypatch, path, count, label):
    """A small checked call is the fused exchange, a larger one starts with the header-only
    exchange, watched trade by trade: rank 1 alone calls it, waits for rank 0's message (with
    p not a power of two it receives before it sends, so no message is left in flight) and
    raises StallError naming rank 0 and what ran; the Comm is unusable."""
    p = mpi_comm.Get_size()
    if p & (p - 1) == 0:
        pytest.skip("rank 1 receives first only when the rank count is not a power of two")
    monkeypatch.setattr(comm_module, "NATIVE", NATIVE and path == "native")
    c = point_to_point(mpi_comm, check=True, timeout=LIMIT)  # a segment's stall: tests/test_shm.py
    x = np.ones(count, np.float32)
    if c.rank == 1:
        with pytest.raises(StallError) as info:
            c.Allreduce(x, np.zeros(count, np.float32))
        err = info.value
        assert (err.collective, err.call, err.step, err.rank, err.peers) == (
            f"allreduce ({label})", 1, 0, 1, [(0, "receive")])
        assert LIMIT <= err.waited < 60
        with pytest.raises(RuntimeError, match=rf"unusable: allreduce \({label}\), call 1"):
            c.Bcast(x)
    mpi_comm.Barrier()
    c.Free()
