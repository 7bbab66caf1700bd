"""End the whole MPI job when one rank dies of an uncaught exception.

Without this, a Python exception on one rank leaves every other rank blocked inside an MPI
call (ours run without the GIL) until the batch system's time limit: the job hangs and burns
its allocation.  ``install()`` replaces ``sys.excepthook`` and ``threading.excepthook``: on an
uncaught exception in any thread it prints the rank, the host and the traceback on stderr,
then calls ``MPI_Abort`` on ``COMM_WORLD``, so the launcher ends every rank within seconds
and exits non-zero.  Opt in with one line at the top of a program::

    import collectives; collectives.abort_on_error()

or run the program under ``python -m collectives.run prog.py [args]`` (as ``python -m mpi4py``
does for mpi4py).  ``python -m collectives ...`` installs it for its own commands.
"""
import os
import sys
import threading
import time
import traceback

from .supervise import launcher_rank

# The exit status a job aborted by an uncaught exception ends with (mpiexec passes it on).
EXIT_STATUS = 1
# Seconds between printing the report and aborting, so the launcher forwards the report.
FORWARD_S = 0.25

_previous = None


def _rank():
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return launcher_rank()


def abort(exc_type, exc, tb, thread=None):
    """Print where and why this rank failed, then abort every rank of COMM_WORLD."""
    import socket

    from mpi4py import MPI

    where = f" in thread {thread.name!r}" if thread is not None else ""
    lines = traceback.format_exception(exc_type, exc, tb)
    sys.stderr.write(f"collectives: rank {_rank()} on {socket.gethostname()}: uncaught "
                     f"{exc_type.__name__}{where}; aborting the job (MPI_Abort, exit status "
                     f"{EXIT_STATUS})\n" + "".join(lines))
    sys.stderr.flush()
    # MPI_Abort makes the launcher kill every rank, and Hydra was seen to drop the output its
    # proxy had not forwarded yet (about one run in ten): give it a moment to pass this on.
    time.sleep(FORWARD_S)
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.COMM_WORLD.Abort(EXIT_STATUS)
    os._exit(EXIT_STATUS)


def _thread_excepthook(args):
    abort(args.exc_type, args.exc_value, args.exc_traceback, args.thread)


def install():
    """Abort the MPI job on an uncaught exception in any thread of this process (idempotent)."""
    global _previous
    if _previous is None:
        _previous = (sys.excepthook, threading.excepthook)
        sys.excepthook = abort
        threading.excepthook = _thread_excepthook


def uninstall():
    """Restore the exception hooks ``install`` replaced."""
    global _previous
    if _previous is not None:
        sys.excepthook, threading.excepthook = _previous
        _previous = None


__all__ = ["EXIT_STATUS", "abort", "install", "uninstall"]
