"""Smoke test of an installed collectives (make test-wheel, make test-site-mpi): run it under
``mpiexec -n 2`` from outside the repository with PYTHONPATH unset.

It fails unless the package imports from the environment's site-packages with its native
engine, which gives native MPI's all-reduce; the tuning table, the benchmark's base table and
the bundled digits installed with it load (auto's choice, a short training job, a benchmark
run); the two commands are installed; and nothing is installed at the top level but
collectives.
"""
import contextlib
import importlib.util
import io
import os
import sysconfig

import numpy as np
from mpi4py import MPI

import collectives
from collectives import registry, tuning
from collectives.bench import cli, tune
from collectives.comm import NATIVE
from collectives.train import job

world = MPI.COMM_WORLD
site = sysconfig.get_paths()["platlib"]


def check(ok, what):
    """Stop the whole launch when ``ok`` is false: the other ranks may be waiting in a collective."""
    if not ok:
        print(f"installed collectives, rank {world.rank}: {what}", flush=True)
        world.Abort(1)


check(os.path.commonpath([collectives.__file__, site]) == site,
      f"collectives imported from {collectives.__file__}, not from {site}")
check(importlib.util.find_spec("bench") is None and not os.path.exists(os.path.join(site, "bench")),
      f"a top-level bench is installed in {site}")
check(NATIVE, "the native engine (collectives._engine) did not load")
for command in ("collectives-bench", "collectives-train"):
    check(os.path.exists(os.path.join(sysconfig.get_paths()["scripts"], command)), f"no {command} command")

x = np.arange(1 << 12, dtype=np.float32) + world.rank
want, got = np.empty_like(x), np.empty_like(x)
world.Allreduce(x, want)
comm = collectives.Comm(world)
for algorithm in (None, "ring", "recursive_doubling"):
    got.fill(np.nan)
    comm.Allreduce(x, got, **({"algorithm": algorithm} if algorithm else {}))
    check(np.array_equal(got, want), f"Allreduce with algorithm={algorithm} differs from MPI's")
check(os.path.exists(tuning.DEFAULT_PATH), f"no tuning table at {tuning.DEFAULT_PATH}")
registry.load_table(tuning.DEFAULT_PATH)
registry.load_table(tune.BASE)
explained = comm.explain("allreduce", x.size, "float32")
comm.Free()

with contextlib.redirect_stdout(io.StringIO()) as trained:
    status = job.main(["--optimizer", "lbfgs", "--epochs", "5", "--no-progress"])
check(status == 0 and ("accuracy" in trained.getvalue() or world.rank), f"training on the bundled digits: {status}")
with contextlib.redirect_stdout(io.StringIO()) as measured:
    status = cli.main(["allreduce", "-m", "8:64", "-i", "2", "-x", "1", "--budget", "0.05", "--no-json", "-q"])
check(status == 0 and ("# Avg bus bandwidth" in measured.getvalue() or world.rank),
      f"collectives-bench allreduce: {status}")
if world.rank == 0:
    library = " ".join(MPI.Get_library_version().splitlines()[0].split(",")[0].split())
    print(f"installed collectives {collectives.__version__} at {os.path.dirname(collectives.__file__)}, "
          f"{library}, np={world.size}: all-reduce equals MPI's "
          f"(auto: {explained}); tuning table, digits and benchmark ok")
