"""Stragglers (--straggler): the slowdown itself, convergence of every synchronisation with a
slow rank, the synchronisation-wait metric, and the stale-synchronous bound as measured.

Timing is never asserted (the machine is shared); what a straggler must not change is: the
result of the deterministic synchronisations, convergence of the others, and the bound
tau on the staleness of the parameters every parameter-server worker reads.
"""
import contextlib
import io

import numpy as np
import pytest

from collectives.train.errors import UsageError
from collectives.train.job import main, make_trainer
from collectives.train import straggler
from collectives.train.straggler import MAX_FACTOR, Stragglers, check, parse
from train_util import SERVER_AND_WORKER, fit, world_fixture

SGD = dict(optimizer="sgd", lr=0.05, momentum=0.9, epochs=4)
world = world_fixture()


def slow_rank(comm):
    """The rank made slow: the last one (a parameter server's first server when servers = 1)."""
    return comm.size - 1


@pytest.mark.serial
def test_specs_parse_and_bad_ones_are_usage_errors():
    assert parse("3:2.5") == (3, 1.0, 2.5)
    assert parse("random:0.25:4") == (None, 0.25, 4.0)
    assert check(["0:2", "random:0.1:3"], 2) == ("0:2", "random:0.1:3")
    assert check(None, 1) == ()
    for spec, what in [("2:3", "rank 2 is not in 0 .. 1"), ("0:0.5", "factor"), (f"0:{MAX_FACTOR * 2}", "factor"),
                       ("0:nan", "factor"), ("random:1.5:2", "probability"), ("random:2", "expected"),
                       ("x:2", "expected"), ("0", "expected"), ("-1:2", "rank -1")]:
        with pytest.raises(UsageError, match=what):
            check([spec], 2)
    with pytest.raises(UsageError, match="once"):
        check(["0:2", "0:3"], 2)
    with pytest.raises(UsageError, match="once"):
        check(["random:0.1:2", "random:0.2:2"], 2)


class FakeTime:
    """perf_counter() and sleep() of a clock that moves only when told, recording the sleeps."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.serial
def test_slowdown_is_the_factor_of_the_measured_time(monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(straggler, "time", clock)
    slow = Stragglers(["0:4"], 0, seed=0)
    start = clock.now
    clock.now += 0.25  # a computation of 0.25 s
    assert slow.stretch(slow.slowdown(), start) == start + 1.0  # it now took 4 times as long
    assert clock.slept == [0.75]
    other = Stragglers(["0:4"], 1, seed=0)
    assert not other and other.slowdown() == 1
    assert other.stretch(1.0, clock.now - 0.5) == clock.now and clock.slept == [0.75]  # no sleep at factor 1


@pytest.mark.serial
def test_random_slowdowns_are_seeded_draws():
    fixed = Stragglers(["1:3", "random:0.5:2"], 1, seed=7)
    factors = [fixed.slowdown() for _ in range(2000)]
    assert set(factors) == {3.0, 6.0}  # the fixed factor, times the random one half of the time
    assert 0.45 < factors.count(6.0) / len(factors) < 0.55
    again = Stragglers(["1:3", "random:0.5:2"], 1, seed=7)
    assert [again.slowdown() for _ in range(2000)] == factors  # seeded: a run repeats


@pytest.mark.parametrize("options", [dict(sync="sync"), dict(sync="ddp", model="mlp", hidden=16, bucket_kb=1),
                                     dict(sync="local", local_steps=4), dict(sync="gossip"),
                                     dict(sync="fedavg", client_fraction=0.5, local_epochs=2, epochs=8),
                                     pytest.param(dict(sync="ps", tau=0), marks=SERVER_AND_WORKER)],
                         ids=["bsp", "ddp", "local", "gossip", "fedavg", "ps-tau0"])
def test_a_straggler_leaves_deterministic_synchronisations_unchanged(world, options):
    """A slow rank only delays these: the same parameters, bit for bit, and converged."""
    comm, data = world
    options = dict(SGD, **options)
    plain, w_plain = fit(comm, data, **options)
    slow, w_slow = fit(comm, data, straggler=[f"{slow_rank(comm)}:3", "random:0.3:2"], **options)
    np.testing.assert_array_equal(w_slow, w_plain)
    assert slow.final[0] < 0.15
    if options["sync"] == "ps":
        if comm.rank == comm.size - 1:
            return  # the server reports no epochs
    else:
        assert plain.clock.total["wait"] == 0  # measured only on request, or with a straggler
    rows = [r["wait"] for r in slow.history]
    assert len(rows) == options["epochs"] and rows == sorted(rows) and rows[0] >= 0


@SERVER_AND_WORKER
@pytest.mark.parametrize("tau", [-1, 1, 3], ids=["async", "ssp1", "ssp3"])
def test_parameter_server_converges_with_a_straggler(world, tau):
    comm, data = world
    # the first worker slow: the others run ahead of it as far as tau lets them
    trainer, w = fit(comm, data, sync="ps", tau=tau, straggler=["0:4"], **SGD)
    assert trainer.final[0] < (0.2 if tau < 0 else 0.15)  # asynchronous: see test_train's bound
    np.testing.assert_array_equal(comm.comm.bcast(w), w)


@SERVER_AND_WORKER
@pytest.mark.parametrize("tau", [0, 1, 2, 4])
def test_no_worker_reads_parameters_more_than_tau_steps_old(world, tau):
    """The servers report with each pull the last clock applied to the shard; every step's
    staleness (its clock - 1 - that clock) is at most tau, on every worker, over a whole run."""
    comm, data = world
    servers = 1 if comm.size < 4 else 2
    trainer, _ = fit(comm, data, sync="ps", tau=tau, servers=servers, straggler=["0:5"],
                     **dict(SGD, epochs=2))
    workers = comm.size - servers
    seen = comm.comm.allgather(trainer.staleness if comm.rank < workers else None)[:workers]
    steps = trainer.n and -(-trainer.n // trainer.o["batch"]) * 2
    for staleness in seen:
        assert len(staleness) == steps + 1  # the first pull, then one per step
        assert staleness[0] == 0 and min(staleness) >= 0
        assert max(staleness) <= tau
    if tau == 0:
        assert all(s == 0 for st in seen for s in st)
    if comm.rank < workers:
        assert trainer.metrics()["max_staleness"] == max(trainer.staleness)


def test_command_line_reports_the_wait(world):
    comm, _ = world
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--optimizer", "sgd", "--epochs", "2", "--straggler", f"{slow_rank(comm)}:2", "--no-progress"])
    if comm.rank == 0:
        lines = out.getvalue().splitlines()
        assert lines[1].split()[-1] == "s" and "wait" in lines[1]
        assert "waiting" in lines[-2]
    with pytest.raises(UsageError, match="ddp"):
        make_trainer(comm, world[1], optimizer="sgd", sync="ddp", measure_wait=True)
    with pytest.raises(UsageError, match=f"rank {comm.size} is not in"):
        make_trainer(comm, world[1], optimizer="sgd", straggler=[f"{comm.size}:2"])
