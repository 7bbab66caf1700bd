"""Every all-reduce algorithm x op x dtype x awkward size, against native MPI and NumPy."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import ALL_DTYPES, LARGE, assert_close, check_allreduce, make_data, ops_for, sizes

ALGORITHMS = collectives.names("allreduce")



@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce(comm, mpi_comm, algorithm, dtype):
    check_allreduce(comm, mpi_comm, dtype, sizes(comm.size), algorithm, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        buf = make_data(np.float64, "sum", n, r)
        want = np.empty_like(buf)
        mpi_comm.Allreduce(buf, want)
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_close(buf, want, np.float64, p, f"{algorithm} in place n={n}")
