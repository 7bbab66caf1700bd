"""Every all-reduce algorithm gives every rank the same bits where op(a, b) and op(b, a) differ.

min and max of -0.0 and +0.0 return whichever operand comes first, and a complex product
whose multiply-adds the compiler fused rounds differently with its operands swapped: an
algorithm in which two partners combine the same two values in opposite orders fails here.
"""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import assert_close, assert_everywhere, assert_identical_across_ranks, native_supports

CASES = [(np.float16, "min"), (np.float32, "min"), (np.float64, "max"),
         (np.complex64, "prod"), (np.complex128, "prod")]


def _data(dtype, op, n, rank):
    rng = np.random.default_rng([7, rank, n])
    if op in ("min", "max"):
        return rng.choice(np.array([-0.0, 0.0, 1.0], dtype), n)
    return (rng.uniform(0.8, 1.25, n) + 1j * rng.uniform(-0.5, 0.5, n)).astype(dtype)


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{np.dtype(t)}-{op}" for t, op in CASES])
@pytest.mark.parametrize("algorithm", collectives.names("allreduce") + collectives.shm_names("allreduce"))
def test_allreduce_bitwise_identical(comm, mpi_comm, algorithm, dtype, op):
    p, r = comm.size, comm.rank
    mpi_op = getattr(MPI, op.upper())
    for n in (1, p + 1, 257):
        what = f"{algorithm} {op} {np.dtype(dtype)} n={n} p={p}"
        send = _data(dtype, op, n, r)
        got = np.empty_like(send)
        comm.Allreduce(send, got, op=mpi_op, algorithm=algorithm)
        assert_everywhere(mpi_comm, assert_identical_across_ranks, mpi_comm, got, what)
        if native_supports(dtype):
            want = np.empty_like(send)
            mpi_comm.Allreduce(send, want, op=mpi_op)
            assert_everywhere(mpi_comm, assert_close, got, want, dtype, p, what)
