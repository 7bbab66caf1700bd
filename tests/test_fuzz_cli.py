"""Fuzzing ``python -m collectives train``'s command line with hypothesis: every argument list
trains (status 0), or stops with a usage error (status 2) or a data error (status 1) in one
line, ``collectives train: error: ...``, last on stderr; never another exception, a hang or a crash.

Runs ``collectives.__main__.main(["train", ...])`` in this process on one rank, on a tiny data
set with small sizes so each example takes a moment.  There an unexpected exception would abort
the launch (collectives.abort); here it fails the test instead.
"""
import contextlib
import io
import os
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import collectives.__main__ as cli
from collectives import abort
from collectives.compression import COMPRESSORS
from collectives.train.gossip import TOPOLOGIES
from collectives.train.models import MODELS
from collectives.train.optim import OPTIMIZERS, Newton
from collectives.train.options import SYNCS
from tests.launch import own_jobs

pytestmark = own_jobs

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PREFIX = "collectives train: error: "
SECONDS = 60  # an example still running after this long is a hang

# Three classes (so every model applies), 4 features, 24 rows.
TINY = "".join(f"{i % 3} 1:{i % 5} 2:{(i * 7) % 3 - 1} 3:{i / 10} {4 + i % 2}:1\n" for i in range(24))

JUNK = st.one_of(st.text(max_size=6), st.sampled_from(["--", "-", "-h", "--he", "--no-", "--epochs=2", "-x"]))


def _values(paths, valid):
    """Option -> strategy of its value text (None for a flag, which takes none).

    ``valid`` keeps to values the parser accepts (numbers still include nan, inf and
    extremes), so most jobs get past the parser and train; otherwise anything goes.
    """
    def choice(names):
        return st.sampled_from(list(names) if valid else [*names, "bogus", ""])

    def ints(low, high):
        return st.integers(low, high).map(str) if valid else st.integers(-3, high).map(str)

    count = ints(1, 4)
    real = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                     st.sampled_from(["0", "1", "0.5", "-1", "1e400"] + ([] if valid else ["x", ""])))
    return {
        "--data": st.sampled_from([paths["tiny"]] if valid else [paths["tiny"], paths["missing"], paths["dir"],
                                                                paths["empty"]]),
        "--zero-based": choice(["auto", "yes", "no"]),
        "--model": choice(MODELS),
        "--hidden": count,
        "--optimizer": choice(OPTIMIZERS),
        "--sync": choice(SYNCS),
        "--allreduce": choice(["auto", "ring", "allreduce_ring", "recursive_doubling"]),
        "--compress": choice(COMPRESSORS),
        "--epochs": count,
        "--batch": ints(1, 30),
        "--lr": real, "--momentum": real, "--tol": real, "--lam": real, "--bucket-kb": real,
        "--client-fraction": real,
        "--test-fraction": st.floats(0, 0.9).map(repr) if valid else real,
        "--schedule": choice(["const", "sqrt"]),
        "--history": count, "--local-steps": count, "--local-epochs": count, "--shards": count,
        "--servers": count, "--log-every": count,
        "--tau": st.integers(-3, 3).map(str), "--max-steps": st.integers(-3, 4).map(str),
        "--checkpoint-every": ints(0, 4),
        "--partition": choice(["iid", "skew"]),
        "--straggler": st.sampled_from(["0:2", "random:0.5:3", "1:2"] + ([] if valid else ["0:1e400", "0:0.5", "x", ""])),
        "--topology": choice(TOPOLOGIES), "--data-servers": ints(0, 2),
        "--seed": st.integers(0 if valid else -3, 2 ** 70).map(str),
        "--checkpoint": st.sampled_from([paths["ckpt"], paths["bad_out"], paths["not_ckpt"]]),
        "--metrics": st.sampled_from([paths["out"], paths["bad_out"]]),
        "--save": st.sampled_from([paths["out"], paths["bad_out"]]),
        **{flag: None for flag in ("--adam-decay", "--no-standardize", "--resume", "--reproducible", "--measure-wait",
                                   "--progress", "--no-progress", "--debug")},
    }


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Files the fuzzed options point at: the tiny data, a missing file, a directory, outputs."""
    root = tmp_path_factory.mktemp("fuzzcli")
    (root / "tiny.svm").write_text(TINY)
    (root / "empty.svm").write_text("")
    (root / "not_ckpt").mkdir()  # a checkpoint path that can be neither read nor written
    return {"tiny": str(root / "tiny.svm"), "missing": str(root / "missing.svm"), "dir": str(root),
            "empty": str(root / "empty.svm"), "not_ckpt": str(root / "not_ckpt"),
            "ckpt": str(root / "ckpt.npz"), "out": str(root / "out.json"),
            "bad_out": str(root / "no" / "such" / "dir" / "x")}


def _argv(draw, paths, valid):
    values = _values(paths, valid)
    argv = ["--data", paths["tiny"], "--epochs", "2"]  # small by default; a drawn option overrides them
    for option in draw(st.lists(st.sampled_from(sorted(values)), max_size=8)):
        value = values[option]
        argv += [option] if value is None else [option, draw(value)]
    if not valid and draw(st.booleans()):
        argv.insert(draw(st.integers(0, len(argv))), draw(JUNK))
    return argv


class Hang(Exception):
    """An example ran longer than SECONDS."""


class Bug(Exception):
    """An exception other than a usage or data error reached ``python -m collectives``."""


def _alarm(signum, frame):
    raise Hang(f"still running after {SECONDS} s")


def _bug(exc_type, exc, tb, thread=None):
    raise Bug(f"internal error: {exc_type.__name__}: {exc}") from exc


@pytest.fixture
def no_abort(monkeypatch):
    """An internal error raises Bug here instead of aborting the launch (collectives.abort)."""
    monkeypatch.setattr(abort, "install", lambda: None)
    monkeypatch.setattr(abort, "abort", _bug)
    monkeypatch.delenv("COLLECTIVES_DEBUG", raising=False)


def _outcome(argv):
    """(exit status, stderr) of ``python -m collectives train ARGV``, run in this process."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["train", *argv])
    except SystemExit as exc:  # --help exits, with the usage printed
        status = exc.code
        assert status == 0 and "usage: python -m collectives train" in out.getvalue(), (argv, status)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return status, err.getvalue()


def _check(argv, paths):
    """The job on ``argv`` exits 0, or 2 (usage) or 1 (data) with one error line, last on stderr."""
    try:
        status, err = _outcome(argv)
    finally:
        # each example starts without a checkpoint: --resume meets only this job's own
        with contextlib.suppress(FileNotFoundError):
            os.remove(paths["ckpt"])
    assert status in (0, 1, 2), (argv, status, err)
    if status:
        lines = err.splitlines()
        assert [line for line in lines if PREFIX in line] == lines[-1:], (argv, err)
        if "--debug" not in argv:
            assert "Traceback" not in err, (argv, err)
    return status, err


@FUZZ
@given(data=st.data())
def test_every_command_line_runs_or_fails_cleanly(no_abort, paths, data):
    _check(_argv(data.draw, paths, valid=False), paths)


@FUZZ
@given(data=st.data())
def test_every_parsed_command_line_trains_or_fails_cleanly(no_abort, paths, data):
    _check(_argv(data.draw, paths, valid=True), paths)


@pytest.mark.parametrize("argv,status,what", [
    (["--seed", "-1"], 2, "argument --seed: must be at least 0, got -1"),
    (["--model", "logistic"], 1, "model 'logistic' is binary but the data has 3 classes; use 'softmax'"),
    (["a\nb"], 2, "unrecognized arguments: a\\nb"),
    (["--optimizer", "newton"], 0, None),  # softmax's Hessian is singular here (redundant intercepts)
], ids=["negative-seed", "logistic-three-classes", "line-break", "newton-singular"])
def test_found_by_fuzzing(no_abort, paths, argv, status, what):
    got, err = _check(["--data", paths["tiny"], "--epochs", "2", *argv], paths)
    assert got == status, err
    assert err == (f"{PREFIX}{what}\n" if what else "")


def test_newton_on_a_singular_hessian_takes_the_least_norm_step():
    H, G = np.ones((2, 2)), np.array([1.0, 1.0])

    def f(w):
        return 0.5 * w @ H @ w + G @ w, H @ w + G

    wn, F, _ = Newton(2).iterate(np.zeros(2), 0.0, G, f, lambda w: H)
    np.testing.assert_allclose(wn, -np.linalg.pinv(H) @ G)  # the pseudo-inverse's step: [-0.5, -0.5]
    assert F == pytest.approx(-0.5)
