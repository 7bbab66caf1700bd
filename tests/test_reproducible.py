"""Reproducible training (``--reproducible``): the final parameters have the same bits at every
rank count and with every all-reduce algorithm.

The reference is an independent run in one process (COMM_SELF, rank 0, broadcast): each
communicator of the launch (SELF, WORLD, an uneven half of WORLD) must reproduce its SHA-256,
with each all-reduce algorithm in turn.  The reference itself is checked against the default
mode's run to the usual floating-point tolerance, so the mode computes the same mathematics.
"""
import contextlib
import hashlib
import io
import os

import numpy as np
import pytest
from mpi4py import MPI

from collectives import Comm
from collectives.registry import names
from collectives.train import data as D
from collectives.train.errors import UsageError
from collectives.train.job import make_trainer, prepare
from collectives.train.models import Softmax
from collectives.train.options import check_options
from tests.launch import mpiexec, own_jobs

WORLD = MPI.COMM_WORLD
ALGORITHMS = names("allreduce")
RUNS = {
    "sgd": dict(optimizer="sgd", lr=0.05, momentum=0.9, batch=50, epochs=1),
    "adam": dict(optimizer="adam", lr=0.01, batch=64, epochs=1),
    "lbfgs": dict(optimizer="lbfgs", epochs=25),
    "mlp-adam": dict(model="mlp", hidden=16, optimizer="adam", lr=0.01, batch=64, epochs=1),
}


def _fit(comm, run, **options):
    """Final parameters of ``run`` on the digits over ``comm`` (a collectives.Comm)."""
    options = dict(RUNS[run], **options)
    model = options.pop("model", "softmax")
    hidden = options.pop("hidden", 64)
    data = prepare(comm, D.DIGITS, reproducible=options.get("reproducible", False))
    trainer = make_trainer(comm, data, model, hidden, progress=False, log_every=10 ** 6, **options)
    with contextlib.redirect_stdout(io.StringIO()):
        return trainer.fit()


def _sha(w):
    return hashlib.sha256(np.ascontiguousarray(w, np.float64).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def references():
    """{run: (SHA-256, parameters)} of the reproducible run in one process (rank 0's, broadcast)."""
    out = None
    if WORLD.rank == 0:
        self_comm = Comm(MPI.COMM_SELF)
        out = {}
        for run in RUNS:
            w = _fit(self_comm, run, reproducible=True)
            # the same mathematics as the default mode, to rounding
            np.testing.assert_allclose(w, _fit(self_comm, run), rtol=1e-7, atol=1e-10)
            out[run] = _sha(w)
        self_comm.Free()
    return WORLD.bcast(out)


@pytest.mark.parametrize("run", list(RUNS))
def test_bit_identical_at_any_rank_count_and_algorithm(comm, references, run):
    """Every algorithm at this communicator's size gives the single-process bits."""
    algorithms = ALGORITHMS if run in ("sgd", "lbfgs") else ALGORITHMS[::3]  # keep the launch short
    for algorithm in algorithms:
        w = _fit(comm, run, reproducible=True, allreduce=algorithm)
        assert _sha(w) == references[run], f"{run} with {algorithm} at {comm.size} ranks"


@pytest.mark.serial
def test_environment_variable_turns_it_on(monkeypatch):
    monkeypatch.setenv("COLLECTIVES_REPRODUCIBLE", "1")
    assert check_options({}, Softmax, 2)["reproducible"] is True
    assert check_options({"reproducible": False}, Softmax, 2)["reproducible"] is False
    monkeypatch.setenv("COLLECTIVES_REPRODUCIBLE", "0")
    assert check_options({}, Softmax, 2)["reproducible"] is False


@pytest.mark.serial
@pytest.mark.parametrize("options,what", [
    (dict(sync="ddp", optimizer="sgd"), "--sync sync only, not ddp"),
    (dict(sync="local", optimizer="sgd"), "--sync sync only, not local"),
    (dict(sync="ps", optimizer="sgd"), "--sync sync only, not ps"),
    (dict(optimizer="newton"), "not newton"),
    (dict(optimizer="sgd", compress="topk"), "cannot --compress"),
], ids=["ddp", "local", "ps", "newton", "compress"])
def test_unsupported_combinations_are_usage_errors(options, what):
    with pytest.raises(UsageError, match=what):
        check_options(dict(options, reproducible=True), Softmax, 2)


def test_skewed_partition_is_a_usage_error(comm):
    with pytest.raises(UsageError, match="cannot --partition skew"):
        prepare(comm, D.DIGITS, partition="skew", reproducible=True)


def test_shards_live_on_one_rank_each(comm):
    """by_shard deals every training row, and each shard to exactly one rank."""
    data = prepare(comm, D.DIGITS, reproducible=True)
    rows = comm.comm.allgather(data.train.rows)
    assert sorted(np.concatenate(rows).tolist()) == list(range(data.n_train))
    holders = [set(D.shard_of(r, data.n_train).tolist()) for r in rows]
    for s in range(D.SHARDS):
        assert sum(s in h for h in holders) <= 1


@pytest.mark.serial
def test_tree_sum_is_the_stated_tree():
    # halves added elementwise, the odd one out carried: ((a0 + a3) + (a2 + a5)) + ((a1 + a4) + a6)
    a = np.array([1e16, 1.0, 1.0, 1.0, 1.0, 1.0, -1e16])
    expected = ((a[0] + a[3]) + (a[2] + a[5])) + ((a[1] + a[4]) + a[6])
    assert expected != sum(a)  # the order shows in the bits
    assert D.tree_sum(a) == expected
    assert D.tree_sum(np.array([[-0.0, 2.0]]))[1] == 2.0


@own_jobs
def test_command_line_np1_and_np3_save_the_same_bits(tmp_path):
    saved = []
    for n in (1, 3):
        path = tmp_path / f"w{n}.npz"
        env = {"COLLECTIVES_REPRODUCIBLE": "1"} if n == 3 else {}
        flag = [] if n == 3 else ["--reproducible"]  # the flag and the variable, one each
        result = mpiexec(n, ["-m", "collectives", "train", "--optimizer", "sgd", "--epochs", "1", "--no-progress",
                             "--allreduce", "ring" if n == 3 else "auto", "--save", str(path), *flag],
                         timeout=300, env=dict(env, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1")))
        assert result.returncode == 0, result.stderr
        with np.load(path) as f:
            saved.append(f["w"].tobytes())
    assert saved[0] == saved[1]
