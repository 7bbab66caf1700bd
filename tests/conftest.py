"""Run the suite under mpiexec: a communicator fixture, and one report from rank 0.

Ranks other than 0 write their pytest report to a buffer and print it only when they
failed, so an 8-rank run reads like a 1-rank one.  mpiexec's exit status is non-zero when
any rank fails.
"""
import io
import sys

import numpy as np
import pytest
from mpi4py import MPI

WORLD = MPI.COMM_WORLD


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if WORLD.rank:
        config._rank_report = io.StringIO()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter._tw = type(reporter._tw)(file=config._rank_report)


def pytest_unconfigure(config):
    report = getattr(config, "_rank_report", None)
    if report is not None and ("failed" in report.getvalue() or "error" in report.getvalue()):
        sys.stderr.write(f"---- rank {WORLD.rank} ----\n{report.getvalue()}")


def _split():
    # Two uneven halves, so one launch also covers other communicator sizes.
    color = int(WORLD.rank >= (WORLD.size + 1) // 2)
    return WORLD.Split(color, WORLD.rank)


COMMS = {"self": lambda: MPI.COMM_SELF.Dup(), "world": lambda: WORLD.Dup(), "split": _split}


@pytest.fixture(params=list(COMMS), scope="module")
def mpi_comm(request):
    """A plain mpi4py communicator: SELF, a duplicate of WORLD, or an uneven half of WORLD."""
    comm = COMMS[request.param]()
    yield comm
    comm.Free()


@pytest.fixture(scope="module")
def comm(mpi_comm):
    """collectives.Comm over ``mpi_comm``."""
    from collectives import Comm

    c = Comm(mpi_comm)
    yield c
    c.Free()


@pytest.fixture
def rng(mpi_comm):
    """A generator seeded by rank, so every rank holds different data."""
    return np.random.default_rng(1234 + mpi_comm.rank)
