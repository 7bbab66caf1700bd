"""Single-process tests under mpiexec: each test runs on one rank of WORLD, spread round-robin.

The kernel tests need no communication, so running every one on every rank would only
multiply the work by the rank count on a shared machine.
"""
import zlib

import pytest
from mpi4py import MPI


@pytest.fixture(autouse=True)
def one_rank(request):
    """Skip the test unless it falls to this rank (by a stable hash of its id)."""
    world = MPI.COMM_WORLD
    if zlib.crc32(request.node.nodeid.encode()) % world.size != world.rank:
        pytest.skip(f"runs on rank {zlib.crc32(request.node.nodeid.encode()) % world.size}")
