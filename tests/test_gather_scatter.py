"""Every gather and scatter algorithm x root x dtype x awkward size; the v-variants with
uneven counts and scattered displacements; in place; buffer specs; bad arguments."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import LARGE, expect_error, make_data, sizes, uneven

GATHER = collectives.names("gather") + ["gather_fused"] + collectives.shm_names("gather")
SCATTER = collectives.names("scatter") + ["scatter_fused"] + collectives.shm_names("scatter")
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.float16, np.uint32, np.float64, np.complex64)]


def roots(p):
    """The first, a middle and the last rank."""
    return sorted({0, p // 2, p - 1})


def _per_rank(p, algorithm=None, itemsize=1):
    """Elements per rank: the awkward sizes, ~10^6 in all for the largest."""
    return sorted({n // p if n == LARGE else n for n in sizes(p, algorithm, itemsize * p)})


def _cases(p, algorithm, dtype):
    """(root, n, what) for each root and per-rank size n; ~10^6 elements in all only for 8-byte dtypes."""
    for root in roots(p):
        for n in _per_rank(p, algorithm, dtype.itemsize):
            if n == LARGE // p and dtype.itemsize < 8:
                continue
            yield root, n, f"{algorithm} {dtype} n={n} p={p} root={root}"


def _same_bytes(a, b):
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", GATHER)
def test_gather(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for root, n, what in _cases(p, algorithm, dtype):
        send = make_data(dtype, "sum", n, r)
        got = np.zeros(n * p, dtype) if r == root else None
        comm.Gather(send, got, root=root, algorithm=algorithm)
        want = np.zeros(n * p, dtype) if r == root else None
        mpi_comm.Gather(send.view(np.uint8), None if want is None else want.view(np.uint8), root=root)
        if r == root:
            assert _same_bytes(got, want), what


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", SCATTER)
def test_scatter(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for root, n, what in _cases(p, algorithm, dtype):
        send = make_data(dtype, "sum", n * p, root) if r == root else None
        got = np.zeros(n, dtype)
        comm.Scatter(send, got, root=root, algorithm=algorithm)
        want = np.zeros(n, dtype)
        mpi_comm.Scatter(None if send is None else send.view(np.uint8), want.view(np.uint8), root=root)
        assert _same_bytes(got, want), what
        assert _same_bytes(got, make_data(dtype, "sum", n * p, root)[r * n:(r + 1) * n]), what


@pytest.mark.parametrize("algorithm", GATHER)
def test_gatherv(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    counts, displs, size = uneven(p)
    send = make_data(np.float64, "sum", counts[r], r)
    for root in roots(p):
        got = np.full(size, -1.0)
        want = got.copy()
        spec = [got, (counts, displs), MPI.DOUBLE] if r == root else None
        comm.Gatherv(send, spec, root=root, algorithm=algorithm)
        mpi_comm.Gatherv(send, [want, (counts, displs), MPI.DOUBLE] if r == root else None, root=root)
        if r == root:
            assert np.array_equal(got, want), f"{algorithm} root={root}"
            # Packed counts with equal sizes, as [buf, counts, datatype].
            got = np.zeros(2 * p, np.int32)
            comm.Gatherv(np.full(2, r, np.int32), [got, [2] * p, MPI.INT], root=root, algorithm=algorithm)
            assert np.array_equal(got, np.repeat(np.arange(p), 2))
        else:
            comm.Gatherv(np.full(2, r, np.int32), None, root=root, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", SCATTER)
def test_scatterv(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    counts, displs, size = uneven(p)
    for root in roots(p):
        send = make_data(np.int16, "sum", size, root) if r == root else None
        got = np.full(counts[r], -1, np.int16)
        want = got.copy()
        spec = [send, (counts, displs), MPI.SHORT] if r == root else None
        comm.Scatterv(spec, got, root=root, algorithm=algorithm)
        mpi_comm.Scatterv(spec, want, root=root)
        assert np.array_equal(got, want), f"{algorithm} root={root}"


@pytest.mark.parametrize("algorithm", GATHER)
def test_gather_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for root in roots(p):
        for n in (0, 1, p + 1):
            mine = make_data(np.complex128, "sum", n, r)
            want = np.zeros(n * p, np.complex128) if r == root else None
            mpi_comm.Gather(mine, want, root=root)
            if r == root:
                buf = np.zeros(n * p, np.complex128)
                buf[r * n:(r + 1) * n] = mine
                comm.Gather(MPI.IN_PLACE, buf, root=root, algorithm=algorithm)
                assert np.array_equal(buf, want), f"{algorithm} in place n={n} root={root}"
            else:
                comm.Gather(mine, None, root=root, algorithm=algorithm)
    counts, displs, size = uneven(p)
    for root in roots(p):
        mine = np.full(counts[r], r + 0.5)
        if r == root:
            buf = np.full(size, -1.0)
            buf[displs[r]:displs[r] + counts[r]] = mine
            want = buf.copy()
            mpi_comm.Gatherv(MPI.IN_PLACE, [want, (counts, displs), MPI.DOUBLE], root=root)
            comm.Gatherv(MPI.IN_PLACE, [buf, (counts, displs), MPI.DOUBLE], root=root, algorithm=algorithm)
            assert np.array_equal(buf, want), f"{algorithm} Gatherv in place root={root}"
        else:
            mpi_comm.Gatherv(mine, None, root=root)
            comm.Gatherv(mine, None, root=root, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", SCATTER)
def test_scatter_in_place(comm, algorithm):
    p, r = comm.size, comm.rank
    for root in roots(p):
        for n in (0, 1, p + 1):
            data = make_data(np.float32, "sum", n * p, root)
            if r == root:
                buf = data.copy()
                comm.Scatter(buf, MPI.IN_PLACE, root=root, algorithm=algorithm)
                assert np.array_equal(buf, data), f"{algorithm} root's buffer changed"
            else:
                got = np.zeros(n, np.float32)
                comm.Scatter(None, got, root=root, algorithm=algorithm)
                assert np.array_equal(got, data[r * n:(r + 1) * n]), f"{algorithm} in place n={n} root={root}"


@pytest.mark.parametrize("algorithm", GATHER + SCATTER)
def test_rooted_specs(comm, algorithm):
    p, r = comm.size, comm.rank
    root = p // 2
    gather = algorithm.startswith("gather")
    # [buf, count, datatype] and [buf, (count, displ), datatype] at the root: the count is per rank.
    big = np.full(3 * p + 4, -1, np.int32)
    for spec, at in (([big, 3, MPI.INT], 0), ([big, (3, 2), MPI.INT], 2), ([big[:3 * p], MPI.INT], 0)):
        if gather:
            big[:] = -1
            comm.Gather(np.full(3, r, np.int32), spec if r == root else None, root=root, algorithm=algorithm)
            if r == root:
                assert np.array_equal(big[at:at + 3 * p], np.repeat(np.arange(p), 3))
                assert (np.delete(big, np.s_[at:at + 3 * p]) == -1).all()
        else:
            big[:] = -1
            big[at:at + 3 * p] = np.repeat(np.arange(p), 3)
            got = np.zeros(5, np.int32)
            comm.Scatter(spec if r == root else None, [got, 3, MPI.INT], root=root, algorithm=algorithm)
            assert np.array_equal(got, [r, r, r, 0, 0])
    # A double buffer seen as bytes: the count then counts bytes.
    raw = np.zeros(p, np.float64)
    if gather:
        comm.Gather([np.array([r + 0.25]), 8, MPI.BYTE], [raw, MPI.BYTE] if r == root else None,
                    root=root, algorithm=algorithm)
        if r == root:
            assert np.array_equal(raw, np.arange(p) + 0.25)
    else:
        raw[:] = np.arange(p) + 0.25
        one = np.zeros(1)
        comm.Scatter([raw, MPI.BYTE] if r == root else None, [one, MPI.BYTE], root=root, algorithm=algorithm)
        assert one[0] == r + 0.25


@pytest.mark.parametrize("root", [-1, "size", 0.5])
@pytest.mark.parametrize("name", ["Gather", "Gatherv", "Scatter", "Scatterv"])
def test_invalid_root(comm, name, root):
    root = comm.size if root == "size" else root
    buf = np.zeros(comm.size)
    with pytest.raises(TypeError if type(root) is float else ValueError, match="root"):
        getattr(comm, name)(buf[:1], buf, root=root) if name.startswith("Gather") \
            else getattr(comm, name)(buf, buf[:1], root=root)


def test_rooted_bad_arguments(comm):
    p, r = comm.size, comm.rank
    # Every rank calls; only the root (or rank 1) sees what is wrong, and all of them raise.
    bad = r == 0
    if p > 1:
        with expect_error(bad, ValueError, "split evenly"):
            comm.Gather(np.zeros(1), np.zeros(p + 1) if bad else None)
    with expect_error(bad, ValueError, "counts for a communicator"):
        comm.Scatterv([np.zeros(p + 1), [1] * (p + 1), MPI.DOUBLE] if bad else None, np.zeros(1))
    with expect_error(bad, TypeError, "dtype"):
        comm.Gather(np.zeros(1), np.zeros(p, np.float32) if bad else None)
    with expect_error(bad, ValueError, "own block"):
        comm.Scatter(np.zeros(p) if bad else None, np.zeros(2))
    if p > 1:
        with expect_error(r == 1, ValueError, "IN_PLACE"):
            comm.Gather(MPI.IN_PLACE if r == 1 else np.zeros(1), np.zeros(p) if r == 0 else None)
    if p > 1:
        # A rank whose count disagrees with the root's is caught on every rank, not truncated.
        counts = [2] * p
        with pytest.raises(ValueError, match="differ across ranks"):
            comm.Gatherv(np.zeros(2 + (r == p - 1)), [np.zeros(2 * p), counts, MPI.DOUBLE] if r == 0 else None)
        with pytest.raises(ValueError, match="differ across ranks"):
            comm.Scatterv([np.zeros(2 * p), counts, MPI.DOUBLE] if r == 0 else None, np.zeros(2 - (r == p - 1)))
        with pytest.raises(ValueError, match="differ across ranks"):
            comm.Gather(np.zeros(1 + (r == p - 1)), np.zeros(p) if r == 0 else None)
