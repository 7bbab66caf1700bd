"""Data servers (--data-servers K): the same minibatches, and so the same parameters, as
partitioned reading with the same seed; the slices of a minibatch; options that cannot apply."""
import numpy as np
import pytest

from collectives.train.data import DIGITS
from collectives.train.dataserver import worker_rows
from collectives.train.errors import DataError, UsageError
from collectives.train.job import make_trainer, prepare
from train_util import fit, world_fixture

world = world_fixture(test_fraction=0.2)


@pytest.mark.serial
@pytest.mark.parametrize("workers", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 32, 33])
def test_worker_slices_cover_the_minibatch_in_order(n, workers):
    batch = np.random.default_rng(n).permutation(100)[:n]
    slices = [worker_rows(batch, workers, w) for w in range(workers)]
    np.testing.assert_array_equal(np.concatenate(slices), batch)
    assert max(map(len, slices)) - min(map(len, slices)) <= 1


def _servers(size):
    return sorted({1, size - 1})


# The sums of a step's gradient are grouped differently (by worker slice, not by the rank that
# read a row), so parameters agree to rounding: 1e-12 for SGD; Adam divides by sqrt(v), which
# magnifies the rounding of near-zero gradient components (measured 1.4e-12 after 2 epochs).
@pytest.mark.parametrize("options,atol", [(dict(optimizer="sgd", lr=0.05, momentum=0.9, batch=32, epochs=3), 1e-12),
                                          (dict(optimizer="adam", lr=0.01, batch=50, epochs=2), 1e-10),
                                          (dict(optimizer="sgd", lr=0.05, batch=64, epochs=3, max_steps=40), 1e-12)],
                         ids=["sgd-momentum", "adam", "max-steps"])
def test_same_parameters_as_partitioned_reading(world, options, atol):
    comm, data = world
    if comm.size < 2:
        pytest.skip("data servers need a server and a worker")
    partitioned, w_part = fit(comm, data, **options)
    for servers in _servers(comm.size):
        served, w = fit(comm, data, data_servers=servers, **options)
        np.testing.assert_allclose(w, w_part, rtol=1e-12, atol=atol)
        np.testing.assert_array_equal(comm.comm.bcast(w), w)  # the same model on every rank
        assert served.t == partitioned.t
        assert len(served.history) == len(partitioned.history)
        for mine, theirs in zip(served.history, partitioned.history):
            assert mine["objective"] == pytest.approx(theirs["objective"], rel=1e-12)
            assert mine["test"] == theirs["test"]
        assert served.final[0] == pytest.approx(partitioned.final[0], rel=1e-12)


def test_options_that_cannot_serve(world):
    comm, data = world
    size = comm.size
    cases = [(dict(data_servers=size), "1 <= servers < ranks"),
             (dict(data_servers=1, sync="local"), "--sync sync"),
             (dict(data_servers=1, optimizer="lbfgs"), "sgd or adam"),
             (dict(data_servers=1, optimizer="sgd", compress="topk"), "--compress"),
             (dict(data_servers=1, optimizer="sgd", reproducible=True), "--reproducible")]
    for options, what in cases[:1] if size == 1 else cases:  # one rank: no server count is valid
        with pytest.raises(UsageError, match=what):
            make_trainer(comm, data, **options)
    if size > 1:
        sparse = prepare(comm, DIGITS, test_fraction=0.2, standardize=False)
        with pytest.raises(DataError, match="dense rows"):
            fit(comm, sparse, optimizer="sgd", data_servers=1)
