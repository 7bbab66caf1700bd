"""Shared by the training tests (train, stragglers, gossip, data servers): the digits on WORLD,
a quiet fit, the mark of a parameter server's tests."""
import contextlib
import io

import pytest
from mpi4py import MPI

from collectives import Comm
from collectives.train.data import DIGITS
from collectives.train.job import make_trainer, prepare

# A parameter server needs a server and a worker.
SERVER_AND_WORKER = pytest.mark.mpi(min_size=2)


def world_fixture(test_fraction=0.0):
    """A module fixture: (collectives.Comm over WORLD, the bundled digits prepared on it)."""
    @pytest.fixture(scope="module")
    def world():
        c = Comm(MPI.COMM_WORLD)
        yield c, prepare(c, DIGITS, test_fraction=test_fraction)
        c.Free()
    return world


def fit(comm, data, **options):
    """Train quietly, a report row every epoch; (trainer, final parameters)."""
    trainer = make_trainer(comm, data, progress=False, log_every=1, **options)
    with contextlib.redirect_stdout(io.StringIO()):
        return trainer, trainer.fit()
