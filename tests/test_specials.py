"""NaN, +-Inf and +-0 through every reducing collective and algorithm: one answer.

MIN and MAX must give the IEEE 754-2019 minimum / maximum (canonical NaN, -0 < +0) bit for
bit whatever algorithm runs; SUM and PROD must agree with the exact NumPy fold except in
NaN payloads.  Native MPI is no reference here (MPICH's MIN and MAX use C's ``<``), so the
reference is the NumPy fold of tests/specials.py, in rank order.
"""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives.ops import MPI_OP
from specials import FLOATS, assert_result, fold, specials
from util import assert_everywhere

OPS = ["min", "max", "sum", "prod"]
COUNTS = [1, 13, 1000, 4099]


def _inputs(dtype, n, p):
    """Every rank's input, so each rank can compute the reference itself."""
    return [specials(dtype, n, r) for r in range(p)]


def _check_all_algorithms(mpi_comm, results, want, op, what):
    """Each algorithm's result against the reference, and MIN/MAX identical across algorithms."""
    def check():
        for algorithm, got in results.items():
            assert_result(got, want, op, f"{what} {algorithm}")
        if op in ("min", "max"):
            first = next(iter(results.values())).view(np.uint8)
            for algorithm, got in results.items():
                assert np.array_equal(got.view(np.uint8), first), f"{what}: {algorithm} differs"
    assert_everywhere(mpi_comm, check)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_allreduce_specials(comm, mpi_comm, dtype, op):
    p, r = comm.size, comm.rank
    for n in COUNTS:
        parts = _inputs(dtype, n, p)
        results = {}
        for algorithm in collectives.names("allreduce") + collectives.shm_names("allreduce"):
            got = np.full(n, 7, dtype)
            comm.Allreduce(parts[r], got, op=MPI_OP[op], algorithm=algorithm)
            results[algorithm] = got
            buf = parts[r].copy()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI_OP[op], algorithm=algorithm)
            results[f"{algorithm} in place"] = buf
        _check_all_algorithms(mpi_comm, results, fold(op, parts), op, f"allreduce {op} {dtype} n={n} p={p}")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_reduce_specials(comm, mpi_comm, dtype, op):
    p, r = comm.size, comm.rank
    for root in sorted({0, p - 1}):
        for n in COUNTS:
            parts = _inputs(dtype, n, p)
            results = {}
            for algorithm in collectives.names("reduce") + collectives.shm_names("reduce"):
                got = np.full(n, 7, dtype)
                comm.Reduce(parts[r], got, op=MPI_OP[op], root=root, algorithm=algorithm)
                if r == root:
                    results[algorithm] = got
            # The same reduction reached through all-reduce must give the same bits.
            got = np.full(n, 7, dtype)
            comm.Allreduce(parts[r], got, op=MPI_OP[op])
            results["allreduce"] = got
            _check_all_algorithms(mpi_comm, results, fold(op, parts), op,
                                  f"reduce {op} {dtype} n={n} p={p} root={root}")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_reduce_scatter_specials(comm, mpi_comm, dtype, op):
    p, r = comm.size, comm.rank
    for block in (1, 7, 1000):
        parts = _inputs(dtype, block * p, p)
        results = {}
        for algorithm in collectives.names("reduce_scatter") + collectives.shm_names("reduce_scatter"):
            got = np.full(block, 7, dtype)
            comm.Reduce_scatter_block(parts[r], got, op=MPI_OP[op], algorithm=algorithm)
            results[algorithm] = got
        want = fold(op, parts)[r * block:(r + 1) * block]
        _check_all_algorithms(mpi_comm, results, want, op, f"reduce_scatter {op} {dtype} block={block} p={p}")
