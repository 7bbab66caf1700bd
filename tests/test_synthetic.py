"""The built-in synthetic problem (--data synthetic:RxFxC): size, determinism, and compressed training on it.

References: the whole problem generated on COMM_SELF (rows must not depend on the rank count),
and the softmax objective at zero parameters, log(classes) (the first SGD epoch must get below it).
"""
import numpy as np
import pytest
from mpi4py import MPI

from collectives.train import data as D
from collectives.train.errors import UsageError
from collectives.train.job import make_trainer, prepare
from tests.train_util import fit, world_fixture

world = world_fixture()
SPEC = "synthetic:400x10000x100:3"


@pytest.fixture(scope="module")
def prepared(world):
    comm, _ = world
    return prepare(comm, SPEC, test_fraction=0.0)


def test_million_parameters(world, prepared):
    comm, _ = world
    trainer = make_trainer(comm, prepared, "softmax", optimizer="sgd")
    assert prepared.n_features == 10000 and len(prepared.classes) == 100
    assert trainer.model.size == (10000 + 1) * 100 >= 10**6


def test_rows_do_not_depend_on_rank_count():
    comm = MPI.COMM_WORLD
    spec = D.synthetic_spec(SPEC)
    mine = D.synthetic(comm, *spec)
    whole = D.synthetic(MPI.COMM_SELF, *spec)
    assert np.array_equal(mine.X, whole.X[mine.rows]) and np.array_equal(mine.y, whole.y[mine.rows])
    assert comm.allreduce(len(mine)) == 400 and mine.X.shape[1] == 10000
    again = D.synthetic(comm, *spec)
    assert np.array_equal(again.X, mine.X)
    other = D.synthetic(MPI.COMM_SELF, *D.synthetic_spec("synthetic:400x10000x100:4"))
    assert not np.array_equal(other.X, whole.X)


@pytest.mark.serial
@pytest.mark.parametrize("name", ["synthetic:10x5", "synthetic:10x5x1", "synthetic:0x5x3", "synthetic:ax5x3"])
def test_bad_spec_is_a_usage_error(name):
    with pytest.raises(UsageError, match="synthetic"):
        D.synthetic_spec(name)


@pytest.mark.parametrize("compress", ["int8", "topk"])
def test_compressed_training_decreases_objective(world, prepared, compress):
    comm, _ = world
    trainer, w = fit(comm, prepared, optimizer="sgd", lr=0.01, batch=64, epochs=1, compress=compress)
    assert trainer.final[0] < 0.9 * np.log(100), trainer.final[0]
    assert all((other == w).all() for other in comm.comm.allgather(w))


def test_native_allreduce_and_error_feedback_switch(world, prepared):
    comm, _ = world
    options = dict(optimizer="sgd", lr=0.01, batch=64, epochs=1)
    _, w = fit(comm, prepared, **options)
    _, w_native = fit(comm, prepared, allreduce="native", **options)
    np.testing.assert_allclose(w_native, w, rtol=1e-9, atol=1e-12)
    plain, _ = fit(comm, prepared, compress="topk", error_feedback=False, **options)
    compression = plain.ctx.sums.compression
    assert list(compression.states.values()) == [None] and not compression.compressor.error_feedback
