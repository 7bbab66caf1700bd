"""``python -m collectives.run``'s supervisor: a rank a signal kills is named by rank, host and
pid; exit statuses and the launcher's signals pass through; the program dies with it."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from collectives import supervise
from tests.launch import ROOT, clean_env, mpiexec, own_jobs

# The program prints its pid and its parent's (the supervisor), then does {then}.
PROGRAM = """
import os, signal, sys, time
from mpi4py import MPI
# one write, so the ranks' lines cannot interleave in the launcher's output
os.write(1, ("rank %d pid %d ppid %d\\n" % (MPI.COMM_WORLD.rank, os.getpid(), os.getppid())).encode())
{then}
"""
BOUND_S = 60  # how long a job may take to end (a loaded CI machine included)


@pytest.mark.serial
@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "collectives.run", "prog.py"], True),
    (["python", "-u", "-X", "dev", "-m", "collectives.run", "-c", "pass"], True),
    (["python", "-mcollectives.run", "prog.py"], True),
    (["python", "-m", "collectives", "train"], False),
    (["python", "-m", "collectives.runner"], False),
    (["python", "prog.py", "-m", "collectives.run"], False),
    (["python", "-c", "import collectives", "-m", "collectives.run"], False),
    ([], False),
])
def test_requested_only_by_the_runner(argv, expected):
    assert supervise.requested(argv) is expected


@pytest.mark.serial
def test_report_names_rank_host_pid_and_signal():
    assert supervise.report(3, 1234, signal.SIGSEGV, host="node7") == (
        "collectives: rank 3 on node7 (pid 1234) was killed by signal 11 (SIGSEGV); exit status 139\n")


def pids(stdout):
    """rank -> (pid, ppid) from the program's first lines."""
    return {int(r): (int(p), int(pp)) for r, p, pp in re.findall(r"^rank (\d+) pid (\d+) ppid (\d+)$", stdout, re.M)}


@own_jobs
def test_a_rank_killed_by_a_signal_is_named():
    # rank 1 dies of SIGSEGV while rank 0 waits for it in a barrier
    # (after a first barrier and a pause, so the launcher has passed on rank 1's first line)
    then = ("MPI.COMM_WORLD.Barrier()\nif MPI.COMM_WORLD.rank == 1:\n    time.sleep(0.5)\n"
            "    os.kill(os.getpid(), signal.SIGSEGV)\nMPI.COMM_WORLD.Barrier()")
    done = mpiexec(2, ["-m", "collectives.run", "-c", PROGRAM.format(then=then)], timeout=2 * BOUND_S)
    assert done.returncode != 0, done
    assert 1 in pids(done.stdout), (done.stdout, done.stderr)
    pid = pids(done.stdout)[1][0]
    line = (f"collectives: rank 1 on {socket.gethostname()} (pid {pid}) was killed by signal "
            f"{int(signal.SIGSEGV)} (SIGSEGV); exit status {128 + signal.SIGSEGV}")
    assert line in done.stderr, done.stderr
    assert "rank 0 on" not in done.stderr, done.stderr


# Without MPI or a launcher: supervise.py loaded on its own, its start() run, then {then}.
ALONE = """
import importlib.util, os, signal, sys, time
spec = importlib.util.spec_from_file_location("supervise", {path!r})
supervise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(supervise)
supervise.start()
print("rank 5 pid", os.getpid(), "ppid", os.getppid(), flush=True)
{then}
"""


def start(then):
    """ALONE as rank 5 in a session of its own: (Popen, pid, ppid of the program)."""
    code = ALONE.format(path=supervise.__file__, then=then)
    proc = subprocess.Popen([sys.executable, "-c", code], env=clean_env(PMI_RANK="5"), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    pid, ppid = pids(proc.stdout.readline())[5]
    return proc, pid, ppid


def finish(proc):
    """(status, stdout, stderr) of ``proc``, killed if it outlives BOUND_S."""
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    finally:
        proc.kill()
    return proc.returncode, out, err


@own_jobs
@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_the_signal_report_names_the_program(sig):
    proc, pid, ppid = start(f"os.kill(os.getpid(), {int(sig)})")
    status, _, err = finish(proc)
    # the supervisor reports, then dies of the same signal (SIGKILL too, whose disposition no
    # process may set)
    assert ppid != pid and status == -sig, (status, err)
    assert err == supervise.report(5, pid, sig), err


@own_jobs
@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_status_passes_through(code):
    status, _, err = finish(start(f"sys.exit({code})")[0])
    assert status == code and err == "", (status, err)


@own_jobs
def test_a_signal_to_the_process_group_reaches_the_program_once():
    # as Hydra and Slurm send it: to the process group, supervisor and program alike
    then = f"""
signal.signal(signal.SIGTERM, lambda *a: (print('SIGTERM', flush=True), os._exit(75)))
print('ready', flush=True)
time.sleep(2 * {BOUND_S})"""
    proc, pid, ppid = start(then)
    # The signal goes only once the program's handler is in place.
    assert proc.stdout.readline() == "ready\n"
    assert os.getpgid(pid) == os.getpgid(ppid)
    os.killpg(os.getpgid(ppid), signal.SIGTERM)
    status, out, err = finish(proc)
    assert status == 75 and out.count("SIGTERM") == 1, (status, out, err)


@own_jobs
def test_the_program_dies_with_its_supervisor():
    # a launcher that kills only the process it started must not leave the program running
    proc, pid, ppid = start(f"time.sleep(2 * {BOUND_S})")
    os.kill(ppid, signal.SIGKILL)
    finish(proc)
    end = time.monotonic() + BOUND_S
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{pid}"), f"the program (pid {pid}) outlived its supervisor"
