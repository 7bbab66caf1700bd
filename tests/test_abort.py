"""A failing job ends by itself: an uncaught exception or a non-zero sys.exit on one rank of a
plain ``mpiexec python prog.py`` that made a Comm ends the whole job quickly, with the rank,
host and traceback on stderr and a non-zero exit status (124 for a stall), instead of
leaving the other ranks waiting; a caught error stays the program's."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from collectives.abort import EXIT_STATUS
from collectives.watchdog import EXIT_STATUS as STALLED
from tests.launch import ROOT, clean_env, launcher, mpiexec, own_jobs

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


def _run(args, timeout=2 * BOUND_S, ranks=2, env=None):
    start = time.monotonic()
    done = mpiexec(ranks, args, timeout=timeout, env=env)
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


# Rank 1 fails while its progress thread is inside MPI, waiting for a rank 0 that never joins.
PENDING = """
import time
from mpi4py import MPI
import numpy as np
import collectives
comm = collectives.Comm(MPI.COMM_WORLD)
if comm.rank == 1:
    request = comm.Iallreduce(MPI.IN_PLACE, np.ones(1 << 16))
    time.sleep(0.3)
    assert not request.Test()
    raise ValueError('boom with a call in flight')
time.sleep(2 * {bound})
"""


def test_a_rank_with_a_call_in_flight_ends_the_job():
    """The progress thread's wait inside MPI does not keep the failing rank alive."""
    done, seconds = _run(["-c", PENDING.format(bound=BOUND_S)])
    _assert_aborted(done, seconds, "ValueError")
    assert "boom with a call in flight" in done.stderr


def test_a_plain_program_ends_on_an_exception_with_nothing_set():
    """mpiexec -n 3 python prog.py, no setting, no runner: rank 1's ValueError ends the job."""
    done, seconds = _run(["-c", FAILING.format(install="", fail=RAISE)], ranks=3)
    _assert_aborted(done, seconds, "ValueError")
    assert "boom on purpose" in done.stderr


def test_a_plain_program_ends_on_a_nonzero_sys_exit():
    done, seconds = _run(["-c", FAILING.format(install="import sys", fail="sys.exit(3)")], ranks=3)
    assert done.returncode == EXIT_STATUS, (done.returncode, done.stderr)
    assert seconds < BOUND_S and f"collectives: rank 1 on {socket.gethostname()}: sys.exit(3)" in done.stderr


# Rank 2 skips the first of two all-reduces; the others stall in it after the limit.
SKIPPED = """
from mpi4py import MPI
import numpy as np
import collectives
comm = collectives.Comm(MPI.COMM_WORLD)
if comm.rank != 2:
    {call}
comm.Allreduce(MPI.IN_PLACE, np.ones(4))
"""


def test_a_skipped_call_ends_the_job_naming_the_missing_rank():
    done, seconds = _run(["-c", SKIPPED.format(call="comm.Allreduce(MPI.IN_PLACE, np.ones(4))")], ranks=3,
                         env={"COLLECTIVES_TIMEOUT": "2"})
    assert done.returncode == STALLED, (done.returncode, done.stderr)
    assert seconds < BOUND_S, done.stderr
    assert "uncaught StallError" in done.stderr and "for rank(s) 2" in done.stderr, done.stderr


CAUGHT = """
from mpi4py import MPI
import numpy as np
import collectives
comm = collectives.Comm(MPI.COMM_WORLD)
if comm.rank != 2:
    try:
        comm.Allreduce(MPI.IN_PLACE, np.ones(4))
    except collectives.watchdog.StallError:
        print("caught on rank", comm.rank, flush=True)
fresh = collectives.Comm(MPI.COMM_WORLD)
out = np.ones(4)
fresh.Allreduce(MPI.IN_PLACE, out)
assert (out == 3).all()
print("done", flush=True)
"""


def test_a_caught_stall_stays_the_programs():
    """Ranks 0 and 1 catch their StallError, then all three all-reduce on a fresh Comm and
    leave normally: nothing aborts behind the program's back."""
    done, _ = _run(["-c", CAUGHT], ranks=3, env={"COLLECTIVES_TIMEOUT": "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("caught on rank") == 2 and done.stdout.count("done") == 3, done.stdout


def test_the_default_limit_is_in_force():
    done, _ = _run(["-c", "from mpi4py import MPI\nimport collectives\nc = collectives.Comm(MPI.COMM_WORLD)\n"
                    "print(c.timeout, c.on_timeout, flush=True)"], ranks=1)
    assert done.returncode == 0 and done.stdout.split() == ["1800.0", "raise"], (done.stdout, done.stderr)


def test_no_limit_keeps_waiting():
    """COLLECTIVES_TIMEOUT=0: the skipped call waits until the outer limit; then the job is
    killed, process group and all."""
    code = SKIPPED.format(call="comm.Allreduce(MPI.IN_PLACE, np.ones(4))")
    job = subprocess.Popen([*launcher(), "-n", "3", sys.executable, "-c", code], cwd=ROOT,
                           env=clean_env(COLLECTIVES_TIMEOUT="0"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            job.communicate(timeout=8)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()


def test_the_switch_keeps_pythons_handling():
    """COLLECTIVES_ABORT_ON_ERROR=0 with every rank failing alike: Python's own exit status 1,
    and no abort message."""
    done, _ = _run(["-c", "from mpi4py import MPI\nimport collectives\nc = collectives.Comm(MPI.COMM_WORLD)\n"
                    "raise ValueError('every rank')"], env={"COLLECTIVES_ABORT_ON_ERROR": "0"})
    assert done.returncode != 0 and "aborting the job" not in done.stderr and "every rank" in done.stderr


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
