"""collectives: MPI collective algorithms written on mpi4py point-to-point, with native kernels.

``Comm(mpi_comm)`` wraps an mpi4py communicator and keeps mpi4py's method names; the
functions in ``collectives.functional`` take and return NumPy arrays.
"""
import os
import sys

if sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") in (
        "collectives-train", "collectives-bench"):
    # Imported by ``python -m collectives ...`` or by its commands: set the runtime defaults
    # (collectives._runtime) before MPI and NumPy start, as ``make demo`` does.
    from ._runtime import defaults as _defaults

    _defaults()
    from . import supervise as _supervise

    if _supervise.requested(getattr(sys, "orig_argv", [])):
        # ``python -m collectives.run``: a parent that names this rank if a signal kills it
        _supervise.start()

from . import p2p  # noqa: E402  (after the defaults: this starts MPI)
from .abort import install as abort_on_error
from .comm import Cartcomm, Comm, Distgraphcomm, Graphcomm, wrap
from .functional import (allgather, allreduce, barrier, bcast, gather, iallreduce, reduce,
                         reduce_scatter, scatter)
from .nonblocking import Request
from .registry import ALGORITHMS, names, shm_names

__all__ = ["Comm", "Cartcomm", "Graphcomm", "Distgraphcomm", "abort_on_error", "Request", "ALGORITHMS", "names", "shm_names", "wrap", "p2p", "allreduce", "iallreduce",
           "bcast", "reduce", "allgather", "reduce_scatter", "gather", "scatter", "barrier"]
__version__ = "0.1.0"
