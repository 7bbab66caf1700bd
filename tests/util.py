"""Shared test data and checks: inputs that cannot overflow into nonsense, exact references."""
import contextlib
import os

import numpy as np
from mpi4py import MPI

from collectives.exchange import FUSED_BYTES
from collectives.ops import DTYPES, OP_NAMES, MPI_OP, supports

ALL_DTYPES = [np.dtype(t) for t in DTYPES]
LARGE = 10**6 + 3


def sizes(p, algorithm=None, edge=1):
    """Element counts every collective is tried with: 0, 1, p-1, p+1, a prime, about 10^6;
    for a fused ``algorithm``, also the largest count whose payload of ``edge`` bytes per
    element fits in collectives.exchange.FUSED_BYTES and the next (it falls back there)."""
    edges = {FUSED_BYTES // edge, FUSED_BYTES // edge + 1} if str(algorithm).endswith("_fused") else set()
    return sorted({0, 1, max(p - 1, 0), p + 1, 13, LARGE} | edges)


def uneven(p):
    """Per-rank counts with zeros and a spread, and displacements in reverse rank order with
    gaps, for the v-variants: (counts, displs, size of the buffer they lie in)."""
    counts = [(3 * i + 2) % 5 for i in range(p)]
    displs, at = [0] * p, 1
    for i in reversed(range(p)):
        displs[i] = at
        at += counts[i] + 2
    return counts, displs, at


def ops_for(dtype):
    """Every op defined on ``dtype``."""
    return [op for op in OP_NAMES if supports(op, dtype)]


# The dtypes tried at about 10^6 elements: one per element size, and int32 for its integer
# ops.  What a dtype changes there (the segment and pipeline boundaries, in elements) depends
# on its size; its kernel's main loop is the kernel tests' at every size.
LARGE_DTYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.float32, np.float64, np.complex128))


def ops_at(dtype, n, p=1):
    """The ops tried at ``n`` elements on ``p`` ranks: all of them, but at ~10^6 elements none
    for a dtype outside LARGE_DTYPES, and only SUM except for float64 and int32 on at most 4
    ranks, which keep every op there.  Keeps the suite short: 8 ranks oversubscribe the 2 cores
    four times, and what an op changes in a schedule at 10^6 (its segments and pipeline) is the
    same at every rank count."""
    ops = ops_for(dtype)
    if n == LARGE and np.dtype(dtype) not in LARGE_DTYPES:
        return []
    if n == LARGE and (p > 4 or np.dtype(dtype) not in (np.dtype(np.float64), np.dtype(np.int32))):
        return ops[:1]
    return ops


def make_data(dtype, op, n, rank, seed=0):
    """Rank ``rank``'s input of ``n`` elements for ``op``: varied, and free of NaN and overflow."""
    rng = np.random.default_rng([seed, rank, n, ALL_DTYPES.index(np.dtype(dtype))])
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(n) < 0.5
    if dtype.kind in "iu":
        if op in ("land", "lor", "lxor"):
            return rng.integers(0, 3, n).astype(dtype)
        if op == "prod":
            return rng.choice(np.array([1, 1, 2, 3], dtype=dtype), n)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    real = np.float32 if dtype.kind == "c" else dtype
    def draw():
        if op == "prod":
            return rng.uniform(0.8, 1.25, n).astype(real)
        return rng.uniform(-1, 1, n).astype(real)
    if dtype.kind == "c":
        return (draw() + 1j * draw()).astype(dtype)
    return draw().astype(dtype)


# MPI's reduction ops as NumPy ufuncs: the logical ones give 0 or 1 in the operands' dtype.
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def reference(dtype, op, n, p, comm=None):
    """op over the inputs of ranks 0 .. p-1, in rank order, with NumPy's own ufuncs (integers
    wrap around, as in C and MPI)."""
    acc = make_data(dtype, op, n, 0).copy()
    with np.errstate(over="ignore"):
        for r in range(1, p):
            acc = UFUNCS[op](acc, make_data(dtype, op, n, r)).astype(acc.dtype, copy=False)
    return acc


def native_supports(dtype):
    """Whether native MPI is a trustworthy reference for reductions on ``dtype``.

    Not for float16 and bool (MPI reduces neither here), nor for 8- and 16-bit integers:
    Open MPI's AVX reduction saturates their sums (127 + 1 = 127) where C, NumPy, MPICH and
    our kernels wrap around, so those are checked against the exact NumPy reduction instead.
    """
    return np.dtype(dtype) not in _NOT_NATIVE


_NOT_NATIVE = {np.dtype(t) for t in (np.float16, np.bool_, np.int8, np.int16, np.uint8, np.uint16)}


def assert_close(got, want, dtype, p, what):
    """Integers and logicals exactly; floats within a different summation order's rounding."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{what}: {bad.size} wrong elements, first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"
        return
    eps = np.finfo(dtype).eps
    tol = 4 * p * eps
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def assert_bytes_equal(got, want, what):
    """``got`` holds ``want``'s bytes exactly (NaNs and every dtype alike)."""
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), what


def waiting(call):
    """``call`` made blocking: it waits for the Request a nonblocking form returns."""
    def run(*args, **kwargs):
        req = call(*args, **kwargs)
        if req is not None:
            req.wait()
    return run


def assert_identical_across_ranks(comm, arr, what):
    """Every rank of ``comm`` holds the same bytes in ``arr``."""
    mine = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    first = mine.copy()
    comm.Bcast(first, root=0)
    assert np.array_equal(mine, first), f"{what}: result differs from rank 0's"


def assert_everywhere(comm, check, *args):
    """Run ``check(*args)`` on every rank of ``comm``; fail on all ranks if it fails on any.

    A failure on one rank alone would leave the others waiting in the next collective.
    """
    try:
        check(*args)
        error = None
    except AssertionError as exc:
        error = str(exc)
    bad = [(rank, e) for rank, e in enumerate(comm.allgather(error)) if e is not None]
    assert not bad, f"{len(bad)} rank(s) failed; rank {bad[0][0]}: {bad[0][1]}"


def expect_error(bad, exc, match):
    """pytest.raises for a collective whose arguments are invalid on some ranks only: those
    raise ``exc`` matching ``match``, the others the error naming another rank."""
    import pytest

    if bad:
        return pytest.raises(exc, match=match)
    return pytest.raises(ValueError, match="invalid arguments on another rank")


def check_allreduce(comm, world, dtype, counts, label, **kwargs):
    """``comm.Allreduce(**kwargs)`` over every op at each of ``counts`` elements, against
    native MPI on ``world`` (or NumPy where MPI is no reference), identical on every rank."""
    p, r = world.Get_size(), world.Get_rank()
    for n in counts:
        for op in ops_at(dtype, n, p):
            what = f"{label} {op} {dtype} n={n} p={p}"
            send = make_data(dtype, op, n, r)
            got = np.full_like(send, 7)
            comm.Allreduce(send, got, op=MPI_OP[op], **kwargs)
            if native_supports(dtype):
                want = np.empty_like(send)
                world.Allreduce(send, want, op=MPI_OP[op])
            else:
                want = reference(dtype, op, n, p)
            assert_close(got, want, dtype, p, what)
            assert_identical_across_ranks(world, got, what)


@contextlib.contextmanager
def environ(**values):
    """os.environ with ``values`` set, for the Comms made inside (they read it when made)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def point_to_point(mpi_comm, **kwargs):
    """A collectives.Comm without a shared segment (COLLECTIVES_SHM=0): its collectives and
    its argument check go through MPI, as across nodes."""
    from collectives import Comm

    with environ(COLLECTIVES_SHM="0"):
        return Comm(mpi_comm, **kwargs)

