"""One engine for every call form: each runs this library's algorithm, matches native MPI,
and its plan cache.

``comm._engine.calls`` counts the calls this library's algorithms ran; a call handed to MPI's
own collective does not move it.  Every test here runs with the check on and off
(tests/conftest.py), under the native executor and under the NumPy fallback.
"""
import array

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import uneven

def ran_ours(comm, call, times=1):
    """Run ``call`` (waiting for the Request a nonblocking call returns); whether this
    library's algorithms ran ``times`` collectives for it."""
    before = comm._engine.calls
    req = call()
    if hasattr(req, "wait"):
        req.wait()
    return comm._engine.calls == before + times


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
def test_allreduce_specs(comm, mpi_comm, spec):
    n = 5
    send = data(comm, n + 3)
    want = np.empty(n, np.float32)
    mpi_comm.Allreduce(send[:n], want, op=MPI.MAX)
    out = np.full(n + 3, -1, np.float32)
    recv = SPECS[spec](out, n) if spec != "array.array" else array.array("f", bytes(4 * n))
    assert ran_ours(comm, lambda: comm.Allreduce(SPECS[spec](send, n), recv, op=MPI.MAX))
    got = np.frombuffer(recv, np.float32) if spec == "array.array" else out[:n]
    np.testing.assert_array_equal(got, want)
    if spec != "array.array":
        assert (out[n:] == -1).all()  # nothing written past the spec's count


def test_spec_with_displacement(comm, mpi_comm):
    send, out = data(comm, 8), np.zeros(8, np.float32)
    want = np.empty(3, np.float32)
    mpi_comm.Allreduce(send[2:5], want)
    assert ran_ours(comm, lambda: comm.Allreduce([send, (3, 2), MPI.FLOAT], [out, (3, 4), MPI.FLOAT]))
    np.testing.assert_array_equal(out[4:7], want)
    assert not out[:4].any() and out[7] == 0


def test_datatype_reinterprets_the_buffer(comm, mpi_comm):
    """[float64 array, MPI.FLOAT] is that memory read as twice as many floats, as in mpi4py."""
    send = data(comm, 4, np.float64)
    got, want = np.zeros(4), np.zeros(4)
    assert ran_ours(comm, lambda: comm.Allreduce([send, MPI.FLOAT], [got, MPI.FLOAT]))
    mpi_comm.Allreduce([send, MPI.FLOAT], [want, MPI.FLOAT])
    assert got.tobytes() == want.tobytes()


def test_in_place_and_aliases(comm, mpi_comm):
    buf = data(comm, 6)
    want = np.empty_like(buf)
    mpi_comm.Allreduce(buf, want)
    assert ran_ours(comm, lambda: comm.Allreduce(MPI.IN_PLACE, [buf, 6, MPI.FLOAT]))
    np.testing.assert_array_equal(buf, want)


def test_every_collective_takes_the_fast_path(comm, mpi_comm):
    p, n = comm.size, 3
    fused = comm.check
    shared = comm._engine.segment is not None
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
        assert ran_ours(comm, lambda: call(comm, got)), name
        call(mpi_comm, want)
        np.testing.assert_array_equal(got, want, err_msg=name)
        # Ranks sharing a segment run its row (the check rides in its headers); elsewhere, small
        # and checked, the checked exchange carries the data (collectives.exchange), watched or not.
        collective = name.replace("_block", "")
        if shared:
            assert comm.last_algorithm in collectives.shm_names(collective), (name, comm.last_algorithm)
        else:
            assert (comm.last_algorithm == f"{collective}_fused") == fused, (name, comm.last_algorithm)
    assert ran_ours(comm, comm.Barrier)
    # Unchecked or shared: the tuning table's row for this rank count (explain names it).
    assert comm.last_algorithm == ("barrier_fused" if fused and not shared
                                   else comm.explain("barrier").split(":")[0])


@pytest.mark.parametrize("algorithm", collectives.names("allreduce"))
def test_per_call_algorithm(comm, mpi_comm, algorithm):
    x = data(comm, 100)
    got, want = np.zeros_like(x), np.zeros_like(x)
    mpi_comm.Allreduce(x, want)
    assert ran_ours(comm, lambda: comm.Allreduce(x, got, algorithm=algorithm))
    np.testing.assert_array_equal(got, want)
    if comm.size > 1:
        assert comm.last_algorithm == algorithm


def test_fortran_ordered_arrays(comm, mpi_comm):
    """Fortran-ordered 2-D arrays are contiguous memory: our algorithms, native's results."""
    x = np.asfortranarray(data(comm, 6).reshape(2, 3))
    got, want = np.zeros_like(x), np.zeros_like(x)
    mpi_comm.Allreduce(x, want)
    assert ran_ours(comm, lambda: comm.Allreduce(x, got))
    np.testing.assert_array_equal(got, want)


def test_a_strided_send_on_one_rank_agrees_with_the_others(comm, mpi_comm):
    """Rank 0 sends a strided view (copied first), the others contiguous arrays: one
    agreement, native's result."""
    x = data(comm, 6)
    got = np.zeros_like(x)
    send = np.repeat(x, 2)[::2] if comm.rank == 0 else x
    want = np.empty_like(x)
    mpi_comm.Allreduce(x, want)
    assert ran_ours(comm, lambda: comm.Allreduce(send, got))
    np.testing.assert_array_equal(got, want)
    if comm.size > 1 and comm.check:
        n = 6 if comm.rank == 0 else 5
        with pytest.raises(ValueError, match="count ranges 5..6"):
            comm.Allreduce(np.ones(2 * n, np.float32)[::2] if comm.rank == 0 else np.ones(n, np.float32),
                           np.zeros(n, np.float32))


def test_plan_cache_is_bounded(mpi_comm, check, monkeypatch):
    """The engine's plans live in a byte-bounded LRU (COLLECTIVES_CACHE_BYTES): 200 distinct
    sizes keep it under the bound, and results stay right after evictions."""
    monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", "4096")
    c = collectives.Comm(mpi_comm, check=check)
    plans = c._engine.plans
    assert plans.max_bytes == 4096
    for n in range(1, 201):
        x = np.full(n, mpi_comm.rank + 1, np.float32)
        got = np.zeros(n, np.float32)
        assert ran_ours(c, lambda: c.Allreduce(x, got))
        np.testing.assert_array_equal(got, np.full(n, mpi_comm.size * (mpi_comm.size + 1) / 2))
        assert 0 < plans.nbytes <= plans.max_bytes
    assert plans.evictions > 0 and len(plans) < 200
    c.Free()


def test_repeated_call_shape_skips_the_plan_cache(mpi_comm, check, monkeypatch):
    """A call whose shape was among the latest ones runs its plan from the cache's front slots,
    found by the Call's key without a lookup in the LRU (a Python call with a lock, which once
    cost as much as an 8 B all-reduce's communication); a new shape or algorithm looks up once,
    and the results and last_algorithm stay right throughout; COLLECTIVES_ALLREDUCE, read when
    the Comm was made, is not read again."""
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    c = collectives.Comm(mpi_comm, check=check)
    lookups = []
    get = c._engine.plans.get

    def counted_get(key, default=None):
        lookups.append(key)
        return get(key, default)
    monkeypatch.setattr(c._engine.plans, "get", counted_get)
    x, b = data(c, 6), np.arange(3, dtype=np.int32) + c.rank
    root_b = b.copy()
    mpi_comm.Bcast(root_b)

    def allreduce(n=6, algorithm=None):
        got, want = np.zeros(n, np.float32), np.empty(n, np.float32)
        assert ran_ours(c, lambda: c.Allreduce(x[:n], got, algorithm=algorithm))
        mpi_comm.Allreduce(x[:n], want)
        np.testing.assert_array_equal(got, want)

    for _ in range(4):  # interleaved with another collective, which has a hot plan of its own
        allreduce()
        got_b = b.copy()
        assert ran_ours(c, lambda: c.Bcast(got_b))
        np.testing.assert_array_equal(got_b, root_b)
    assert len(lookups) == 2
    allreduce()
    auto = c.last_algorithm
    allreduce(5)
    assert len(lookups) == 3
    other = next(n for n in collectives.names("allreduce") if n != auto and "ring" in n)
    allreduce(algorithm=other)
    assert len(lookups) == 4
    if c.size > 1:
        assert c.last_algorithm == other
    allreduce()
    assert len(lookups) == 4 and c.last_algorithm == auto
    monkeypatch.setenv("COLLECTIVES_ALLREDUCE", other.replace("allreduce_", ""))
    allreduce()
    assert len(lookups) == 4 and c.last_algorithm == auto
    c.Free()


LAYOUTS = {
    "uneven, reversed displs": uneven,
    "in rank order": lambda p: (uneven(p)[0], None, sum(uneven(p)[0])),
}


def vector_spec(buf, counts, displs, form):
    """The v-variant buffer spec in one of mpi4py's forms (form 2: no datatype, the buffer's)."""
    if form == 2:
        return [buf, counts if displs is None else (counts, displs)]
    if displs is None:
        return [buf, counts, MPI.INT] if form == 0 else [buf, (counts, None), MPI.INT]
    return [buf, (counts, displs), MPI.INT] if form == 0 else [buf, counts, displs, MPI.INT]


@pytest.mark.parametrize("form", [0, 1, 2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_vector_variants(comm, mpi_comm, layout, form):
    """Allgatherv, Gatherv and Scatterv with per-rank counts and displacements, against native."""
    p, r, root = comm.size, comm.rank, comm.size - 1
    counts, displs, total = LAYOUTS[layout](p)
    own = np.arange(counts[r], dtype=np.int32) + 100 * r
    whole = np.arange(total, dtype=np.int32) * 3 + 1
    for name, call in {
        "Allgatherv": lambda c, out: c.Allgatherv(own, vector_spec(out, counts, displs, form)),
        "Gatherv": lambda c, out: c.Gatherv(own, vector_spec(out, counts, displs, form)
                                            if r == root else None, root=root),
        "Scatterv": lambda c, out: c.Scatterv(vector_spec(whole, counts, displs, form)
                                              if r == root else None, out[:counts[r]], root=root),
    }.items():
        got, want = np.full(total, -1, np.int32), np.full(total, -1, np.int32)
        assert ran_ours(comm, lambda: call(comm, got)), name
        call(mpi_comm, want)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_vector_variants_in_place(comm, mpi_comm):
    p, r, root = comm.size, comm.rank, 0
    counts, displs, total = uneven(p)
    start = np.arange(total, dtype=np.int32) + 10 * r
    calls = {
        "Allgatherv": lambda c, buf: c.Allgatherv(MPI.IN_PLACE, [buf, (counts, displs), MPI.INT]),
        "Gatherv": lambda c, buf: c.Gatherv(
            MPI.IN_PLACE if r == root else buf[displs[r]:displs[r] + counts[r]],
            [buf, (counts, displs), MPI.INT], root=root),
        "Scatterv": lambda c, buf: c.Scatterv(
            [buf, (counts, displs), MPI.INT], MPI.IN_PLACE if r == root else buf[:counts[r]], root=root),
    }
    for name, call in calls.items():
        got, want = start.copy(), start.copy()
        assert ran_ours(comm, lambda: call(comm, got)), name
        call(mpi_comm, want)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_vector_counts_that_do_not_fit_are_refused(comm):
    """Counts past the end of the buffer are refused, naming the element they reach."""
    counts = [2] * comm.size
    with pytest.raises(ValueError, match="reach element"):
        comm.Allgatherv(np.zeros(2, np.int32), [np.zeros(2 * comm.size - 1, np.int32), counts, MPI.INT])


def test_nonblocking_forms(comm, mpi_comm):
    p, r, n = comm.size, comm.rank, 5
    x = data(comm, n)
    counts, displs, total = uneven(p)
    calls = {
        "allreduce": (lambda c, out: c.Iallreduce(x, [out, n, MPI.FLOAT], op=MPI.MAX), n, "Allreduce"),
        "bcast": (lambda c, out: c.Ibcast(out, root=p - 1), n, "Bcast"),
        "reduce": (lambda c, out: c.Ireduce([x, MPI.FLOAT], out, root=0), n, "Reduce"),
        "allgather": (lambda c, out: c.Iallgather(x, out), n * p, "Allgather"),
        "allgatherv": (lambda c, out: c.Iallgatherv(x[:counts[r]], [out, (counts, displs), MPI.FLOAT]),
                       total, "Allgatherv"),
        "reduce_scatter_block": (lambda c, out: c.Ireduce_scatter_block(np.tile(x, p), out[:n]),
                                 n, "Reduce_scatter_block"),
        "reduce_scatter": (lambda c, out: c.Ireduce_scatter(np.tile(x, p), out, [n] * p), n,
                           "Reduce_scatter"),
    }
    for name, (call, size, blocking) in calls.items():
        got, want = np.arange(size, dtype=np.float32), np.arange(size, dtype=np.float32)
        assert ran_ours(comm, lambda: call(comm, got)), name
        # The reference is mpi4py's blocking call on the same arguments.
        args, kwargs = call(_Blocking(), want)
        getattr(mpi_comm, blocking)(*args, **kwargs)
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert ran_ours(comm, comm.Ibarrier)


class _Blocking:
    """Records the arguments of an I-method call instead of making it."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: (args, kwargs)


def test_nonblocking_queue_runs_fast_calls_in_order(comm, mpi_comm):
    """Several pending calls, then a blocking one queued behind them: all our algorithms,
    completed in order, with native's results."""
    xs = [data(comm, 7) * (k + 1) for k in range(4)]
    outs = [np.zeros(7, np.float32) for _ in xs]
    before = comm._engine.calls
    reqs = [comm.Iallreduce(x, out) for x, out in zip(xs[:3], outs)]
    comm.Allreduce(xs[3], outs[3])
    for req in reqs:
        req.wait()
    assert comm._engine.calls == before + 4
    for x, out in zip(xs, outs):
        want = np.empty_like(x)
        mpi_comm.Allreduce(x, want)
        np.testing.assert_array_equal(out, want)


def test_nonblocking_strided_send(comm, mpi_comm):
    """A strided send buffer on the progress thread: copied there, our algorithm, native's result."""
    x = np.repeat(data(comm, 6), 2)[::2]
    got, want = np.zeros(6, np.float32), np.zeros(6, np.float32)
    assert ran_ours(comm, lambda: comm.Iallreduce(x, got))
    mpi_comm.Allreduce(np.ascontiguousarray(x), want)
    np.testing.assert_array_equal(got, want)


def test_op_names(comm, mpi_comm):
    x = data(comm, 4)
    got, want = np.zeros_like(x), np.zeros_like(x)
    assert ran_ours(comm, lambda: comm.Allreduce(x, got, op="max"))
    mpi_comm.Allreduce(x, want, op=MPI.MAX)
    np.testing.assert_array_equal(got, want)


def test_functional_family_runs_ours(comm, mpi_comm):
    """collectives.allreduce(comm, x) and its siblings: one fast call each (scatter two: it
    broadcasts the root's dtype and shape first)."""
    p, r, n = comm.size, comm.rank, 4
    x = data(comm, n)
    rows = np.tile(x, (p, 1))
    sums, maxes = np.empty_like(x), np.empty_like(x)
    mpi_comm.Allreduce(x, sums)
    mpi_comm.Allreduce(x, maxes, op=MPI.MAX)
    gathered = np.empty((p, n), np.float32)
    mpi_comm.Allgather(x, gathered)
    blocks = np.empty((1, n), np.float32)
    mpi_comm.Reduce_scatter_block(rows, blocks)
    results = {}
    calls = {
        "allreduce": (lambda: collectives.allreduce(comm, x), sums),
        "allreduce max": (lambda: collectives.allreduce(comm, x, op="max"), maxes),
        "iallreduce": (lambda: collectives.iallreduce(comm, x), sums),
        "bcast": (lambda: collectives.bcast(comm, x, root=p - 1), data(comm, n) - r + p - 1),
        "reduce": (lambda: collectives.reduce(comm, x, root=0), sums if r == 0 else None),
        "allgather": (lambda: collectives.allgather(comm, x), gathered),
        "reduce_scatter": (lambda: collectives.reduce_scatter(comm, rows), blocks),
        "gather": (lambda: collectives.gather(comm, x, root=0), gathered if r == 0 else None),
        "scatter": (lambda: collectives.scatter(comm, rows, root=0), x - r),
    }
    for name, (call, want) in calls.items():
        assert ran_ours(comm, lambda: results.setdefault(name, call()), 2 if name == "scatter" else 1), name
        got = results[name]
        got = got.wait() if hasattr(got, "wait") else got
        if want is None:
            assert got is None, name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert ran_ours(comm, lambda: collectives.barrier(comm))


def test_gatherv_root_with_a_type_character(comm, mpi_comm):
    """The root names its datatype by a type character, the others by their arrays: one
    agreement, where the others' unknown counts are neutral."""
    p, r, root = comm.size, comm.rank, 0
    counts, displs, total = uneven(p)
    own = np.arange(counts[r], dtype=np.int32) + 100 * r
    got, want = np.full(total, -1, np.int32), np.full(total, -1, np.int32)
    spec = [got, (counts, displs), "i"] if r == root else None
    assert ran_ours(comm, lambda: comm.Gatherv(own, spec, root=root))
    mpi_comm.Gatherv(own, [want, (counts, displs), MPI.INT] if r == root else None, root=root)
    np.testing.assert_array_equal(got, want)


def test_vector_count_mismatch_raises_everywhere(comm):
    """A rank sending another count than the root expects of it: the same error on every rank."""
    p, r = comm.size, comm.rank
    if p < 2:
        pytest.skip("a mismatch across ranks needs two ranks")
    counts = [2] * p
    own = np.zeros(3 if r == 1 else 2, np.int32)
    recv = [np.zeros(2 * p, np.int32), counts, MPI.INT] if r == 0 else None
    with pytest.raises(ValueError, match="count1 ranges 2..3"):
        comm.Gatherv(own, recv, root=0)
    with pytest.raises(ValueError, match="count1 ranges 2..3"):
        comm.Allgatherv(own, [np.zeros(2 * p + 1, np.int32), [3 if i == 1 else 2 for i in range(p)]
                              if r == 1 else counts, MPI.INT])
