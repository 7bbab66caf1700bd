"""Every all-reduce algorithm x op x dtype x awkward size, against native MPI and NumPy."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import ALL_DTYPES, assert_close, check_allreduce, make_data, point_to_point, sizes

ALGORITHMS = collectives.names("allreduce") + ["allreduce_fused"] + collectives.shm_names("allreduce")



@pytest.mark.matrix
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce(comm, mpi_comm, algorithm, dtype):
    check_allreduce(comm, mpi_comm, dtype, sizes(comm.size, algorithm, dtype.itemsize), algorithm,
                    algorithm=algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_in_place(comm, mpi_comm, algorithm):
    p, r = comm.size, comm.rank
    for n in (0, 1, p + 1, 1000):
        buf = make_data(np.float64, "sum", n, r)
        want = np.empty_like(buf)
        mpi_comm.Allreduce(buf, want)
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_close(buf, want, np.float64, p, f"{algorithm} in place n={n}")


@pytest.mark.parametrize("timeout", [0, 120], ids=["unwatched", "watched"])
def test_fused_up_to_its_bound(mpi_comm, check, timeout):
    """auto takes allreduce_fused under the check up to the most a fused message carries on
    the communicator (collectives.eager) and a schedule above, with the stall watchdog on or
    off; a forced allreduce_fused falls back there, check or not (point-to-point: on a shared
    segment the check is a phase of the segment)."""
    with point_to_point(mpi_comm, check=check, timeout=timeout) as comm:
        n = comm._engine.fused_bytes // 8
        for count, forced in ((n, None), (n + 1, None), (n, "fused"), (n + 1, "fused")):
            x = make_data(np.float64, "sum", count, comm.rank)
            got, want = np.zeros(count), np.zeros(count)
            comm.Allreduce(x, got, algorithm=forced)
            mpi_comm.Allreduce(x, want)
            assert_close(got, want, np.float64, comm.size, f"n={count} {forced}")
            fused = count == n and (check or forced is not None)
            assert (comm.last_algorithm == "allreduce_fused") == fused, (count, forced, comm.last_algorithm)


@pytest.mark.parametrize("dtype", [np.int16, np.float16], ids=str)
def test_a_wrong_reduction_is_caught(mpi_comm, monkeypatch, dtype):
    """The suite's reference is NumPy's own reductions, not the code it checks: a NumPy
    fallback whose reduction flips a high bit of every combined block fails check_allreduce, on
    every rank alike (the error travels with the sums), for dtypes native MPI is no
    reference for."""
    from collectives import comm as comm_module, kernels

    if mpi_comm.size < 2:
        pytest.skip("one rank combines nothing")
    real = kernels.reduce_into

    def wrong(dst, src, dtype_code, op_code):
        real(dst, src, dtype_code, op_code)
        if dst.size:
            dst.view(np.uint8)[dst.itemsize - 1] ^= 0x40  # the high byte: far beyond rounding

    monkeypatch.setattr(comm_module, "NATIVE", False)  # the NumPy twins of the executor and exchange
    monkeypatch.setattr(kernels, "reduce_into", wrong)
    with collectives.Comm(mpi_comm) as comm:
        with pytest.raises(AssertionError, match="wrong reduction"):
            check_allreduce(comm, mpi_comm, np.dtype(dtype), [13], "wrong reduction", algorithm="recursive_doubling")
    monkeypatch.undo()
    with collectives.Comm(mpi_comm) as comm:
        check_allreduce(comm, mpi_comm, np.dtype(dtype), [13], "right reduction", algorithm="recursive_doubling")
