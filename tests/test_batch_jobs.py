"""bench/jobs: the Slurm and PBS scripts are valid shell, and the command lines they run parse.

Each script runs for real under bash with srun, mpiexec, scontrol and qrerun replaced by a stub
that records its arguments; the recorded ``python -m collectives train|bench`` command lines go
through the package's own argument parsers.
"""
import json
import os
import subprocess
import sys

import pytest

from bench import cli
from collectives import _runtime
from collectives.train import job
from tests.launch import own_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = os.path.join(ROOT, "bench", "jobs")
SCRIPTS = sorted(f for f in os.listdir(JOBS) if f.endswith(".sh"))
STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_RECORD"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
if "--json" in sys.argv:
    open(sys.argv[sys.argv.index("--json") + 1], "w").write("{{}}")
sys.exit(int(os.environ.get("STUB_STATUS", "0")) if "train" in sys.argv else 0)
"""


@pytest.mark.serial
@pytest.mark.parametrize("script", SCRIPTS)
def test_valid_shell(script):
    done = subprocess.run(["bash", "-n", os.path.join(JOBS, script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _run(tmp_path, script, status=0):
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("srun", "mpiexec", "scontrol", "qrerun"):
        (stubs / name).write_text(STUB.format(python=sys.executable))
        (stubs / name).chmod(0o755)
    record = tmp_path / "record.jsonl"
    record.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "OMPI_", "SLURM_", "PBS_"))}
    env.update(PATH=f"{stubs}:{env['PATH']}", STUB_RECORD=str(record), STUB_STATUS=str(status),
               COLLECTIVES_HOME=ROOT, RESULTS=str(tmp_path / "runs"), PY=sys.executable,
               MPIEXEC=str(stubs / "mpiexec"), SLURM_JOB_ID="123", PBS_JOBID="456.server")
    done = subprocess.run(["bash", os.path.join(JOBS, script)], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    return done, calls


def _commands(calls):
    """(launcher argv, collectives command, its arguments) of each recorded python -m collectives."""
    out = []
    for argv in calls:
        if "-m" in argv and argv[argv.index("-m") + 1] == "collectives":
            i = argv.index("-m")
            out.append((argv[:i], argv[i + 2], argv[i + 3:]))
    return out


@pytest.mark.serial
@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "common.sh"])
def test_command_lines_parse(tmp_path, script):
    done, calls = _run(tmp_path, script)
    assert done.returncode == 0, done.stderr
    commands = _commands(calls)
    assert commands, f"{script} ran no python -m collectives command"
    for launcher, command, args in commands:
        # Bound to cores, through the chosen MPI's launcher.
        assert ("--cpu-bind=cores" in launcher) if launcher[0] == "srun" else (["-bind-to", "core"] == launcher[3:5])
        if command == "train":
            parsed = job.parser().parse_args(args)
            assert parsed.checkpoint.startswith(str(tmp_path / "runs")) and parsed.resume
        else:
            assert command == "bench"
            parsed = cli.parser().parse_args(args)
            assert cli.tests_of(parsed.tests, cli.parser()) and parsed.json.startswith(str(tmp_path / "runs"))
    if "bench" in script:
        assert len(commands) == len(cli.COLLECTIVE_TESTS)
        # A second run (a requeued job) skips what the first wrote.
        again, calls = _run(tmp_path, script)
        assert again.returncode == 0 and not _commands(calls)


@pytest.mark.serial
@pytest.mark.parametrize("script, requeue", [("slurm_train.sh", ["scontrol", "requeue", "123"]),
                                             ("pbs_train.sh", ["qrerun", "456.server"])])
def test_training_requeues_after_a_checkpoint(tmp_path, script, requeue):
    with open(os.path.join(JOBS, script)) as f:
        text = f.read()
    if script.startswith("slurm"):
        assert "#SBATCH --signal=TERM@60" in text and "#SBATCH --requeue" in text
    done, calls = _run(tmp_path, script, status=75)
    assert done.returncode == 75 and calls[-1] == requeue
    done, calls = _run(tmp_path, script, status=0)
    assert done.returncode == 0 and calls[-1][0] != requeue[0]


@pytest.mark.serial
def test_runtime_defaults():
    env = {"OMP_NUM_THREADS": "4", "MPI_LOCALNRANKS": "8"}
    assert _runtime.defaults(env, cores=2) == {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                               "MPIR_CVAR_DEVICE_COLLECTIVES": "none"}
    assert env["OMP_NUM_THREADS"] == "4"  # the user's setting stays
    assert "MPIR_CVAR_DEVICE_COLLECTIVES" not in _runtime.defaults({"MPI_LOCALNRANKS": "2"}, cores=2)
    assert "MPIR_CVAR_DEVICE_COLLECTIVES" in _runtime.defaults({"SLURM_STEP_TASKS_PER_NODE": "2(x3),4"}, cores=2)
    assert "MPIR_CVAR_DEVICE_COLLECTIVES" not in _runtime.defaults({}, cores=2)


@own_jobs  # the child starts MPI: under Open MPI, a singleton beside a running job breaks the job
def test_python_dash_m_collectives_applies_them(tmp_path):
    # What ``python -m collectives`` does: the package is imported while sys.argv[0] is "-m".
    code = ("import sys; sys.argv[0] = '-m'; import collectives, os; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('MPIR_CVAR_DEVICE_COLLECTIVES'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "OMPI_", "MPI_LOCAL"))
           and k not in ("OPENBLAS_NUM_THREADS", "MPIR_CVAR_DEVICE_COLLECTIVES")}
    env.update(MPI_LOCALNRANKS=str(4 * (os.cpu_count() or 1)), PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["1", "none"], done.stderr
