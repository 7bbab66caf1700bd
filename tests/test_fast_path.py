"""The Cython fast path: which calls take it, that they match native MPI, and its plan cache.

``comm._fast.calls`` counts the calls the fast path ran; a call it leaves to the Python path
does not move it.  Every test here runs with the check on and off (tests/conftest.py).
"""
import array

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import comm as comm_module

pytestmark = pytest.mark.skipif(not comm_module.NATIVE, reason="the fast path is the native executor's")


def ran_fast(comm, call):
    """Run ``call``; whether the fast path ran it."""
    before = comm._fast.calls
    call()
    return comm._fast.calls == before + 1


def data(comm, n, dtype=np.float32):
    return (np.arange(n) % 7 + comm.rank).astype(dtype)


SPECS = {
    "array": lambda buf, n: buf[:n],
    "[buf, MPI.FLOAT]": lambda buf, n: [buf[:n], MPI.FLOAT],
    "[buf, count, MPI.FLOAT]": lambda buf, n: [buf, n, MPI.FLOAT],
    "[buf, (count, 0), MPI.FLOAT]": lambda buf, n: [buf, (n, 0), MPI.FLOAT],
    "array.array": lambda buf, n: array.array("f", buf[:n].tobytes()),
}


@pytest.mark.parametrize("spec", list(SPECS))
def test_allreduce_specs_take_the_fast_path(comm, mpi_comm, spec):
    n = 5
    send = data(comm, n + 3)
    want = np.empty(n, np.float32)
    mpi_comm.Allreduce(send[:n], want, op=MPI.MAX)
    out = np.full(n + 3, -1, np.float32)
    recv = SPECS[spec](out, n) if spec != "array.array" else array.array("f", bytes(4 * n))
    assert ran_fast(comm, lambda: comm.Allreduce(SPECS[spec](send, n), recv, op=MPI.MAX))
    got = np.frombuffer(recv, np.float32) if spec == "array.array" else out[:n]
    np.testing.assert_array_equal(got, want)
    if spec != "array.array":
        assert (out[n:] == -1).all()  # nothing written past the spec's count


def test_spec_with_displacement(comm, mpi_comm):
    send, out = data(comm, 8), np.zeros(8, np.float32)
    want = np.empty(3, np.float32)
    mpi_comm.Allreduce(send[2:5], want)
    assert ran_fast(comm, lambda: comm.Allreduce([send, (3, 2), MPI.FLOAT], [out, (3, 4), MPI.FLOAT]))
    np.testing.assert_array_equal(out[4:7], want)
    assert not out[:4].any() and out[7] == 0


def test_datatype_reinterprets_the_buffer(comm, mpi_comm):
    """[float64 array, MPI.FLOAT] is that memory read as twice as many floats, as in mpi4py."""
    send = data(comm, 4, np.float64)
    got, want = np.zeros(4), np.zeros(4)
    assert ran_fast(comm, lambda: comm.Allreduce([send, MPI.FLOAT], [got, MPI.FLOAT]))
    mpi_comm.Allreduce([send, MPI.FLOAT], [want, MPI.FLOAT])
    assert got.tobytes() == want.tobytes()


def test_in_place_and_aliases(comm, mpi_comm):
    buf = data(comm, 6)
    want = np.empty_like(buf)
    mpi_comm.Allreduce(buf, want)
    assert ran_fast(comm, lambda: comm.Allreduce(MPI.IN_PLACE, [buf, 6, MPI.FLOAT]))
    np.testing.assert_array_equal(buf, want)


def test_every_collective_takes_the_fast_path(comm, mpi_comm):
    p, r, n = comm.size, comm.rank, 3
    x = data(comm, n)
    calls = {
        "bcast": (lambda c, out: c.Bcast([out[:n], MPI.FLOAT], root=p - 1), lambda: x.copy()),
        "reduce": (lambda c, out: c.Reduce([x, n, MPI.FLOAT], [out, n, MPI.FLOAT], op=MPI.SUM, root=0),
                   lambda: np.zeros(n, np.float32)),
        "allgather": (lambda c, out: c.Allgather([x, MPI.FLOAT], [out, n, MPI.FLOAT]),
                      lambda: np.zeros(n * p, np.float32)),
        "reduce_scatter_block": (lambda c, out: c.Reduce_scatter_block(np.tile(x, p), out),
                                 lambda: np.zeros(n, np.float32)),
        "reduce_scatter": (lambda c, out: c.Reduce_scatter(np.tile(x, p), out, [n] * p),
                           lambda: np.zeros(n, np.float32)),
        "gather": (lambda c, out: c.Gather(x, [out, n, MPI.FLOAT], root=p - 1),
                   lambda: np.zeros(n * p, np.float32)),
        "scatter": (lambda c, out: c.Scatter([np.tile(x, p), n, MPI.FLOAT], out, root=0),
                    lambda: np.zeros(n, np.float32)),
    }
    for name, (call, fresh) in calls.items():
        got, want = fresh(), fresh()
        assert ran_fast(comm, lambda: call(comm, got)), name
        call(mpi_comm, want)
        np.testing.assert_array_equal(got, want, err_msg=name)
        # Small and checked: the checked exchange carries the data (collectives.exchange).
        collective = name.replace("_block", "")
        assert (comm.last_algorithm == f"{collective}_fused") == comm.check, (name, comm.last_algorithm)
    assert ran_fast(comm, comm.Barrier)
    assert comm.last_algorithm == ("barrier_fused" if comm.check else "barrier_dissemination")


@pytest.mark.parametrize("algorithm", collectives.names("allreduce"))
def test_per_call_algorithm_on_the_fast_path(comm, mpi_comm, algorithm):
    x = data(comm, 100)
    got, want = np.zeros_like(x), np.zeros_like(x)
    mpi_comm.Allreduce(x, want)
    assert ran_fast(comm, lambda: comm.Allreduce(x, got, algorithm=algorithm))
    np.testing.assert_array_equal(got, want)
    if comm.size > 1:
        assert comm.last_algorithm == algorithm


def test_unusual_buffers_take_the_python_path(comm, mpi_comm):
    """Fortran-ordered 2-D arrays and op names are the general path's; results still match."""
    x = np.asfortranarray(data(comm, 6).reshape(2, 3))
    got, want = np.zeros_like(x), np.zeros_like(x)
    mpi_comm.Allreduce(x, want)
    assert not ran_fast(comm, lambda: comm.Allreduce(x, got))
    np.testing.assert_array_equal(got, want)
    got[:] = 0
    assert not ran_fast(comm, lambda: comm.Allreduce(x.ravel(order="K"), got.ravel(order="K"), op="sum"))
    np.testing.assert_array_equal(got, want)


def test_ranks_on_different_paths_still_agree(comm, mpi_comm):
    """Rank 0 on the Python path, the others on the fast path: the same agreement, same result."""
    x = data(comm, 6)
    got = np.zeros_like(x)
    send = np.repeat(x, 2)[::2] if comm.rank == 0 else x  # strided: the Python path
    want = np.empty_like(x)
    mpi_comm.Allreduce(x, want)
    assert ran_fast(comm, lambda: comm.Allreduce(send, got)) == (comm.rank != 0)
    np.testing.assert_array_equal(got, want)
    if comm.size > 1 and comm.check:
        n = 6 if comm.rank == 0 else 5
        with pytest.raises(ValueError, match="count ranges 5..6"):
            comm.Allreduce(np.ones(2 * n, np.float32)[::2] if comm.rank == 0 else np.ones(n, np.float32),
                           np.zeros(n, np.float32))


def test_plan_cache_is_bounded(mpi_comm, check, monkeypatch):
    """The fast path's plans live in a byte-bounded LRU (COLLECTIVES_CACHE_BYTES): 200 distinct
    sizes keep it under the bound, and results stay right after evictions."""
    monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", "4096")
    c = collectives.Comm(mpi_comm, check=check)
    plans = c._fast.plans
    assert plans.max_bytes == 4096
    for n in range(1, 201):
        x = np.full(n, mpi_comm.rank + 1, np.float32)
        got = np.zeros(n, np.float32)
        assert ran_fast(c, lambda: c.Allreduce(x, got))
        np.testing.assert_array_equal(got, np.full(n, mpi_comm.size * (mpi_comm.size + 1) / 2))
        assert 0 < plans.nbytes <= plans.max_bytes
    assert plans.evictions > 0 and len(plans) < 200
    c.Free()
