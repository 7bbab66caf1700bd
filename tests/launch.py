"""Launching a separate MPI job from a test: for behaviour that ends or kills the job itself."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Set by the launcher of the job pytest runs in; a child mpiexec must not inherit them (but the
# user's permission for Open MPI to run as root stays).
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCAL", "OMPI_", "PRTE_")
_KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")

def mpiexec_path():
    """The mpiexec of this environment: MPIEXEC, beside the interpreter (the mpich wheel), or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return os.environ.get("MPIEXEC") or (here if os.path.exists(here) else shutil.which("mpiexec"))


def clean_env(**extra):
    """This environment without the launcher's variables, so a child job is a launch of its own;
    the repository first on PYTHONPATH, COLLECTIVES_DEBUG unset, then ``extra``."""
    clean = {k: v for k, v in os.environ.items() if k in _KEEP or not k.startswith(_LAUNCHER_PREFIXES)}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, clean.get("PYTHONPATH")]))
    clean.pop("COLLECTIVES_DEBUG", None)
    clean.update(extra)
    return clean


def mpiexec(n, args, timeout=60, env=None, cwd=None, launcher=()):
    """Run ``python args...`` on ``n`` ranks in a fresh job (``launcher``: mpiexec's own options);
    the CompletedProcess (text output)."""
    return subprocess.run([mpiexec_path(), *launcher, "-n", str(n), sys.executable, *args],
                          env=clean_env(**(env or {})), cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout)
