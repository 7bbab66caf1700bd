"""collectives: MPI collective algorithms written on mpi4py point-to-point, with native kernels.

``Comm(mpi_comm)`` wraps an mpi4py communicator and keeps mpi4py's method names; the
functions in ``collectives.functional`` take and return NumPy arrays.
"""
from .comm import Comm
from .nonblocking import Request
from .registry import ALGORITHMS, names

__all__ = ["Comm", "Request", "ALGORITHMS", "names"]
__version__ = "0.1.0"
