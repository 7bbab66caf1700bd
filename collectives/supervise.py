"""Name the rank a signal killed: a supervisor process per rank under ``python -m collectives.run``.

MPICH's Hydra answers a rank's death by a signal (SIGKILL from the OOM killer or a user, a
segmentation fault) by sending SIGKILL to every other rank's process group within
milliseconds: its proxy does so as soon as it reaps the dead process, ``-disable-auto-cleanup``
or not, with no SIGTERM first.  It then reports a PID, often a survivor's, not a rank.  No
rank is left alive to say who died, and no handler can run in a process SIGKILL ends.

So the process the launcher starts forks before MPI starts (``start``, called by the package
when run as ``python -m collectives.run``).  The child runs the program; the parent, in the
same process group, only waits for it.  It holds the launcher's sockets open, so the launcher
sees nothing until the parent has printed, on stderr::

    collectives: rank 2 on node17 (pid 4242) was killed by signal 9 (SIGKILL); exit status 137

then it dies of the same signal, so the launcher sees what it would see without the
supervisor and ends the job the way it ends it for a killed rank (Hydra: SIGKILL to the other
ranks, exit status 9).  An exit with status 128 + the signal number would not be that: Hydra
treats it as an ordinary failed exit, whose cleanup does not always reach the other ranks.
An exit status the child returns, the parent returns too.  Signals a launcher or scheduler
sends (to the process group: Hydra's and Slurm's SIGINT, SIGTERM, ...) reach the child
directly; the parent ignores them.  The child is killed if the parent dies.
"""
import ctypes
import ctypes.util
import os
import signal
import socket
import sys

MODULE = "collectives.run"
# Sent by launchers and schedulers to the whole process group: the child gets them itself.
IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The rank as the launchers say it before MPI starts: Hydra (MPICH), Open MPI, PMIx, Slurm's srun.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launcher_rank(environ=os.environ):
    """This process's rank per the launcher's environment, or '?' if none says."""
    return next((environ[v] for v in RANK_VARIABLES if v in environ), "?")


def requested(orig_argv):
    """Whether the interpreter's command line (``sys.orig_argv``) runs ``-m collectives.run``."""
    args = iter(orig_argv[1:])
    for arg in args:
        if arg.startswith("-m"):
            return (arg[2:] or next(args, "")) == MODULE
        if arg in ("-X", "-W"):  # the interpreter options that take a separate value
            next(args, None)
        elif arg.startswith("-c") or not arg.startswith("-"):
            return False
    return False


def report(rank, pid, sig, host=None):
    """The line the supervisor prints when signal ``sig`` killed its child ``pid``, rank ``rank``."""
    try:
        name = f" ({signal.Signals(sig).name})"
    except ValueError:
        name = ""
    return (f"collectives: rank {rank} on {host or socket.gethostname()} (pid {pid}) was killed by "
            f"signal {sig}{name}; exit status {128 + sig}\n")


def start():
    """Fork; return in the child, which runs the program.  The parent waits for the child and
    never returns: it ends as the child did, printing ``report`` first if a signal killed it."""
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _die_with(parent)
        return
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        sys.stderr.write(report(launcher_rank(), child, sig))
        sys.stderr.flush()
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # no process may set these two
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default action is not to terminate
    os._exit(os.waitstatus_to_exitcode(status))


def _die_with(parent):
    """Have the kernel SIGKILL this process when ``parent`` dies (so a launcher that kills only
    the process it started leaves nothing behind)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


__all__ = ["launcher_rank", "report", "requested", "start"]
