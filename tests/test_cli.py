"""``python -m collectives train`` as a user meets it: launched with ``mpiexec -n 2``, each error is
one line on stderr, ``collectives train: error: ...``, with exit status 2 (usage) or 1 (data),
no traceback unless asked for, and no rank left hanging.

Each test launches its own job, so the file runs in the suite's 1-rank launch only.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from collectives.abort import EXIT_STATUS
from tests.launch import clean_env, launcher, own_jobs, program_stderr

pytestmark = own_jobs

HERE = os.path.dirname(__file__)
SAMPLE = os.path.join(HERE, "data", "sample_libsvm_data.txt")
PREFIX = "collectives train: error: "
QUICK = ["--no-progress", "--epochs", "3"]


def launch(*args, np_=2, env=None, mpmd=None):
    """Run ``python -m collectives train ARGS`` under mpiexec; the CompletedProcess.

    ``mpmd`` gives each rank its own arguments instead (one list per rank).
    """
    cmd = launcher()
    for i, rank_args in enumerate(mpmd or [args]):
        cmd += ([":"] if i else []) + ["-n", str(1 if mpmd else np_), sys.executable, "-m", "collectives",
                                       "train", *rank_args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=clean_env(**(env or {})))
    done.stderr = program_stderr(done.stderr)
    return done


def one_error(result, status, what):
    """The job failed with ``status`` and stderr is exactly one error line containing ``what``."""
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX) and what in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_malformed_line(tmp_path):
    bad = _write(tmp_path, "bad.svm", "1 1:2\n1 1:abc\n0 2:1\n")
    one_error(launch("--data", bad, *QUICK), 1, f"{bad}, line 2: could not convert string to float: 'abc'")


def test_malformed_line_debug_shows_traceback(tmp_path):
    bad = _write(tmp_path, "bad.svm", "1 1:2\n1 1:abc\n0 2:1\n")
    for result in (launch("--data", bad, "--debug", *QUICK), launch("--data", bad, *QUICK, env={"COLLECTIVES_DEBUG": "1"})):
        assert result.returncode == 1
        assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
        assert result.stderr.splitlines()[-1] == f"{PREFIX}{bad}, line 2: could not convert string to float: 'abc'"


@pytest.mark.parametrize("text,what", [
    ("", "no data rows"),
    ("# only a comment\n\n", "no data rows"),
    ("3 1:1\n3 2:1\n3 1:2 2:2\n", "a classifier needs two classes or more, every row has label 3"),
    ("1 1:1\n", "1 rows for 2 ranks"),
], ids=["empty", "comments-only", "one-class", "fewer-rows-than-ranks"])
def test_data_unfit_for_training(tmp_path, text, what):
    one_error(launch("--data", _write(tmp_path, "d.svm", text), *QUICK), 1, what)


def test_no_training_rows_left(tmp_path):
    path = _write(tmp_path, "two.svm", "0 1:1\n1 2:1\n")
    one_error(launch("--data", path, "--test-fraction", "0.9", *QUICK), 1, "leaves no training rows")


def test_missing_file(tmp_path):
    one_error(launch("--data", str(tmp_path / "nope.svm"), *QUICK), 1, "nope.svm: no such file")


def test_file_seen_by_one_rank_only(tmp_path):
    """Rank 0 can read its file, rank 1 cannot: both stop with status 1, the error said once."""
    missing = str(tmp_path / "missing.svm")
    one_error(launch(mpmd=[["--data", SAMPLE, *QUICK], ["--data", missing, *QUICK]]), 1, "missing.svm: no such file")


def test_unwritable_output_on_rank_0(tmp_path):
    """Only rank 0 writes --metrics: the others learn of its failure and stop with it."""
    one_error(launch("--metrics", str(tmp_path / "no" / "m.json"), *QUICK), 1, "m.json: No such file")


@pytest.mark.parametrize("args,what", [
    (["--optimizer", "lbfgs", "--sync", "local"], "optimizer lbfgs needs full gradients: use --sync sync"),
    (["--optimizer", "rmsprop"], "argument --optimizer: invalid choice: 'rmsprop'"),
    (["--epochs", "0"], "argument --epochs: must be at least 1, got 0"),
    (["--epochs", "many"], "argument --epochs: invalid int value: 'many'"),
    (["--test-fraction", "1"], "argument --test-fraction: must be in [0, 1), got 1"),
    (["--colour", "red"], "unrecognized arguments: --colour red"),
    (["--optimizer", "sgd", "--sync", "ps", "--servers", "2"], "servers=2 with 2 ranks"),
    (["--model", "mlp", "--optimizer", "newton"], "Newton's method needs a model with a Hessian"),
    (["--optimizer", "sgd", "--sync", "ddp", "--compress", "int8", "--checkpoint", "c.npz"],
     "--checkpoint does not hold ddp's per-bucket error-feedback state"),
], ids=["combination", "choice", "range", "type", "fraction", "unknown", "servers", "newton-mlp", "ddp-compress-ckpt"])
def test_usage_errors(args, what):
    # a usage error is found before any data is read: a missing file is not reached
    one_error(launch(*args, "--data", "/nonexistent.svm", "--no-progress"), 2, what)


def test_help_once():
    result = launch("--help")
    assert result.returncode == 0 and result.stdout.count("usage: python -m collectives train") == 1, result.stdout
    assert "--debug" in result.stdout and not result.stderr


def test_the_console_script_names_itself():
    """``collectives-train --help`` shows that name in its usage, as the command a user typed."""
    code = "import sys; from collectives.__main__ import train; sys.argv[0] = 'collectives-train'; sys.exit(train())"
    result = subprocess.run(launcher() + ["-n", "1", sys.executable, "-c", code, "--help"],
                            capture_output=True, text=True, timeout=120, env=clean_env())
    assert result.returncode == 0 and result.stdout.startswith("usage: collectives-train "), result.stdout


def test_no_test_set(tmp_path):
    """--test-fraction 0: no NaN anywhere; the job says there is no test set, and the metrics say null."""
    metrics = str(tmp_path / "m.json")
    result = launch("--test-fraction", "0", "--metrics", metrics, *QUICK)
    assert result.returncode == 0, result.stderr
    assert "nan" not in result.stdout.lower()
    lines = result.stdout.splitlines()
    assert lines[-1] == "no test set (no rows held out)"
    assert "test acc" not in result.stdout
    assert lines[1].split() == ["epoch", "step", "objective", "train", "acc", "compute", "s", "comm", "s"]
    assert json.load(open(metrics))["test_metric"] is None


def test_success_prints_everything(tmp_path):
    """A good run on the shipped sample: exit 0, nothing on stderr, the summary and a model file
    whose accuracy NumPy recomputes from the saved weights."""
    model = str(tmp_path / "model")
    result = launch("--data", SAMPLE, "--save", model, "--no-progress", "--epochs", "30", "--test-fraction", "0")
    assert result.returncode == 0 and not result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("sample_libsvm_data.txt: 100 training rows, 692 features; softmax / lbfgs / sync on 2")
    accuracy = float(lines[-2].split("train accuracy ")[1].split()[0])
    saved = np.load(model + ".npz")
    from collectives.train.libsvm import read_libsvm
    from mpi4py import MPI

    ds = read_libsvm(SAMPLE, MPI.COMM_SELF)
    X = (ds.X.toarray() - saved["mean"]) / saved["std"]
    W = saved["w"].reshape(X.shape[1] + 1, -1)
    predicted = saved["classes"][(X @ W[:-1] + W[-1]).argmax(1)]
    assert accuracy == pytest.approx(np.mean(predicted == ds.y), abs=1e-4)


def test_no_command():
    result = subprocess.run([sys.executable, "-m", "collectives"], capture_output=True, text=True, timeout=120,
                            env=clean_env())
    assert result.returncode == 2 and result.stderr.startswith("usage: python -m collectives {train,ml,bench}")


def test_bad_checkpoint(tmp_path):
    ckpt = _write(tmp_path, "ckpt.npz", "not a zip file")
    one_error(launch("--optimizer", "sgd", "--checkpoint", ckpt, "--resume", *QUICK), 1,
              f"{ckpt}: not a checkpoint of this job")


def test_diverged_training():
    """A learning rate that blows the objective up to inf: one error line saying so, status 1."""
    result = launch("--optimizer", "sgd", "--lr", "1e30", *QUICK)
    one_error(result, 1, "training diverged: the objective is not finite from epoch ")
    assert result.stderr.rstrip().endswith("try a smaller --lr (now 1e+30)"), result.stderr


def test_diverged_training_keeps_a_finite_checkpoint(tmp_path):
    """Checkpointing every step while diverging: the run fails, and the checkpoint left behind
    is the last one whose state was finite, and it loads."""
    from collectives.train import checkpoint

    path = str(tmp_path / "ckpt.npz")
    result = launch("--optimizer", "sgd", "--lr", "1e200", "--checkpoint", path, "--checkpoint-every", "1", *QUICK)
    assert result.returncode == 1 and "training diverged" in result.stderr, result.stderr
    meta, state = checkpoint.load(path)
    assert meta["clock"] >= 1
    assert all(np.isfinite(v).all() for v in state.values() if isinstance(v, np.ndarray) and v.dtype.kind == "f")


def test_directory_as_data(tmp_path):
    one_error(launch("--data", str(tmp_path), *QUICK), 1, f"{tmp_path}: not a regular file")


BUG_ON_RANK_1 = """
import sys
from mpi4py import MPI
import collectives.__main__ as cli
import collectives.train.job as job
if MPI.COMM_WORLD.Get_rank() == 1:
    job.prepare = lambda *args, **kw: 1 / 0
sys.exit(cli.main(["train", "--no-progress", "--epochs", "3"]))
"""


def test_unexpected_error_on_one_rank_aborts():
    """A bug on rank 1 while rank 0 waits in a collective: the launch ends (no hang) with the
    abort status, naming the rank and the exception in one line of ours, then the rank, host and
    traceback (a bug report needs them; issue: jobs that fail loudly)."""
    result = subprocess.run([*launcher(), "-n", "2", sys.executable, "-c", BUG_ON_RANK_1], capture_output=True,
                            text=True, timeout=300, env=clean_env())
    assert result.returncode == EXIT_STATUS, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith(PREFIX)]
    assert ours == [f"{PREFIX}internal error on rank 1: ZeroDivisionError: division by zero"], result.stderr
    assert f"collectives: rank 1 on {socket.gethostname()}: uncaught ZeroDivisionError" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
