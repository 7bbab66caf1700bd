"""The timeline of every rank (collectives.timeline): the files are Chrome Trace Event Format
(required keys, microseconds, nesting, one track per rank after the merge), a wait names the
rank it waited for, the trainer's phases appear, a job that ends by an error leaves every
rank's file, and the merge and draw commands read them."""
import json
import os
import subprocess
import sys

import pytest

from collectives import timeline
from tests.launch import ROOT, clean_env, mpiexec, own_jobs

pytestmark = own_jobs

# Rank 1 sleeps DELAY_S before the barrier: rank 0's barrier waits that long, on rank 1.
DELAY_S = 0.3

PROGRAM = """
import json, sys, time
import numpy as np
from mpi4py import MPI
import collectives

path = sys.argv[1]
comm = collectives.Comm(MPI.COMM_WORLD, timeline=path)
made = []  # (collective, algorithm, bytes, count, wall microseconds) per call, as this program saw it
def call(name, f, nbytes, count):
    t0 = time.perf_counter()
    f()
    made.append((name, comm.last_algorithm, nbytes, count, (time.perf_counter() - t0) * 1e6))
for n in (2, 1 << 18):
    x, y = np.ones(n, np.float32), np.empty(n, np.float32)
    call("allreduce", lambda: comm.Allreduce(x, y), 4 * n, n)
    assert (y == comm.size).all()
b = np.arange(6, dtype=np.float64)
call("bcast", lambda: comm.Bcast(b, root=0), 48, 6)
g = np.empty(6 * comm.size)
call("allgather", lambda: comm.Allgather(b, g), 48 * comm.size, 6 * comm.size)  # nccl-tests' terms: the result
if comm.rank == 1:
    time.sleep({delay})
call("barrier", comm.Barrier, 0, 0)
sub = comm.Split(comm.rank % 2)  # a Comm it makes records too
sub.Allreduce(MPI.IN_PLACE, np.ones(3))
sub.Free()
comm.Free()
with open(f"{{path}}.made{{MPI.COMM_WORLD.rank}}", "w") as f:
    json.dump(made, f)
"""


def _complete(events, pid=None):
    return [e for e in events if e["ph"] == "X" and (pid is None or e["pid"] == pid)]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A 3-rank job's merged trace, its rank files and what each rank saw of its calls."""
    where = tmp_path_factory.mktemp("timeline")
    path = str(where / "trace.json")
    done = mpiexec(3, ["-c", PROGRAM.format(delay=DELAY_S), path], timeout=300)
    assert done.returncode == 0, done.stderr
    with open(path) as f:
        merged = json.load(f)
    made = {}
    for r in range(3):
        with open(f"{path}.made{r}") as f:
            made[r] = json.load(f)
    return path, merged, made


def test_trace_event_format(traced):
    path, merged, made = traced
    assert set(merged) >= {"traceEvents"}
    events = merged["traceEvents"]
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= set(e), e
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert e["cat"] in ("call", "check", "transfer", "wait", "training"), e
    # one track per rank, named, each rank's own file holding only its own events; the rings
    # (for a rank that is killed) are gone once their trace files are written
    assert timeline.inputs(path) == [timeline.rank_path(path, r) for r in range(3)]
    assert not any(os.path.exists(timeline.ring_path(path, r)) for r in range(3))
    assert {e["pid"] for e in events} == {0, 1, 2}
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    for r in range(3):
        with open(timeline.rank_path(path, r)) as f:
            own = json.load(f)["traceEvents"]
        assert {e["pid"] for e in own} == {r}
        assert len(_complete(own)) == len(_complete(events, r))


def test_calls_carry_collective_algorithm_bytes_and_count_in_microseconds(traced):
    _, merged, made = traced
    for r in range(3):
        calls = [e for e in _complete(merged["traceEvents"], r) if e["cat"] == "call"]
        # the world Comm's calls in order, then the sub-communicator's all-reduce
        assert len(calls) == len(made[r]) + 1
        for e, (name, algorithm, nbytes, count, wall_us) in zip(calls, made[r]):
            assert e["name"] == name
            assert e["args"] == {"collective": name, "algorithm": algorithm, "bytes": nbytes, "count": count}
            # the call's span, in microseconds, lies within what the program timed around it
            assert 0 < e["dur"] <= wall_us + 1, (e, wall_us)
        assert calls[-1]["args"]["collective"] == "allreduce" and calls[-1]["args"]["bytes"] == 24
    # rank 0 waited about DELAY_S for rank 1 in the barrier: 1e6 per second
    barrier = next(e for e in _complete(merged["traceEvents"], 0) if e["name"] == "barrier")
    assert DELAY_S * 1e6 * 0.9 < barrier["dur"] < DELAY_S * 1e6 * 10
    # aligned clocks: the ranks left the barrier at about the same time on rank 0's clock
    ends = [next(e for e in _complete(merged["traceEvents"], r) if e["name"] == "barrier") for r in range(3)]
    ends = [e["ts"] + e["dur"] for e in ends]
    assert max(ends) - min(ends) < 0.1 * DELAY_S * 1e6, ends


def test_phases_nest_in_their_call(traced):
    _, merged, _ = traced
    for r in range(3):
        own = _complete(merged["traceEvents"], r)
        calls = [e for e in own if e["cat"] == "call"]
        parts = [e for e in own if e["cat"] in ("check", "transfer", "wait")]
        assert {e["cat"] for e in parts} >= {"transfer", "wait"}
        for e in parts:
            around = [c for c in calls if c["ts"] <= e["ts"] + 0.002 and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 0.002]
            assert around, f"rank {r}: {e} lies in no call"
            assert all(c["args"]["collective"] == e["args"]["collective"] for c in around)
        # a viewer nests by time: events of a thread come sorted by start, the enclosing first
        for tid in (0, 1):
            starts = [(e["ts"], -e["dur"]) for e in own if e["tid"] == tid]
            assert starts == sorted(starts)


def test_a_wait_names_the_rank_it_waited_for(traced):
    """Rank 1 came DELAY_S late to the barrier: rank 0's long wait is on rank 1."""
    _, merged, _ = traced
    barrier = next(e for e in _complete(merged["traceEvents"], 0) if e["name"] == "barrier")
    waits = [e for e in _complete(merged["traceEvents"], 0) if e["cat"] == "wait"
             and barrier["ts"] <= e["ts"] <= barrier["ts"] + barrier["dur"]]
    longest = max(waits, key=lambda e: e["dur"])
    assert longest["args"]["waited_for"] == 1
    assert longest["dur"] > 0.5 * DELAY_S * 1e6


FAILING = """
import sys, time
import numpy as np
from mpi4py import MPI
import collectives

comm = collectives.Comm(MPI.COMM_WORLD, timeline=sys.argv[1])
for _ in range(5):
    comm.Allreduce(MPI.IN_PLACE, np.ones(4))
if comm.rank == 1:
    raise ValueError("boom on purpose")
comm.Barrier()
"""


def test_a_job_ending_by_an_error_leaves_every_ranks_file(tmp_path):
    path = str(tmp_path / "trace.json")
    done = mpiexec(2, ["-c", FAILING, path], timeout=300)
    assert done.returncode != 0 and "boom on purpose" in done.stderr
    assert not os.path.exists(path)  # no merge: the job did not end normally
    # the failing rank wrote its trace before the abort; the killed one left its ring
    assert os.path.exists(timeline.rank_path(path, 1))
    files = timeline.inputs(path)
    assert len(files) == 2
    merge = subprocess.run([sys.executable, "-m", "bench.cli", "timeline", "merge", path], cwd=ROOT,
                           env=clean_env(), capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    for r in (0, 1):
        calls = [e for e in _complete(events, r) if e["cat"] == "call" and e["name"] == "allreduce"]
        assert len(calls) == 5, (r, calls)


def test_the_trainer_records_its_phases_and_the_picture_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / "trace.json")
    ckpt = str(tmp_path / "model.npz")
    done = mpiexec(2, ["-m", "collectives", "train", "--epochs", "2", "--straggler", "1:3", "--timeline", path,
                       "--checkpoint", ckpt, "--checkpoint-every", "1"], timeout=600)
    assert done.returncode == 0, done.stderr
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    for r in (0, 1):
        phases = {e["name"] for e in _complete(events, r) if e["tid"] == 1}
        assert phases == {"gradient", "communication", "update", "evaluation", "checkpoint", "wait"}, (r, phases)
    # rank 1 computes 3 times slower: rank 0 waits for it before the exchanges (by how much
    # depends on the machine's load: only the order is asserted)
    wait = {r: sum(e["dur"] for e in _complete(events, r) if e["tid"] == 1 and e["name"] == "wait") for r in (0, 1)}
    assert wait[0] > wait[1], wait
    picture = str(tmp_path / "timeline.png")
    drawn = subprocess.run([sys.executable, "-m", "bench.cli", "timeline", path, "-o", picture], cwd=ROOT,
                           env=clean_env(), capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0, drawn.stderr
    with open(picture, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_off_by_default_and_for_a_comm_that_says_so(tmp_path):
    code = ("import sys; from mpi4py import MPI; import collectives\n"
            "a = collectives.Comm(MPI.COMM_WORLD); a.Barrier(); a.Free()\n"
            "b = collectives.Comm(MPI.COMM_WORLD, timeline=False); b.Barrier(); b.Free()\n")
    done = mpiexec(2, ["-c", code], timeout=120, cwd=str(tmp_path), env={"COLLECTIVES_TIMELINE": ""})
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == []
