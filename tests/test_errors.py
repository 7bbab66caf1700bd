"""Bad input raises a clear ValueError or TypeError (the same on every rank when ranks disagree);
algorithm selection by argument, communicator and environment, with a logged fallback."""
import logging

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import Comm, registry


@pytest.mark.parametrize("dtype, named", [(object, "object"), ([("a", "f8"), ("b", "i4")], "a"),
                                          ("S5", "S5"), (">f8", ">f8")])
def test_unsupported_dtype(comm, dtype, named):
    buf = np.zeros(4, dtype)
    with pytest.raises(TypeError, match=named):
        comm.Allreduce(buf, np.zeros(4, dtype))
    with pytest.raises(TypeError, match=named):
        comm.Allreduce(MPI.IN_PLACE, buf)


def test_object_arrays_refused_everywhere(comm):
    with pytest.raises(TypeError, match="dtype object holds Python objects"):
        comm.Bcast(np.zeros(3, object))
    with pytest.raises(TypeError, match="dtype object"):
        comm.Allgather(np.zeros(1, object), np.zeros(comm.size, object))


@pytest.mark.parametrize("op, dtype", [(MPI.BAND, np.float64), ("bxor", np.float32),
                                       (MPI.SUM, np.bool_), ("max", np.complex128)])
def test_op_not_defined_on_dtype(comm, op, dtype):
    with pytest.raises(TypeError, match="not defined on dtype"):
        comm.Allreduce(np.zeros(3, dtype), np.zeros(3, dtype), op=op)
    with pytest.raises(TypeError, match="not defined on dtype"):
        comm.Reduce(np.zeros(3, dtype), np.zeros(3, dtype), op=op)


def test_unknown_op(comm):
    with pytest.raises(ValueError, match="unsupported reduction op 'mean'; use one of sum, prod"):
        comm.Allreduce(np.zeros(3), np.zeros(3), op="mean")


def test_mismatched_local_sizes(comm):
    with pytest.raises(ValueError, match="sendbuf has 4 elements but recvbuf has 5"):
        comm.Allreduce(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match="sendbuf has 4 elements but recvbuf has 5"):
        comm.Reduce(np.zeros(4), np.zeros(5), root=comm.rank)
    with pytest.raises(ValueError, match=r"Allgather: recvbuf has \d+ elements, expected"):
        comm.Allgather(np.zeros(2), np.zeros(comm.size * 2 + 5))
    with pytest.raises(TypeError, match="dtype float32 differs from recvbuf dtype float64"):
        comm.Allreduce(np.zeros(4, np.float32), np.zeros(4))


@pytest.mark.parametrize("root", [-1, "size", 0.0, None])
def test_invalid_root(comm, root):
    """A root naming no rank is a ValueError; one that is not an integer a TypeError."""
    exc, match = ((TypeError, "root must be an integer") if root is None or type(root) is float
                  else (ValueError, "invalid root"))
    root = comm.size if root == "size" else root
    for call in (lambda: comm.Bcast(np.zeros(2), root=root),
                 lambda: comm.Reduce(np.zeros(2), np.zeros(2), root=root),
                 lambda: comm.Gather(np.zeros(2), np.zeros(2 * comm.size), root=root),
                 lambda: comm.Scatter(np.zeros(2 * comm.size), np.zeros(2), root=root)):
        with pytest.raises(exc, match=match):
            call()


def test_non_contiguous_recvbuf(comm):
    strided = np.zeros((6, 4))[:, 1]
    with pytest.raises(ValueError, match="recvbuf: non-contiguous"):
        comm.Allreduce(np.ones(6), strided)
    with pytest.raises(ValueError, match="non-contiguous"):
        comm.Bcast(strided)


def test_read_only_recvbuf(comm):
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="recvbuf: buffer is read-only"):
        comm.Allreduce(np.ones(3), frozen)
    with pytest.raises(ValueError, match="read-only"):
        comm.Bcast(b"abc")


def _same_error_on_every_rank(mpi_comm, call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    messages = mpi_comm.allgather(str(info.value))
    assert len(set(messages)) == 1, messages


CROSS_RANK = {
    "allreduce": lambda c, n: c.Allreduce(np.ones(n), np.zeros(n)),
    "bcast": lambda c, n: c.Bcast(np.zeros(n)),
    "reduce": lambda c, n: c.Reduce(np.ones(n), np.zeros(n)),
    "allgather": lambda c, n: c.Allgather(np.ones(n), np.zeros(n * c.size)),
    "reduce_scatter": lambda c, n: c.Reduce_scatter_block(np.ones(n * c.size), np.zeros(n)),
    "gather": lambda c, n: c.Gather(np.ones(n), np.zeros(n * c.size)),
    "scatter": lambda c, n: c.Scatter(np.ones(n * c.size), np.zeros(n)),
}


@pytest.mark.parametrize("collective", list(CROSS_RANK))
def test_size_mismatch_across_ranks_raises_everywhere(comm, mpi_comm, collective):
    """Rank 0 passes 10 elements, the others 11: the same ValueError on every rank, no hang."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    n = 10 if comm.rank == 0 else 11
    _same_error_on_every_rank(mpi_comm, lambda: CROSS_RANK[collective](comm, n),
                              f"{collective}: arguments differ across ranks")
    CROSS_RANK[collective](comm, 11)  # and the communicator still works


def test_dtype_and_op_mismatch_across_ranks(comm, mpi_comm):
    if comm.size < 2:
        pytest.skip("needs two ranks")
    dtype = np.float32 if comm.rank == 0 else np.float64
    _same_error_on_every_rank(mpi_comm, lambda: comm.Allreduce(np.ones(4, dtype), np.zeros(4, dtype)),
                              "dtype ranges")
    op = MPI.MAX if comm.rank == 0 else MPI.SUM
    _same_error_on_every_rank(mpi_comm, lambda: comm.Allreduce(np.ones(4), np.zeros(4), op=op),
                              "op ranges")
    root = comm.rank % 2
    _same_error_on_every_rank(mpi_comm, lambda: comm.Bcast(np.ones(4), root=root), "root ranges")


LOCAL_ONLY = {
    # Each call is invalid on rank 0 alone, where only rank 0 can see it.
    "allreduce": lambda c, bad: c.Allreduce(np.ones(4), np.zeros(3 if bad else 4)),
    "bcast": lambda c, bad: c.Bcast(np.ones((4, 4))[:, ::2] if bad else np.ones(8)),
    "reduce": lambda c, bad: c.Reduce(np.ones(4), np.zeros(5 if bad else 4), root=0),
    "allgather": lambda c, bad: c.Allgather(np.ones(2), np.zeros(2 * c.size, np.float32 if bad else float)),
    "reduce_scatter": lambda c, bad: c.Reduce_scatter_block(np.ones(2 * c.size), np.zeros(1 if bad else 2)),
    "gather": lambda c, bad: c.Gather(MPI.IN_PLACE if bad and c.rank else np.ones(2), np.zeros(2 * c.size)),
    "scatter": lambda c, bad: c.Scatter(np.ones(2 * c.size), np.zeros(2), root=c.size if bad else 0),
    "barrier": lambda c, bad: c.Barrier(algorithm="nonexistent" if bad else None),
}


@pytest.mark.parametrize("collective", list(LOCAL_ONLY))
def test_error_seen_by_one_rank_raises_on_every_rank(comm, mpi_comm, collective):
    """One rank's own invalid arguments: it raises its error, every other rank raises too, no hang."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    bad = comm.rank == (1 if collective == "gather" else 0)
    with pytest.raises((ValueError, TypeError)) as info:
        LOCAL_ONLY[collective](comm, bad)
    if not bad:
        assert "invalid arguments on another rank" in str(info.value)
    else:
        assert "another rank" not in str(info.value)
    LOCAL_ONLY[collective](comm, False)  # and the communicator still works


def test_unknown_algorithm_lists_the_choices(comm, mpi_comm, monkeypatch):
    known = (collectives.names("allreduce") + collectives.shm_names("allreduce")
             + [a.name for a in registry.NODE_ALGORITHMS["allreduce"]]
             + ["allreduce_fused"])
    choices = ", ".join(n[len("allreduce_"):] for n in known)
    with pytest.raises(ValueError, match=f"unknown allreduce algorithm 'fastest'; choose auto or one of {choices}$"):
        comm.Allreduce(np.ones(2), np.zeros(2), algorithm="fastest")
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'bcast_binomial'"):
        comm.Allreduce(np.ones(2), np.zeros(2), algorithm="bcast_binomial")
    with pytest.raises(ValueError, match="unknown bcast algorithm 'ring'"):
        Comm(mpi_comm, algorithms={"bcast": "ring"})
    with pytest.raises(ValueError, match="unknown collective 'alltoallw'"):
        Comm(mpi_comm, algorithms={"alltoallw": "pairwise"})
    monkeypatch.setenv("COLLECTIVES_ALLREDUCE", "warp")
    with Comm(mpi_comm) as warped, pytest.raises(ValueError, match="unknown allreduce algorithm 'warp'"):
        warped.Allreduce(np.ones(2), np.zeros(2))


@pytest.fixture
def ran(monkeypatch):
    """Names of the algorithms whose schedules were executed, in order."""
    from collectives import plans

    names = []
    plan = plans.schedule

    def recording(name, *args):
        names.append(name)
        return plan(name, *args)

    monkeypatch.setattr(plans, "schedule", recording)
    return names


def _allreduce(c, mpi_comm, algorithm=None, n=4000):
    x = np.arange(n, dtype=np.float64) + c.rank
    got, want = np.zeros(n), np.zeros(n)
    c.Allreduce(x, got, algorithm=algorithm)
    mpi_comm.Allreduce(x, want)
    np.testing.assert_array_equal(got, want)


def _auto(comm):
    """The auto choice for _allreduce's call on ``comm`` (a shared-memory row on a shared Comm)."""
    from collectives import plans

    return plans.select(comm._engine, "allreduce", None, 4000, 32000)[0].name


def _ran(ran, name):
    """Whether ``name`` was the last algorithm run: its schedule, or its shared-memory phases."""
    return name in collectives.shm_names("allreduce") or ran[-1] == name


def test_environment_and_communicator_choices(comm, mpi_comm, monkeypatch, ran):
    if comm.size < 2:
        pytest.skip("a one-rank communicator runs no schedule")
    auto = _auto(comm)
    other = next(n for n in collectives.names("allreduce") if n != auto and "ring" in n)
    monkeypatch.setenv("COLLECTIVES_ALLREDUCE", other.replace("allreduce_", ""))
    forced = Comm(mpi_comm, check=comm.check)  # a Comm reads the environment when it is made
    _allreduce(forced, mpi_comm)
    assert forced.last_algorithm == other and ran[-1] == other
    _allreduce(forced, mpi_comm, algorithm="auto")  # "auto" per call defers to the environment
    assert ran[-1] == other
    _allreduce(forced, mpi_comm, algorithm="binomial")  # a per-call choice wins
    assert forced.last_algorithm == ran[-1] == "allreduce_binomial"
    per_comm = Comm(mpi_comm, algorithms={"allreduce": "round_robin"})
    _allreduce(per_comm, mpi_comm)  # the communicator's choice wins over the environment
    assert per_comm.last_algorithm == ran[-1] == "allreduce_round_robin"
    _allreduce(comm, mpi_comm)  # made before the variable was set
    assert comm.last_algorithm == auto and _ran(ran, auto)
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE")
    per_comm.Free()
    forced.Free()


def test_forced_algorithm_falls_back_with_a_logged_reason(comm, mpi_comm, monkeypatch, caplog, ran):
    if comm.size < 2:
        pytest.skip("the scratch restriction always holds on one rank")
    monkeypatch.setattr(registry, "MAX_SCRATCH_ELEMENTS", comm.size - 1)
    caplog.set_level(logging.INFO, logger="collectives")
    monkeypatch.setenv("COLLECTIVES_ALLREDUCE", "all_to_all")
    with Comm(mpi_comm, check=comm.check) as forced:
        _allreduce(forced, mpi_comm)
        auto = _auto(forced)
        assert forced.last_algorithm == auto and _ran(ran, auto)
        assert any("allreduce_all_to_all does not apply" in rec.getMessage() and "COLLECTIVES_MAX_SCRATCH"
                   in rec.getMessage() for rec in caplog.records)
        caplog.clear()
        _allreduce(forced, mpi_comm, n=1)  # small enough: the forced choice applies, nothing logged
        assert forced.last_algorithm == ran[-1] == "allreduce_all_to_all"
        assert not caplog.records


FUSED_CALLS = {
    # (call(comm, n, bad), the arrays it writes): with ``bad`` the rank calls differently.
    "allreduce": lambda c, out, bad: c.Allreduce(np.ones(3 if bad else 4), out[:3 if bad else 4]),
    "collective": lambda c, out, bad: c.Bcast(out[:4]) if bad else c.Allreduce(np.ones(4), out[:4]),
    "algorithm": lambda c, out, bad: c.Allreduce(np.ones(4), out[:4],
                                                 algorithm="recursive_doubling" if bad else None),
    "header-only": lambda c, out, bad: c.Allreduce(np.ones(4000 if bad else 4), out[:4000 if bad else 4]),
    "root": lambda c, out, bad: c.Reduce(np.ones(4), out[:4], root=1 if bad else 0),
    "allgather": lambda c, out, bad: c.Allgather(np.ones(2, np.float32 if bad else float),
                                                 out[:2 * c.size].astype(np.float32) if bad
                                                 else out[:2 * c.size]),
}


@pytest.mark.parametrize("case", list(FUSED_CALLS))
def test_fused_mismatch_raises_everywhere_and_writes_nothing(p2p_comm, mpi_comm, case):
    """Ranks whose small checked calls differ (count, collective, algorithm, a header-only
    exchange beside a fused one, root, dtype) meet in the one checked exchange: the same
    ValueError on every rank, no hang, and the receive buffers untouched."""
    comm = p2p_comm
    if comm.size < 2:
        pytest.skip("needs two ranks")
    out = np.full(4000, -5.0)
    _same_error_on_every_rank(mpi_comm, lambda: FUSED_CALLS[case](comm, out, comm.rank == 0),
                              "arguments differ across ranks")
    assert (out == -5.0).all()
    FUSED_CALLS[case](comm, out, False)  # and the communicator still works
    assert comm.last_algorithm == ("allreduce_fused" if case != "root" and case != "allgather"
                                   else f"{case.replace('root', 'reduce')}_fused")
