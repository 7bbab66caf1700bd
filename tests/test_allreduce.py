"""Every all-reduce algorithm x op x dtype x awkward size, against native MPI and NumPy."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives.ops import MPI_OP
from util import (ops_at, ALL_DTYPES, LARGE, assert_close, assert_identical_across_ranks, make_data,
                  native_supports, ops_for, reference, sizes)

ALGORITHMS = collectives.names("allreduce")



@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce(comm, mpi_comm, algorithm, dtype):
    p, r = comm.size, comm.rank
    for n in sizes(p):
        for op in ops_at(dtype, n):
            what = f"{algorithm} {op} {dtype} n={n} p={p}"
            send = make_data(dtype, op, n, r)
            got = np.full_like(send, 7)
            comm.Allreduce(send, got, op=MPI_OP[op], algorithm=algorithm)
            if native_supports(dtype):
                want = np.empty_like(send)
                mpi_comm.Allreduce(send, want, op=MPI_OP[op])
            else:
                want = reference(dtype, op, n, p)
            assert_close(got, want, dtype, p, what)
            assert_identical_across_ranks(mpi_comm, got, what)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        buf = make_data(np.float64, "sum", n, r)
        want = np.empty_like(buf)
        mpi_comm.Allreduce(buf, want)
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_close(buf, want, np.float64, p, f"{algorithm} in place n={n}")
