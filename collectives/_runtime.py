"""Runtime defaults of ``python -m collectives``, applied before MPI and NumPy start.

What the Makefile exports for its own launches, so ``srun python -m collectives train`` and a
batch script behave as ``make demo`` does: one BLAS / OpenMP thread per rank (the ranks are
the parallelism; threaded BLAS made a 0.08 s solve take 1.4 s here), and, when a node holds
more ranks than cores, MPIR_CVAR_DEVICE_COLLECTIVES=none (MPICH's shared-memory collectives spin on flags and
collapse when oversubscribed: 8 ms instead of 15 us per small all-reduce at np=4 on 2 cores).
A variable the user has set, even to an empty string, is left alone.
"""
import os
import re

THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Ranks on this node, as the launchers say it: Hydra (MPICH), Open MPI, Slurm's srun.
LOCAL_RANKS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_TASKS_PER_NODE")


def local_ranks(environ):
    """Ranks sharing this node per the launcher's variables, or None if none says."""
    for key in LOCAL_RANKS:
        # Slurm writes e.g. "4(x2),3": the first number is this node's count on a uniform job,
        # and the largest is the one that matters for oversubscription.
        counts = [int(c) for c in re.findall(r"(\d+)(?:\(x\d+\))?", environ.get(key, ""))]
        if counts:
            return max(counts)
    return None


def defaults(environ=None, cores=None):
    """Set the defaults in ``environ`` (default os.environ) where unset; the dict of what was set."""
    environ = os.environ if environ is None else environ
    cores = os.cpu_count() or 1 if cores is None else cores
    want = dict.fromkeys(THREADS, "1")
    ranks = local_ranks(environ)
    if ranks is not None and ranks > cores:
        want["MPIR_CVAR_DEVICE_COLLECTIVES"] = "none"
    applied = {k: v for k, v in want.items() if k not in environ}
    environ.update(applied)
    return applied
