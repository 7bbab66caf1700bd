"""End the whole MPI job when one rank fails, instead of leaving the others waiting.

Without this, a Python exception on one rank leaves every other rank blocked inside an MPI
call (ours run without the GIL) until the batch system's time limit, and a rank that leaves
with an error can itself hang in MPI's finalisation, waiting for ranks that will never
arrive: the job burns its allocation.

``arm`` is the default: the first ``Comm`` a program makes arms it (COLLECTIVES_ABORT_ON_ERROR,
on unless set to 0), in a plain ``mpiexec python prog.py``.  From then on:

* an uncaught exception in any thread prints one message, ``collectives: rank R on HOST:
  uncaught ValueError ...`` with the traceback, then calls ``MPI_Abort`` on ``COMM_WORLD``,
  so the launcher ends every rank within seconds; the exit status is 124 for a StallError
  (collectives.watchdog.EXIT_STATUS, as GNU timeout's), 1 for anything else (an unusable
  Comm's RuntimeError included);
* ``sys.exit`` with a non-zero status does the same, with exit status 1, since the other
  ranks may be waiting for this one.

An error the program catches stays the program's: nothing aborts behind its back.
Interactive sessions (``python -i``, the REPL, IPython and Jupyter) and pytest keep their own
handling of errors.  ``install()`` arms the exception hooks unconditionally (``import
collectives; collectives.abort_on_error()``), and ``python -m collectives.run prog.py``, as
``python -m mpi4py`` does for mpi4py, catches every way out of the program.
"""
import atexit
import os
import sys
import threading
import time
import traceback

from .supervise import launcher_rank

# The exit status of a job aborted by an uncaught exception (mpiexec passes it on).
EXIT_STATUS = 1
# Seconds between printing the report and aborting, so the launcher forwards the report.
FORWARD_S = 0.25

# What must reach the disk before MPI_Abort ends this rank (collectives.timeline adds its
# trace file); registered by the modules that own it, which import this one.
BEFORE_ABORT = []
_previous = None
_armed = False
_exit_status = None  # the non-zero status sys.exit was called with, once armed
_exit_agreed = False  # every rank leaves with the same status: no need to abort


def _rank():
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return launcher_rank()


def status_of(exc):
    """The exit status the job ends with for ``exc``: its ``exit_status`` (a StallError's is
    124), else EXIT_STATUS."""
    return getattr(exc, "exit_status", EXIT_STATUS)


def end(message, status):
    """Print ``message`` on stderr, then abort every rank of COMM_WORLD with ``status``."""
    from mpi4py import MPI

    sys.stderr.write(message)
    sys.stderr.flush()
    for save in BEFORE_ABORT:
        save()
    # MPI_Abort makes the launcher kill every rank, and Hydra drops what its proxy has not
    # forwarded yet (about one run in ten without this pause): give it a moment to pass it on.
    time.sleep(FORWARD_S)
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.COMM_WORLD.Abort(status)
    os._exit(status)


def abort(exc_type, exc, tb, thread=None):
    """Print where and why this rank failed, then abort every rank of COMM_WORLD."""
    import socket

    where = f" in thread {thread.name!r}" if thread is not None else ""
    status = status_of(exc)
    lines = traceback.format_exception(exc_type, exc, tb)
    end(f"collectives: rank {_rank()} on {socket.gethostname()}: uncaught {exc_type.__name__}{where}; "
        f"aborting the job (MPI_Abort, exit status {status})\n" + "".join(lines), status)


def _thread_excepthook(args):
    if args.exc_type is SystemExit:  # a thread's sys.exit ends only that thread
        return
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


def interactive():
    """Whether Python runs an interactive session, or pytest, which handle errors themselves."""
    return (bool(sys.flags.interactive) or hasattr(sys, "ps1") or "IPython" in sys.modules
            or "_pytest.main" in sys.modules)


def arm(enabled=True):
    """The default of a program that makes a Comm: ``install``, and a non-zero ``sys.exit``
    aborts the job too (``enabled`` False, or an interactive session: nothing)."""
    global _armed
    if _armed or not enabled or interactive():
        return
    _armed = True
    install()
    exit_ = sys.exit

    def exit_noting_the_status(status=None):
        global _exit_status
        if status not in (None, 0):
            _exit_status = status
        exit_(status)

    exit_noting_the_status.__doc__ = exit_.__doc__
    sys.exit = exit_noting_the_status
    # Python's exit handlers run before mpi4py finalises MPI (at the C level), so this one
    # aborts before finalisation could wait.
    atexit.register(_abort_on_nonzero_exit)


def exit_agreed():
    """Say that every rank is leaving with the same exit status (a command whose ranks agreed
    on their error), so a non-zero ``sys.exit`` ends this rank alone, as it would without MPI."""
    global _exit_agreed
    _exit_agreed = True


def _abort_on_nonzero_exit():
    import socket

    if _exit_status is None or _exit_agreed:
        return
    end(f"collectives: rank {_rank()} on {socket.gethostname()}: sys.exit({_exit_status!r}); aborting "
        f"the job (MPI_Abort, exit status {EXIT_STATUS})\n", EXIT_STATUS)


__all__ = ["BEFORE_ABORT", "EXIT_STATUS", "abort", "arm", "end", "exit_agreed", "install", "interactive", "status_of", "uninstall"]
