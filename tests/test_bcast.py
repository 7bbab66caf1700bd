"""Every broadcast algorithm x root x dtype x awkward size, buffer specs and bad roots."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import LARGE, make_data, sizes

ALGORITHMS = collectives.names("bcast") + ["bcast_fused"] + collectives.shm_names("bcast")
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.float16, np.int32, np.float64, np.complex128)]


def roots(p):
    """The first, a middle and the last rank."""
    return sorted({0, p // 2, p - 1})


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_bcast(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for root in roots(p):
        for n in sizes(p, algorithm, dtype.itemsize):
            # ~10^6 elements for the widest type only: that is where the blocks are largest.
            if n == LARGE and dtype != np.complex128:
                continue
            what = f"{algorithm} {dtype} n={n} p={p} root={root}"
            data = make_data(dtype, "sum", n, root)
            buf = data.copy() if r == root else np.zeros(n, dtype)
            comm.Bcast(buf, root=root, algorithm=algorithm)
            assert np.array_equal(buf.view(np.uint8), data.view(np.uint8)), what
            want = data.copy() if r == root else np.zeros(n, dtype)
            mpi_comm.Bcast(want.view(np.uint8), root=root)
            assert np.array_equal(buf.view(np.uint8), want.view(np.uint8)), what


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_bcast_specs(comm, algorithm):
    p, r = comm.size, comm.rank
    root = p - 1
    data = np.arange(10, dtype=np.float64) + 0.5
    buf = data.copy() if r == root else np.zeros(10)
    comm.Bcast([buf, MPI.DOUBLE], root=root, algorithm=algorithm)
    assert np.array_equal(buf, data)

    # Only the first 7 ints go; the rest of every buffer stays as it was.
    ints = np.arange(10, dtype=np.int32) * (r + 1) if r == root else np.full(10, -r, np.int32)
    before = ints.copy()
    comm.Bcast([ints, 7, MPI.INT], root=root, algorithm=algorithm)
    assert np.array_equal(ints[:7], np.arange(7) * (root + 1))
    assert np.array_equal(ints[7:], before[7:])

    # A 2-D Fortran-ordered array and a bytearray: any contiguous buffer.
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4)) if r == root else np.zeros((3, 4), order="F")
    comm.Bcast(f, root=root, algorithm=algorithm)
    assert np.array_equal(f, np.arange(12.0).reshape(3, 4))
    raw = bytearray(b"collectives" if r == root else bytes(11))
    comm.Bcast(raw, root=root, algorithm=algorithm)
    assert raw == b"collectives"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ibcast(comm, algorithm):
    p, r = comm.size, comm.rank
    root = p // 2
    bufs = [np.full(n, r if r == root else -1, np.int64) for n in (5, 1000)]
    reqs = [comm.Ibcast(b, root=root, algorithm=algorithm) for b in bufs]
    collectives.Request.waitall(reqs)
    for b in bufs:
        assert (b == root).all()


@pytest.mark.parametrize("root", [-1, "size", 1.0, None])
def test_bcast_invalid_root(comm, root):
    root = comm.size if root == "size" else root
    with pytest.raises(TypeError if root is None or type(root) is float else ValueError, match="root"):
        comm.Bcast(np.zeros(3), root=root)


def test_bcast_bad_buffers(comm):
    with pytest.raises(ValueError, match="non-contiguous"):
        comm.Bcast(np.zeros((4, 4))[:, 1])
    with pytest.raises(ValueError, match="read-only"):
        comm.Bcast(bytes(4))


def test_bcast_size_mismatch(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(ValueError, match="differ across ranks"):
        comm.Bcast(np.zeros(3 + (comm.rank == 0)), root=0)
