"""The installed benchmark command: it runs from any directory with a clean PYTHONPATH, its
OSU and nccl-tests output parses as those tools' output does, and its repeat and plot modes
work end to end.  Each test launches its own jobs, so the file runs in the suite's 1-rank launch only."""
import json
import os
import subprocess
import sys

import pytest

from bench import launches
from tests.launch import clean_env, mpiexec, own_jobs

pytestmark = own_jobs

BIN = os.path.dirname(sys.executable)
COMMAND = os.path.join(BIN, "collectives-bench")
installed = pytest.mark.skipif(not os.path.exists(COMMAND),
                               reason="collectives-bench is not installed in this environment (make build)")


def _run(args, cwd, timeout=300):
    """Run ``args`` in ``cwd`` without PYTHONPATH and outside this job's launcher."""
    env = clean_env()
    env.pop("PYTHONPATH")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _data(text):
    """Data lines as OSU's and nccl-tests' users read them: not '#', split on whitespace."""
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_child_argv():
    argv = ["--launches", "3", "-np", "4", "allreduce", "-m", "8:64", "--json=x.json", "--mpich-algorithms",
            "--wait-fast", "60"]
    assert launches.child_argv(argv) == ["allreduce", "-m", "8:64"]


def test_wait_fast_probes_until_the_fast_state_or_the_limit():
    """A probe at once, then one every PROBE_EVERY seconds while the limit leaves room for it;
    the fast state ends the wait, the limit ends it in the slow state."""
    every = launches.PROBE_EVERY

    def run(limit, verdicts):
        now, slept, seen = [0.0], [], iter(verdicts)

        def sleep(seconds):
            slept.append(seconds)
            now[0] += seconds

        return launches.wait_fast(limit, check=lambda: next(seen), sleep=sleep, clock=lambda: now[0]), slept

    assert run(600, [(False, "a"), (False, "b"), (True, "c")]) == ((True, "c", 3), [every, every])
    assert run(2.5 * every, [(False, "a")] * 9) == ((False, "a", 3), [every, every])
    assert run(2 * every, [(False, "a")] * 9) == ((False, "a", 3), [every, every])
    assert run(0, [(False, "a")]) == ((False, "a", 1), [])
    assert run(0, [(True, "b")]) == ((True, "b", 1), [])
    with pytest.raises(SystemExit, match="--wait-fast must be 0 seconds or more"):
        run(-1, [])


@installed
def test_import_and_help_from_any_directory(tmp_path):
    got = _run([sys.executable, "-c", "import collectives.bench.cli; print(collectives.__file__)"], tmp_path)
    assert got.returncode == 0, got.stderr
    for args in ([COMMAND, "--help"], [sys.executable, "-m", "collectives", "bench", "--help"]):
        got = _run(args, tmp_path)
        assert got.returncode == 0 and "-m [MIN:]MAX" in got.stdout and "--launches" in got.stdout, got.stderr
    got = _run([COMMAND, "allreduce", "-m", "64:8"], tmp_path)
    assert got.returncode != 0 and "minimum above maximum" in got.stderr


@installed
def test_sweep_outputs_parse(tmp_path):
    common = ["-m", "8:64", "-i", "4", "-x", "1", "--budget", "0.2", "--no-json", "-q"]
    got = mpiexec(2, [COMMAND, "allreduce", "bw", "--format", "osu", "--csv", "out.csv", *common],
                  env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=300)
    assert got.returncode == 0, got.stderr
    assert "# OSU MPI Allreduce Latency Test" in got.stdout and "# OSU MPI Bandwidth Test" in got.stdout
    for row in _data(got.stdout):
        assert int(row[0]) in (8, 16, 32, 64) and float(row[1]) > 0 and int(row[2 if len(row) == 3 else 4]) >= 1
    csv = (tmp_path / "out.csv").read_text().splitlines()
    assert csv[0].startswith("collective,np,size") and any(line.startswith("bw,2,64,") for line in csv)
    got = mpiexec(2, [COMMAND, "reduce", "--in-place", "-c", "-a", "auto", *common],
                  env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=300)
    assert got.returncode == 0, got.stderr
    rows = _data(got.stdout)
    assert len(rows) == 3 * 4 and all(len(row) == 13 and row[8] == "0" and row[12] == "0" for row in rows)
    assert got.stdout.count("# Avg bus bandwidth    :") == 3


@installed
def test_nonblocking_outputs_parse(tmp_path):
    """``iallreduce``: OSU's four overlap columns (then the post, the wait and the iterations) per
    contender, the overlap within [0, 100]; the CSV and the JSON carry the same fields."""
    common = ["-m", "8:64", "-f", "8", "-i", "4", "-x", "1", "--budget", "0.2", "-a", "auto", "--no-json", "-q", "-c"]
    got = mpiexec(2, [COMMAND, "iallreduce", "--csv", "out.csv", "--json", "out.json", *common],
                  env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.count("# OSU MPI Non-blocking Allreduce Latency Test") == 3  # native, default, auto
    rows = _data(got.stdout)
    assert len(rows) == 3 * 2
    for row in rows:
        # Size, Overall, Compute, Pure Comm., Overlap(%), Coll. Init, MPI_Wait, Iterations
        assert len(row) == 8 and int(row[0]) in (8, 64) and float(row[1]) > 0 and float(row[3]) > 0
        assert 0 <= float(row[4]) <= 100 and int(row[7]) >= 1
    csv = (tmp_path / "out.csv").read_text().splitlines()
    head = csv[0].split(",")
    cells = [dict(zip(head, line.split(","))) for line in csv[1:]]
    assert len(cells) == 6 and {c["collective"] for c in cells} == {"iallreduce"}
    assert all(0 <= float(c["overlap(%)"]) <= 100 and float(c["overall(us)"]) > 0 and float(c["native/ours"]) > 0
               for c in cells)
    result = json.loads((tmp_path / "out.json").read_text())["results"][0]
    assert result["collective"] == "iallreduce" and len(result["summary"]) == 2
    assert all(row["#wrong"] == 0 and 0 <= row["overlap(%)"] <= 100 and row["compute(us)"] >= 0
               for row in result["rows"])


@installed
def test_np_alone_launches_the_ranks(tmp_path):
    """``collectives-bench -np 2 allreduce`` typed outside mpiexec measures on 2 ranks (it starts
    them itself); in a launch of another size it stops and says how to run it."""
    common = ["allreduce", "-m", "8:8", "-i", "2", "-x", "1", "--budget", "0.1", "--no-json", "-q"]
    got = _run([COMMAND, "-np", "2", *common], tmp_path)
    assert got.returncode == 0, got.stderr
    assert "allreduce, float32, np=2 on" in got.stdout and "-n 2" in got.stderr
    got = mpiexec(2, [COMMAND, "-np", "3", *common], env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=300)
    assert got.returncode != 0 and "-np 3, but this launch has 2 ranks" in got.stderr, got.stderr


@installed
def test_launches_and_plot(tmp_path):
    got = _run([COMMAND, "--launches", "2", "-np", "2", "allreduce", "-m", "8:8", "-i", "3", "-a", "auto",
                "--budget", "0.1", "--results", str(tmp_path), "--wait-fast", "0"], tmp_path)
    assert got.returncode == 0, got.stderr
    # Two launches at each thread level, multiple then single; --wait-fast 0: one real state
    # probe before each launch, whatever it reads.
    assert got.stderr.count("collectives.bench.state: np=2") == 4, got.stderr
    assert [line for line in got.stdout.splitlines() if line.startswith("# thread level")] == [
        "# thread level multiple (MPI4PY_RC_THREAD_LEVEL=multiple)", "# thread level single (MPI4PY_RC_THREAD_LEVEL=single)"]
    for states in (line for line in got.stdout.splitlines() if line.startswith("# the state probe before each launch")):
        assert states.split(": ", 1)[1] in {"fast, fast", "fast, slow", "slow, fast", "slow, slow"}, states
    rows = {row[1]: row for row in _data(got.stdout)}
    assert set(rows) == {"native", "default", "auto"}
    for row in rows.values():
        median, lo, hi, n = float(row[3]), float(row[4]), float(row[5]), int(row[6])
        assert lo <= median <= hi and n == 2
    path = tmp_path / "run.json"
    got = mpiexec(2, [COMMAND, "allreduce", "-m", "8:1K", "-f", "4", "-i", "3", "--budget", "0.1", "-q",
                      "--no-json", "--json", str(path)], env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=300)
    assert got.returncode == 0, got.stderr
    got = _run([COMMAND, "plot", str(path), "-o", str(tmp_path)], tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "allreduce_np2_glibc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@installed
def test_tune_quick_writes_a_table_auto_reads(tmp_path):
    """``collectives-bench tune --quick``: one launch, after one real state probe, writes a
    table that collectives.tuning loads, with the launch's state in its metadata."""
    from collectives import registry

    path = tmp_path / "table.json"
    got = _run([COMMAND, "tune", "allreduce", "--quick", "--wait-fast", "0", "--base", "", "-o", str(path)],
               tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stderr.count("collectives.bench.state: np=2") == 1, got.stderr
    table = registry.load_table(str(path))
    assert table.metadata["launch_states"]["2"] in (["fast"], ["slow"]) and table.metadata["wait_fast_s"] == 0
    # The measured rows (np=2 is the smallest and largest measured) before the table's catch-all.
    measured = [row for row in table.rows["allreduce"] if row.ranks == (1, 2)]
    assert measured and measured[0].bytes[0] == 0 and measured[-1].bytes[1] is None
