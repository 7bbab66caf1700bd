"""The checked all-reduce above FUSED_BYTES overlaps its argument exchange with the schedule's
first step (collectives.agreement, "Overlap"): ranks that disagree after posting different
first steps (peers, sizes, tags) still raise the same ValueError everywhere, leave the
caller's input untouched, and leave no message behind that a later call could match."""
import numpy as np
import pytest
from mpi4py import MPI
from util import point_to_point

N = 20000  # float64 elements: 160 KB, far above FUSED_BYTES


@pytest.fixture(scope="module")
def comm(p2p_comm):
    """The overlap is a point-to-point schedule's: a Comm without a shared segment."""
    return p2p_comm


def _allreduce(c, n, in_place, algorithm=None, dtype=np.float64):
    """An all-reduce of ``n`` elements whose input is 1 + rank; returns (input, output)."""
    x = np.full(n, 1.0 + c.rank, dtype)
    if in_place:
        c.Allreduce(MPI.IN_PLACE, x, algorithm=algorithm)
        return x, x
    y = np.full(n, -5.0, dtype)
    c.Allreduce(x, y, algorithm=algorithm)
    return x, y


# Per case: what rank 0 does (``odd``) while the others run _allreduce(c, N, in_place).
MISMATCHES = {
    # different first-step peers and patterns
    "algorithm": lambda c, ip: _allreduce(c, N, ip, algorithm="recursive_doubling"),
    # rank 0's sends truncate at its peers, theirs arrive short at rank 0
    "count-more": lambda c, ip: _allreduce(c, N + 1000, ip),
    "count-less": lambda c, ip: _allreduce(c, N - 1000, ip),
    "dtype": lambda c, ip: _allreduce(c, 2 * N, ip, dtype=np.float32),
    # another collective's tag
    "collective": lambda c, ip: c.Bcast(np.zeros(N)),
    # a fused exchange beside an overlapped one
    "fused": lambda c, ip: _allreduce(c, 4, ip),
}
OTHERS = {"algorithm": "ring"}


def _works(c, mpi_comm, rng):
    """The same Comm still runs correct all-reduces, large and small, compared with MPI's."""
    for n in (N, 3 * N + 7, 5):
        x = rng.standard_normal(n)
        got, want = np.empty_like(x), np.empty_like(x)
        c.Allreduce(x, got)
        mpi_comm.Allreduce(x, want)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in_place"])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_overlapped_mismatch(comm, mpi_comm, rng, case, in_place):
    """The same ValueError on every rank, the input untouched, and no stray message."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    seen = {}

    def call():
        if comm.rank == 0:
            MISMATCHES[case](comm, in_place)
        else:
            x = np.full(N, 1.0 + comm.rank)
            seen["x"] = x
            if in_place:
                comm.Allreduce(MPI.IN_PLACE, x, algorithm=OTHERS.get(case))
            else:
                comm.Allreduce(x, np.empty(N), algorithm=OTHERS.get(case))

    with pytest.raises(ValueError, match="arguments differ across ranks") as info:
        call()
    assert len(set(mpi_comm.allgather(str(info.value)))) == 1
    if comm.rank:
        assert (seen["x"] == 1.0 + comm.rank).all(), "the input was written before the check agreed"
    _works(comm, mpi_comm, rng)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in_place"])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_overlapped_sends_only(mpi_comm, rng, monkeypatch, case, in_place):
    """The overlap as it runs where no receive may start before the exchange agrees
    (plans.EARLY_RECEIVES off: only the first step's sends lead), checked under any MPI."""
    from collectives import plans
    from collectives.ops import OP_NAMES, dtype_code
    from collectives.schedule import ISEND

    if mpi_comm.size < 2:
        pytest.skip("needs two ranks")
    monkeypatch.setattr(plans, "EARLY_RECEIVES", False)
    with point_to_point(mpi_comm) as c:
        if c._engine.pure:
            pytest.skip("the NumPy twin of the executor runs no overlap")
        _works(c, mpi_comm, rng)
        made = plans.make(c._engine, "allreduce", OTHERS.get(case), N, 8 * N, True, (N,),
                          OP_NAMES.index("sum"), dtype_code(np.float64), not in_place)
        lead = made[7]
        assert mpi_comm.allreduce(lead, MPI.MAX) > 0, "no rank's sends lead"
        assert (made[0][:lead, 0] == ISEND).all(), "a receive starts before the exchange"
        x = np.full(N, 1.0 + c.rank)
        with pytest.raises(ValueError, match="arguments differ across ranks"):
            if c.rank == 0:
                MISMATCHES[case](c, in_place)
            elif in_place:
                c.Allreduce(MPI.IN_PLACE, x, algorithm=OTHERS.get(case))
            else:
                c.Allreduce(x, np.empty(N), algorithm=OTHERS.get(case))
        assert c.rank == 0 or (x == 1.0 + c.rank).all()
        _works(c, mpi_comm, rng)


@pytest.mark.parametrize("in_place", [False, True], ids=["apart", "in_place"])
def test_overlapped_bad_arguments_on_one_rank(comm, mpi_comm, rng, in_place):
    """Rank 0's arguments are invalid (it raises its own error after the agreement) while
    the others have started their first step: they raise, and the Comm still works."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    if comm.rank == 0:
        with pytest.raises(ValueError, match="elements but recvbuf has"):
            comm.Allreduce(np.ones(N), np.zeros(N + 1))
    else:
        x = np.full(N, 2.0)
        with pytest.raises(ValueError, match="invalid arguments on another rank"):
            if in_place:
                comm.Allreduce(MPI.IN_PLACE, x)
            else:
                comm.Allreduce(x, np.empty(N))
        assert (x == 2.0).all()
    _works(comm, mpi_comm, rng)


def test_overlapped_agreeing_calls_match_mpi(comm, mpi_comm, rng):
    """Every algorithm, in place and not, above FUSED_BYTES: the overlapped path's results."""
    from collectives.registry import choices

    for algorithm in choices("allreduce"):
        if algorithm.endswith(("fused", "native")):
            continue
        for in_place in (False, True):
            x = rng.standard_normal(N + 3)
            want = np.empty_like(x)
            mpi_comm.Allreduce(x, want)
            if in_place:
                got = x.copy()
                comm.Allreduce(MPI.IN_PLACE, got, algorithm=algorithm)
            else:
                got = np.empty_like(x)
                comm.Allreduce(x, got, algorithm=algorithm)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=algorithm)


def test_mismatch_leaves_point_to_point_messages(comm, mpi_comm, rng):
    """A Push sent before a mismatched call, on the same private communicator, is still there
    for the Receive after it: settling takes only the all-reduce's messages."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    if comm.rank == 1:
        comm.Wait([comm.Push(np.arange(8.0), 0)])  # small: sent eagerly, complete at once
    with pytest.raises(ValueError, match="arguments differ across ranks"):
        MISMATCHES["count-more"](comm, False) if comm.rank == 0 else _allreduce(comm, N, False)
    if comm.rank == 0:
        got = np.zeros(8)
        comm.Wait([comm.Receive(got, 1)])
        assert (got == np.arange(8.0)).all()
    _works(comm, mpi_comm, rng)


def test_early_receives_only_where_truncation_stays_in_the_buffer(mpi_comm):
    """The overlapped first step posts receives before the exchange agrees, where a disagreeing
    peer's longer message is truncated, only under an MPI that keeps a truncated message within
    the receive buffer (plans.EARLY_RECEIVES): plain MPI, a rendezvous-sized message into
    half its size."""
    from collectives.plans import EARLY_RECEIVES

    if mpi_comm.size < 2:
        pytest.skip("needs two ranks")
    n = 20000
    if mpi_comm.rank == 0:
        mpi_comm.Send(np.arange(n, dtype=np.float64), 1, 7)
    elif mpi_comm.rank == 1:
        room = np.full(n, -1.0)
        with pytest.raises(MPI.Exception) as info:
            mpi_comm.Recv(room[:n // 2], 0, 7)
        assert info.value.Get_error_class() == MPI.ERR_TRUNCATE
        overran = bool((room[n // 2:] != -1.0).any())
        assert not (EARLY_RECEIVES and overran), "MPI wrote a truncated message past the buffer"
    mpi_comm.Barrier()
