"""An uncaught exception on one rank ends the whole job quickly, with the rank, host and
traceback on stderr and a non-zero exit status, instead of leaving the other ranks waiting."""
import socket
import time

import pytest

from collectives.abort import EXIT_STATUS
from tests.launch import mpiexec, own_jobs

pytestmark = own_jobs

# Rank 1 fails while rank 0 waits in one of our collectives (blocked without the GIL).
FAILING = """
import time
from mpi4py import MPI
import numpy as np
import collectives
{install}
comm = collectives.Comm(MPI.COMM_WORLD)
if comm.rank == 1:
    time.sleep(0.3)
    {fail}
comm.Allreduce(MPI.IN_PLACE, np.ones(4))
"""

RAISE = "raise ValueError('boom on purpose')"
IN_THREAD = ("import threading; t = threading.Thread(target=lambda: 1 / 0, name='worker'); "
             "t.start(); t.join(); time.sleep(30)")


# The bound on how long an aborted job may take to end: seconds when the machine is quiet, but
# CI may run this while other work loads the cores.
BOUND_S = 60


def _run(args, timeout=2 * BOUND_S):
    start = time.monotonic()
    done = mpiexec(2, args, timeout=timeout)
    return done, time.monotonic() - start


def _assert_aborted(done, seconds, exc_name):
    assert done.returncode == EXIT_STATUS, (done.returncode, done.stderr)
    assert seconds < BOUND_S, f"took {seconds:.1f} s to end the job: {done.stderr}"
    assert f"collectives: rank 1 on {socket.gethostname()}: uncaught {exc_name}" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr, done.stderr


@pytest.mark.parametrize("form", ["import", "runner"])
def test_exception_on_one_rank_aborts_the_job(form):
    install = "collectives.abort_on_error()" if form == "import" else ""
    code = FAILING.format(install=install, fail=RAISE)
    args = ["-c", code] if form == "import" else ["-m", "collectives.run", "-c", code]
    done, seconds = _run(args)
    _assert_aborted(done, seconds, "ValueError")
    assert "boom on purpose" in done.stderr


def test_exception_in_a_thread_aborts_the_job():
    done, seconds = _run(["-c", FAILING.format(install="collectives.abort_on_error()", fail=IN_THREAD)])
    _assert_aborted(done, seconds, "ZeroDivisionError")
    assert "in thread 'worker'" in done.stderr


def test_runner_aborts_on_nonzero_sys_exit():
    done, seconds = _run(["-m", "collectives.run", "-c", FAILING.format(install="", fail="raise SystemExit(5)")])
    _assert_aborted(done, seconds, "SystemExit")


def test_runner_runs_a_clean_program_to_completion(tmp_path):
    prog = tmp_path / "prog.py"
    # Each rank writes its own file: the two ranks' stdout interleave at arbitrary points.
    prog.write_text("import pathlib, sys\nfrom mpi4py import MPI\nimport collectives\n"
                    "c = collectives.Comm(MPI.COMM_WORLD)\nc.Barrier()\n"
                    f"pathlib.Path({str(tmp_path)!r}, f'rank{{c.rank}}').write_text(repr(sys.argv[1:]))\n")
    done, _ = _run(["-m", "collectives.run", str(prog), "a", "b"])
    assert done.returncode == 0, done.stderr
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["['a', 'b']"] * 2
