"""Bad arguments, as mpi4py treats them and as a Comm does: refused at the same call, on every rank.

Each row calls a collective with the same bad arguments on every rank, once on a plain mpi4py
communicator and once on a Comm.  Where mpi4py refuses them on every rank (``native`` names
the class it raises), both calls run and the test checks that mpi4py still does what the row
says and that the Comm raises the row's class on every rank.  Where mpi4py leaves them to MPI,
which then truncates, hangs or aborts, or where mpi4py accepts them (``native`` is None: the
Comm is stricter; docs/comm.md lists these), only the Comm's call runs.  After every row the
Comm still computes what MPI does.
"""
import numpy as np
import pytest
from mpi4py import MPI

import collectives


def _readonly(n):
    a = np.zeros(n)
    a.setflags(write=False)
    return a


_x = np.arange(10.0)
MORE_THAN_ONE = "ValueError with more than one rank"

# name: (call(comm, p), the class mpi4py raises on every rank or None, the class a Comm raises)
CASES = {
    "Allreduce count mismatch": (lambda c, p: c.Allreduce(np.ones(4), np.zeros(5)), ValueError, ValueError),
    "Allreduce dtype mismatch": (lambda c, p: c.Allreduce(np.ones(4, np.float32), np.zeros(4)), ValueError,
                                 TypeError),
    "Allreduce read-only recvbuf": (lambda c, p: c.Allreduce(np.ones(4), _readonly(4)), BufferError, ValueError),
    "Allreduce op undefined on dtype": (lambda c, p: c.Allreduce(np.ones(4), np.zeros(4), op=MPI.BAND),
                                        MPI.Exception, TypeError),
    "Allreduce list of numbers": (lambda c, p: c.Allreduce([1.0, 2.0], np.zeros(2)), TypeError, TypeError),
    "Allreduce malformed spec": (lambda c, p: c.Allreduce(np.ones(2), [np.zeros(2), 1, 2, 3, 4]), ValueError,
                                 ValueError),
    "Allreduce MAXLOC on float64": (lambda c, p: c.Allreduce(np.ones(2), np.zeros(2), op=MPI.MAXLOC),
                                    MPI.Exception, MPI.Exception),
    "Allreduce buffers overlap": (lambda c, p: c.Allreduce(_x[:6], _x[3:9]), None, ValueError),
    "Allreduce in-place count past the buffer": (
        lambda c, p: c.Allreduce(MPI.IN_PLACE, [np.zeros(2), 3, MPI.DOUBLE]), None, ValueError),
    "Bcast root out of range": (lambda c, p: c.Bcast(np.zeros(4), root=p), MPI.Exception, ValueError),
    "Bcast negative root": (lambda c, p: c.Bcast(np.zeros(4), root=-1), MPI.Exception, ValueError),
    "Bcast root not an integer": (lambda c, p: c.Bcast(np.zeros(4), root="0"), TypeError, TypeError),
    "Bcast root a float": (lambda c, p: c.Bcast(np.zeros(4), root=0.0), None, TypeError),
    "Bcast read-only buf": (lambda c, p: c.Bcast(_readonly(4), root=0), None, ValueError),
    "Reduce root out of range": (lambda c, p: c.Reduce(np.ones(4), np.zeros(4), root=p), MPI.Exception, ValueError),
    "Reduce count mismatch at the root": (lambda c, p: c.Reduce(np.ones(4), np.zeros(5), root=0), None, ValueError),
    "Reduce in place away from the root": (lambda c, p: c.Reduce(MPI.IN_PLACE, np.zeros(4), root=0), None,
                                           ValueError),
    # mpi4py divides recvbuf by the ranks: one rank divides any size, and then it accepts.
    "Allgather recvbuf too short": (lambda c, p: c.Allgather(np.ones(3), np.zeros(3 * p - 1)), MORE_THAN_ONE,
                                    ValueError),
    "Allgather recvbuf too long": (lambda c, p: c.Allgather(np.ones(3), np.zeros(3 * p + 1)), MORE_THAN_ONE,
                                   ValueError),
    "Allgather in place, indivisible": (lambda c, p: c.Allgather(MPI.IN_PLACE, np.zeros(2 * p + 1)), ValueError,
                                        ValueError),
    "Allgatherv counts of another size": (lambda c, p: c.Allgatherv(np.ones(3), [np.zeros(4 * p), [3] * (p + 1)]),
                                          ValueError, ValueError),
    "Allgatherv count unlike sendbuf's": (lambda c, p: c.Allgatherv(np.ones(3), [np.zeros(4 * p), [4] * p]), None,
                                          ValueError),
    "Reduce_scatter_block recvbuf longer than a block": (
        lambda c, p: c.Reduce_scatter_block(np.ones(2 * p), np.zeros(3)), ValueError, ValueError),
    "Reduce_scatter_block recvbuf shorter than a block": (
        lambda c, p: c.Reduce_scatter_block(np.ones(2 * p), np.zeros(1)), ValueError, ValueError),
    "Reduce_scatter counts of another size": (
        lambda c, p: c.Reduce_scatter(np.ones(2 * p), np.zeros(2), [2] * (p + 1)), ValueError, ValueError),
    "Reduce_scatter counts not summing to sendbuf": (
        lambda c, p: c.Reduce_scatter(np.ones(2 * p + 1), np.zeros(2), [2] * p), ValueError, ValueError),
    "Reduce_scatter negative count": (
        lambda c, p: c.Reduce_scatter(np.ones(2 * p), np.zeros(2), [-1] + [2] * (p - 1)), ValueError, ValueError),
    "Gather root out of range": (lambda c, p: c.Gather(np.ones(2), np.zeros(2 * p), root=p), MPI.Exception,
                                 ValueError),
    "Gather root's recvbuf indivisible": (lambda c, p: c.Gather(np.ones(2), np.zeros(2 * p + 1), root=0), None,
                                          ValueError),
    "Gather sendbuf unlike the root's blocks": (lambda c, p: c.Gather(np.ones(3), np.zeros(2 * p), root=0), None,
                                                ValueError),
    "Gatherv counts of another size": (lambda c, p: c.Gatherv(np.ones(2), [np.zeros(2 * p), [2] * (p + 1)], root=0),
                                       None, ValueError),
    "Scatter negative root": (lambda c, p: c.Scatter(np.ones(2 * p), np.zeros(2), root=-1), MPI.Exception,
                              ValueError),
    "Scatter root's sendbuf indivisible": (lambda c, p: c.Scatter(np.ones(2 * p + 1), np.zeros(2), root=0), None,
                                           ValueError),
    "Scatter recvbuf unlike the root's blocks": (lambda c, p: c.Scatter(np.ones(2 * p), np.zeros(1), root=0), None,
                                                 ValueError),
    "Scatterv counts past the buffer": (lambda c, p: c.Scatterv([np.ones(2 * p), [3] * p], np.zeros(3), root=0),
                                        None, ValueError),
}


def outcome(call, comm, p):
    """The exception ``call(comm, p)`` raised, or None."""
    try:
        call(comm, p)
    except Exception as exc:
        return exc
    return None


# Good on one rank: no rank is away from the root, any size splits into one block.
NEEDS_TWO = {"Reduce in place away from the root", "Allgather in place, indivisible"}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_arguments_refused_as_mpi4py_refuses_them(mpi_comm, case):
    call, native, ours = CASES[case]
    p = mpi_comm.size
    if p == 1 and case in NEEDS_TWO:
        pytest.skip("the arguments are good on one rank")
    if native == MORE_THAN_ONE:
        native = ValueError if p > 1 else None
    if native is not None:
        got = outcome(call, mpi_comm, p)
        assert isinstance(got, native), f"mpi4py: {case}: {got!r}, not {native.__name__}"
        assert len(set(mpi_comm.allgather(type(got).__name__))) == 1, case
    with collectives.Comm(mpi_comm) as comm:
        got = outcome(call, comm, p)
        assert isinstance(got, ours), f"{case}: {got!r}"
        # Every rank raised: none went on to wait for another.
        assert all(mpi_comm.allgather(got is not None)), case
        x = np.arange(5.0) + comm.rank
        mine, want = np.zeros(5), np.zeros(5)
        comm.Allreduce(x, mine)
        mpi_comm.Allreduce(x, want)
        np.testing.assert_array_equal(mine, want)
