"""``python -m collectives train`` with tensor, pipeline and hybrid layouts, in this launch's ranks.

A layout changes who computes what, never the numbers: the objective after every epoch of
SGD must match the plain data-parallel run (models.MLP, or the same deep MLP on one stage)
to 1e-10 (the sums are only reassociated).  Bad layouts are one clear UsageError.
"""
import contextlib
import io
import json
import os

import pytest
from mpi4py import MPI

from collectives.train.errors import UsageError
from collectives.train.job import main

WORLD = MPI.COMM_WORLD
P = WORLD.Get_size()
QUICK = ["--model", "mlp", "--optimizer", "sgd", "--epochs", "2", "--hidden", "10", "--no-progress"]


def _history(shared, *args):
    """The objective after each epoch of ``python -m collectives train QUICK ARGS``, on every rank;
    ``shared``: a directory every rank sees (pytest-mpi's mpi_tmp_path)."""
    path = os.path.join(shared, "metrics.json")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*QUICK, *args, "--metrics", path]) == 0
    WORLD.Barrier()
    history = None
    if WORLD.rank == 0:
        with open(path) as f:
            history = [row["objective"] for row in json.load(f)["history"]]
    return WORLD.bcast(history)


def _layouts():
    """(layout arguments, reference arguments) that fit this launch's rank count."""
    cases = [(["--tensor-parallel", str(P)], []),
             (["--pipeline-parallel", str(P), "--layers", str(max(P, 2))], ["--layers", str(max(P, 2))]),
             (["--pipeline-parallel", str(P), "--layers", "5", "--pipeline-schedule", "gpipe",
               "--micro-batches", "3"], ["--layers", "5"]) if P <= 5 else None,
             (["--model", "softmax", "--tensor-parallel", str(P)], ["--model", "softmax"])]
    if P % 2 == 0:
        cases += [(["--data-parallel", str(P // 2), "--tensor-parallel", "2", "--allreduce", "ring"], []),
                  (["--pipeline-parallel", "2", "--layers", "3", "--micro-batches", "16"], ["--layers", "3"])]
    return [c for c in cases if c]


@pytest.mark.parametrize("layout,reference", _layouts(), ids=lambda a: " ".join(a) or "plain")
def test_layout_trains_like_data_parallel(mpi_tmp_path, layout, reference):
    want = _history(mpi_tmp_path, *reference)
    got = _history(mpi_tmp_path, *layout)
    assert got == pytest.approx(want, rel=1e-10)


DEEP = ["--layers", "3"]  # a model-parallel layout (a deep MLP on its own model axis) at any rank count


@pytest.mark.parametrize("args,what", [
    (["--tensor-parallel", str(P + 1)], f"model ranks do not divide the job's {P} ranks"),
    (["--data-parallel", str(P + 1)], f"is {P + 1} ranks, but the job has {P}"),
    (["--tensor-parallel", "2", "--pipeline-parallel", "2"], "together are not supported"),
    ([*DEEP, "--optimizer", "lbfgs"], "--optimizer sgd or adam and --sync sync"),
    ([*DEEP, "--sync", "ddp"], "--optimizer sgd or adam and --sync sync"),
    ([*DEEP, "--model", "softmax"], "not softmax"),
    ([*DEEP, "--save", "model.npz"], "--save is not supported"),
    ([*DEEP, "--reproducible"], "--reproducible is not supported"),
    ([*DEEP, "--straggler", "0:2"], "--straggler is not supported"),
] + ([(["--tensor-parallel", str(P), *DEEP], "has 2 layers")] if P > 1 else []))
def test_bad_layouts(args, what):
    argv = [*QUICK, *args]
    with pytest.raises(UsageError, match=what.replace("-", r"\-")), contextlib.redirect_stdout(io.StringIO()):
        main(argv)


@pytest.mark.mpi(min_size=3)
def test_pipeline_needs_layers():
    with pytest.raises(UsageError, match=f"needs --layers {P} or more"):
        main([*QUICK, "--pipeline-parallel", str(P)])
