"""The build backend: setuptools', with the ``mpich`` wheel among the build requirements unless
MPICC names the MPI to build against.

An isolated build (``pip install .``, ``python -m build``) sees only its build requirements, so
the default build's ``mpi.h`` and ``libmpi`` must come from a wheel installed there; setup.py
finds them through the wheel's file list.  With MPICC set nothing is added: that MPI's compiler
wrapper gives the flags, and no wheel's ``bin/`` comes first on PATH to shadow it.
"""
import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook this module does not override)

MPI_WHEEL = "mpich"


def _mpi():
    return [] if os.environ.get("MPICC") else [MPI_WHEEL]


def get_requires_for_build_wheel(config_settings=None):
    """setuptools' requirements for a wheel, and the mpich wheel unless MPICC is set."""
    return _setuptools.get_requires_for_build_wheel(config_settings) + _mpi()


def get_requires_for_build_editable(config_settings=None):
    """setuptools' requirements for an editable install, and the mpich wheel unless MPICC is set."""
    return _setuptools.get_requires_for_build_editable(config_settings) + _mpi()
