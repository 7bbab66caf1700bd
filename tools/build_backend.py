"""The build backend: setuptools', with what compiling the extensions needs among the
requirements of a wheel's or an editable install's build, not of an sdist's.

NumPy's and mpi4py's headers, and an MPI: an isolated build (``pip install .``, ``python -m
build``) sees only its build requirements, so the default build's ``mpi.h`` and ``libmpi`` come
from the ``mpich`` wheel installed there, which setup.py finds through the wheel's file list.
With MPICC set no MPI wheel is added: that MPI's compiler wrapper gives the flags, and no
wheel's ``bin/`` comes first on PATH to shadow it.
"""
import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook this module does not override)

COMPILE = ["numpy>=1.24", "mpi4py>=4.0"]
MPI_WHEEL = "mpich"


def _compile():
    return COMPILE + ([] if os.environ.get("MPICC") else [MPI_WHEEL])


def get_requires_for_build_wheel(config_settings=None):
    """setuptools' requirements for a wheel, NumPy, mpi4py and the mpich wheel unless MPICC is set."""
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compile()


def get_requires_for_build_editable(config_settings=None):
    """setuptools' requirements for an editable install, NumPy, mpi4py and the mpich wheel unless
    MPICC is set."""
    return _setuptools.get_requires_for_build_editable(config_settings) + _compile()
