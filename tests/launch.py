"""Launching a separate MPI job from a test: for behaviour that ends or kills the job itself."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Set by the launcher of the job pytest runs in; a child mpiexec must not inherit them (but the
# user's permission for Open MPI to run as root stays).
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCAL", "OMPI_", "PRTE_")
_KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")

# A test that launches jobs of its own, or runs MPI in its own process, gains nothing from the
# rank count of the suite's launch and needs the launch to itself: it runs in the 1-rank launch.
own_jobs = pytest.mark.serial(alone=True)


def mpiexec_path():
    """The mpiexec of this environment: MPIEXEC, beside the interpreter (the mpich wheel), or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return os.environ.get("MPIEXEC") or (here if os.path.exists(here) else shutil.which("mpiexec"))


OPEN_MPI = MPI.Get_library_version().startswith("Open MPI")
# What Open MPI's launcher adds to a job's stderr when a rank exits non-zero: a message between
# lines of dashes, and PMIx errors about the ranks that already left.
_OPEN_MPI_NOISE = re.compile(r"^-{40,}\n.*?^-{40,}\n\n?|^\[[^\]\n]*\] PMIX ERROR: .*\n", re.S | re.M)


def launcher():
    """mpiexec and its global options, before ``-n``: Open MPI's needs --oversubscribe for more
    ranks than cores (MPICH's allows them)."""
    return [mpiexec_path(), *(["--oversubscribe"] if OPEN_MPI else [])]


def program_stderr(text):
    """A child job's stderr as the program wrote it, without the launcher's own report."""
    return _OPEN_MPI_NOISE.sub("", text) if OPEN_MPI else text


def rank_of(env):
    """The MPI rank the launcher gave a process with environment ``env`` (bytes keys), or None."""
    for var in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK"):  # MPICH's Hydra, Open MPI's PRRTE
        if var in env:
            return int(env[var])
    return None


def clean_env(**extra):
    """This environment without the launcher's variables, so a child job is a launch of its own;
    the repository first on PYTHONPATH, COLLECTIVES_DEBUG unset, then ``extra``."""
    clean = {k: v for k, v in os.environ.items() if k in _KEEP or not k.startswith(_LAUNCHER_PREFIXES)}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, clean.get("PYTHONPATH")]))
    clean.pop("COLLECTIVES_DEBUG", None)
    clean.update(extra)
    return clean


def mpiexec(n, args, timeout=60, env=None, cwd=None, options=()):
    """Run ``python args...`` on ``n`` ranks in a fresh job (``options``: more of mpiexec's own);
    the CompletedProcess (text output)."""
    done = subprocess.run([*launcher(), *options, "-n", str(n), sys.executable, *args],
                          env=clean_env(**(env or {})), cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout)
    done.stderr = program_stderr(done.stderr)
    return done
