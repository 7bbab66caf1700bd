"""Fuzzing ``python -m collectives train``'s command line with hypothesis: every argument list
trains, or stops with a usage error (status 2) or a data error (status 1) whose message is one
line; never another exception, a hang or a crash.

Runs the job in this process (collectives.train.job.main, which is what ``python -m collectives
train`` calls) on one rank, on a tiny data set with small sizes so each example takes a moment.
Another exception would reach collectives.__main__ as an internal error and abort the launch.
"""
import contextlib
import io
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from mpi4py import MPI

from collectives.compression import COMPRESSORS
from collectives.train.errors import DataError, UsageError
from collectives.train.job import main
from collectives.train.models import MODELS
from collectives.train.optim import OPTIMIZERS
from collectives.train.trainer import SYNCS

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="one process; runs in the 1-rank launch")

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
        "--seed": st.integers(0 if valid else -3, 2 ** 70).map(str),
        "--checkpoint": st.sampled_from([paths["ckpt"], paths["bad_out"], paths["tiny"]]),
        "--metrics": st.sampled_from([paths["out"], paths["bad_out"]]),
        "--save": st.sampled_from([paths["out"], paths["bad_out"]]),
        **{flag: None for flag in ("--adam-decay", "--no-standardize", "--resume", "--reproducible",
                                   "--progress", "--no-progress", "--debug")},
    }


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Files the fuzzed options point at: the tiny data, a missing file, a directory, outputs."""
    root = tmp_path_factory.mktemp("fuzzcli")
    (root / "tiny.svm").write_text(TINY)
    (root / "empty.svm").write_text("")
    return {"tiny": str(root / "tiny.svm"), "missing": str(root / "missing.svm"), "dir": str(root),
            "empty": str(root / "empty.svm"), "ckpt": str(root / "ckpt.npz"), "out": str(root / "out.json"),
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


def _alarm(signum, frame):
    raise Hang(f"still running after {SECONDS} s")


def _outcome(argv):
    """'ran', 'help', or the UsageError / DataError raised; anything else propagates."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0
        return "ran"
    except SystemExit as exc:  # --help alone exits, with status 0 and the usage printed
        assert exc.code == 0 and "usage: python -m collectives train" in out.getvalue(), (argv, exc.code)
        return "help"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _check(argv, paths):
    """The job on ``argv`` ran, printed help, or raised a one-line UsageError (2) / DataError (1)."""
    try:
        _outcome(argv)
    except (UsageError, DataError) as exc:
        assert exc.status == (2 if isinstance(exc, UsageError) else 1)
        # collectives.__main__ prints "collectives train: error: <message>": one line
        assert str(exc) and "\n" not in str(exc), (argv, str(exc))
    finally:
        # each example starts without a checkpoint: --resume meets only this job's own
        with contextlib.suppress(FileNotFoundError):
            os.remove(paths["ckpt"])


@FUZZ
@given(data=st.data())
def test_every_command_line_runs_or_fails_cleanly(paths, data):
    _check(_argv(data.draw, paths, valid=False), paths)


@FUZZ
@given(data=st.data())
def test_every_parsed_command_line_trains_or_fails_cleanly(paths, data):
    _check(_argv(data.draw, paths, valid=True), paths)
