"""Checkpoints that survive the scheduler (collectives.train.checkpoint), each case in a job of its own:

* a job SIGKILLed while rank 0 is half-way through writing a checkpoint resumes from the
  previous complete one, to the very parameters of an uninterrupted run;
* SIGTERM to one rank (a sync worker; a parameter server's server): every rank checkpoints at
  the same step and the job exits with status 75; the resumed run ends bit-identical to an
  uninterrupted one (same rank count; sync SGD and the tau=0 server are deterministic there);
* a checkpoint written at np=3 resumes at np=2 (sync and the parameter server, with another
  number of servers), within rounding of the uninterrupted np=2 run of ``sync``; local SGD
  at another rank count starts every rank from the average of the saved states;
* nothing on the checkpoint path pickles: mpi4py's pickle raises while one is written or read.

Each test launches jobs of its own, so the file runs in the suite's 1-rank launch only.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from collectives.train import checkpoint
from tests.launch import ROOT, clean_env, launcher, mpiexec, own_jobs, program_stderr, rank_of

pytestmark = own_jobs

SGD = ["--optimizer", "sgd", "--no-progress"]
BOUND = 60  # seconds a job may take to stop after SIGTERM (it stops at the next step)


def start(n, args, env=None, program=("-m", "collectives", "train")):
    """Start ``python -m collectives train ARGS`` (or ``python PROGRAM... ARGS``) on ``n`` ranks;
    (Popen, tag naming its ranks)."""
    tag = uuid.uuid4().hex
    proc = subprocess.Popen([*launcher(), "-n", str(n), sys.executable, *program, *args],
                            env=clean_env(COLLECTIVES_TEST_JOB=tag, **(env or {})), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return proc, tag


def train(n, args):
    """Run a training job to its end; its CompletedProcess."""
    return mpiexec(n, ["-m", "collectives", "train", *args], timeout=300)


def ranks(tag):
    """rank -> pid of the processes of the job started with ``tag`` (read from /proc)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        rank = rank_of(env)
        if env.get(b"COLLECTIVES_TEST_JOB") == tag.encode() and rank is not None:
            out[rank] = int(pid)
    return out


def wait_for(proc, condition, what, timeout=120):
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout`` seconds, or with
    the job's output if the job ``proc`` ended first."""
    end = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the job ended with status {proc.returncode} before {what}:\n{out}\n{err}")
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def meta(path):
    """The JSON metadata of the checkpoint at ``path``, read without pickle."""
    with np.load(path, allow_pickle=False) as f:
        return json.loads(str(f["meta"]))


def weights(path):
    with np.load(path, allow_pickle=False) as f:
        return f["w"]


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def test_interrupted_write_resumes_from_previous_checkpoint(tmp_path):
    ckpt, whole, resumed = (str(tmp_path / n) for n in ("c.npz", "whole.npz", "resumed.npz"))
    options = [*SGD, "--epochs", "3", "--checkpoint", ckpt, "--checkpoint-every", "10"]
    # The writer stops half-way through its second write, the checkpoint at step 20.
    proc, tag = start(2, options, program=(os.path.join(ROOT, "tests", "stalled_write.py"), "2"))
    try:
        # after the first checkpoint's rename, a temporary file can only be the second one's
        wait_for(proc, lambda: os.path.exists(ckpt) and os.path.exists(ckpt + ".tmp") and os.path.getsize(ckpt + ".tmp"),
                 "the torn write")
        pids = ranks(tag)
        assert sorted(pids) == [0, 1]
        for pid in pids.values():  # the machine dies: no rank gets to clean up
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.communicate(timeout=BOUND)
        print(f"SIGKILL mid-write -> launch ended in {time.monotonic() - killed:.2f} s, status {proc.returncode}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert meta(ckpt)["clock"] == 10  # the previous complete checkpoint is intact
    with pytest.raises(Exception):
        np.load(ckpt + ".tmp", allow_pickle=False)["w"]  # the torn one is not a checkpoint
    ok(train(2, [*options, "--resume", "--save", resumed]))
    ok(train(2, [*SGD, "--epochs", "3", "--save", whole]))
    np.testing.assert_array_equal(weights(resumed), weights(whole))


@pytest.mark.parametrize("n,sync,rank", [(2, ["--sync", "sync"], 1), (3, ["--sync", "ps", "--tau", "0"], 2)],
                         ids=["sync-rank1", "ps-server"])
def test_sigterm_on_one_rank_checkpoints_and_resumes(tmp_path, n, sync, rank):
    """SIGTERM to one rank only (a worker of sync SGD; the server of a parameter server):
    status 75 on every rank after a checkpoint, then the resumed run ends bit-identical to an
    uninterrupted one."""
    ckpt, whole, resumed = (str(tmp_path / n) for n in ("c.npz", "whole.npz", "resumed.npz"))
    metrics = str(tmp_path / "m.json")
    options = [*SGD, *sync, "--epochs", "40", "--checkpoint", ckpt, "--checkpoint-every", "50"]
    proc, tag = start(n, options)
    try:
        wait_for(proc, lambda: os.path.exists(ckpt), "the first checkpoint")
        os.kill(ranks(tag)[rank], signal.SIGTERM)  # one rank only: the others must learn of it
        sent = time.monotonic()
        out, err = proc.communicate(timeout=BOUND)
        err = program_stderr(err)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == checkpoint.PREEMPTED == 75, err
    step = meta(ckpt)["clock"]
    assert 50 <= step < 40 * 23, step  # 23 steps per epoch: it stopped early, after the first checkpoint
    assert err.splitlines() == [f"collectives train: SIGTERM: checkpoint of step {step} written to {ckpt}; "
                                "exit status 75, run again with --resume to continue"], err
    print(f"SIGTERM to rank {rank} -> exit 75 in {took:.2f} s, checkpoint of step {step}")
    ok(train(n, [*options, "--resume", "--save", resumed, "--metrics", metrics]))
    ok(train(n, [*SGD, *sync, "--epochs", "40", "--save", whole]))
    np.testing.assert_array_equal(weights(resumed), weights(whole))
    assert json.load(open(metrics))["steps"] == 40 * 23


@pytest.mark.parametrize("sync", [["--sync", "sync"], ["--sync", "ps", "--servers", "2", "--tau", "0"]],
                         ids=["sync", "ps"])
def test_resume_at_another_rank_count(tmp_path, sync):
    """Written at np=3, resumed at np=2 (the parameter server with one server instead of two):
    the end is the uninterrupted np=2 ``sync`` run's, to rounding (sums in another order)."""
    ckpt, whole, resumed = (str(tmp_path / n) for n in ("c.npz", "whole.npz", "resumed.npz"))
    options = [*SGD, "--epochs", "3", "--checkpoint", ckpt, "--checkpoint-every", "7"]
    ok(train(3, [*options, *sync, "--max-steps", "30"]))
    assert meta(ckpt)["nranks"] == 3 and meta(ckpt)["clock"] == 30
    again = [a for a in sync if a not in ("--servers", "2")]
    ok(train(2, [*options, *again, "--resume", "--save", resumed]))
    ok(train(2, [*SGD, "--epochs", "3", "--save", whole]))
    np.testing.assert_allclose(weights(resumed), weights(whole), rtol=1e-9, atol=1e-12)


def test_checkpoint_of_another_job_is_refused(tmp_path):
    ckpt = str(tmp_path / "c.npz")
    ok(train(1, [*SGD, "--epochs", "1", "--checkpoint", ckpt, "--checkpoint-every", "5"]))
    result = train(2, ["--optimizer", "adam", "--no-progress", "--epochs", "1", "--checkpoint", ckpt, "--resume"])
    assert result.returncode == 1
    assert result.stderr.strip() == (f"collectives train: error: {ckpt} was written with optimizer='sgd', "
                                     "resuming with 'adam'"), result.stderr


def test_checkpoint_of_another_model_is_refused(tmp_path):
    """Logistic and least-squares regression have as many parameters: the model's name tells them apart."""
    data = tmp_path / "binary.svm"
    rows = np.random.default_rng(0).normal(size=(40, 3))
    data.write_text("".join(f"{int(r[0] > 0)} " + " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(r)) + "\n"
                            for r in rows))
    ckpt = str(tmp_path / "c.npz")
    base = [*SGD, "--data", str(data), "--batch", "4", "--epochs", "1", "--checkpoint", ckpt]
    ok(train(1, [*base, "--model", "logistic", "--checkpoint-every", "2"]))
    result = train(2, [*base, "--model", "linear", "--resume"])
    assert result.returncode == 1
    assert result.stderr.strip() == (f"collectives train: error: {ckpt} was written by model 'Logistic', "
                                     "this job's is 'LeastSquares'"), result.stderr


def test_state_another_optimizer_keeps_is_a_data_error():
    from collectives.train.errors import DataError

    state = {"w": np.zeros(5), "t": 3}
    with pytest.raises(DataError, match=r"^c\.npz holds no 'm' state \(written by another model or optimizer\)$"):
        checkpoint.check_state("c.npz", state, {"w": (5,), "t": (), "m": (5,)})
    with pytest.raises(DataError, match=r"^c\.npz holds w of shape \(2, 4\), this job's is \(5,\)$"):
        checkpoint.check_state("c.npz", {"w": np.zeros((2, 4))}, {"w": (5,)})
    checkpoint.check_state("c.npz", {"w": np.zeros((2, 5)), "t": 1}, {"w": (5,), "t": ()})
    checkpoint.check_state("c.npz", {"S": np.zeros((10, 5))}, {"S": (0,)})  # L-BFGS history: any length


@pytest.mark.parametrize("compress", ["topk", "sign"])
def test_compressed_run_resumes_bit_identical(tmp_path, compress):
    """The error-feedback residuals (sign's also those of re-compressing the summed chunks) and
    the compressor's seeds are part of the checkpoint."""
    ckpt, whole, resumed = (str(tmp_path / n) for n in ("c.npz", "whole.npz", "resumed.npz"))
    options = [*SGD, "--epochs", "2", "--compress", compress, "--checkpoint", ckpt, "--checkpoint-every", "10"]
    ok(train(2, [*options, "--max-steps", "25"]))
    with np.load(ckpt, allow_pickle=False) as f:
        assert f["residuals"].shape == (2, meta(ckpt)["model_size"]) and f["residuals"].any()
        assert f["owner_residuals"].any() == (compress == "sign")
    ok(train(2, [*options, "--resume", "--save", resumed]))
    ok(train(2, [*SGD, "--epochs", "2", "--compress", compress, "--save", whole]))
    np.testing.assert_array_equal(weights(resumed), weights(whole))
    ok(train(3, [*options, "--resume"]))  # another rank count: each rank takes a share of the residuals


NO_PICKLE = """
import sys
from mpi4py import MPI
from collectives import Comm
from collectives.train.checkpoint import Checkpoints
from collectives.train.job import make_trainer, prepare
from collectives.train.sync.ps import ParameterServer

def refuse(*args, **kw):
    raise AssertionError("pickled on the checkpoint path")

def unpickled(fn):
    def run(*args, **kw):
        MPI.pickle.__init__(refuse, refuse)
        try:
            return fn(*args, **kw)
        finally:
            MPI.pickle.__init__()
    return run

for cls, names in ((Checkpoints, ("save_step", "restore", "read", "write")), (ParameterServer, ("_boundary",))):
    for name in names:
        setattr(cls, name, unpickled(getattr(cls, name)))
comm = Comm()
data = prepare(comm, test_fraction=0)
path = sys.argv[1]
for sync in ("sync", "local", "ps"):
    for resume in (False, True):
        make_trainer(comm, data, optimizer="adam", sync=sync, epochs=1, checkpoint=f"{path}.{sync}.npz",
                     checkpoint_every=5, resume=resume, progress=False, log_every=100).fit()
"""


def test_no_pickle_on_the_checkpoint_path(tmp_path):
    """Writing and reading checkpoints (replicated, per-rank and parameter-server state) with
    mpi4py's pickle made to raise; the files load with allow_pickle=False."""
    ok(mpiexec(3, ["-c", NO_PICKLE, str(tmp_path / "c")], timeout=300))
    for sync in ("sync", "local", "ps"):
        m = meta(tmp_path / f"c.{sync}.npz")
        assert m["layout"] == ("per-rank" if sync == "local" else "replicated") and m["nranks"] == 3
    with np.load(tmp_path / "c.local.npz", allow_pickle=False) as f:
        assert f["w"].shape == (3, 650) and f["m"].shape == (3, 650)
    source = open(checkpoint.__file__).read()
    assert not re.search(r"import pickle|\.(gather|allgather|bcast|allreduce|scatter|send|recv)\(", source)


LOAD = """
import sys
import numpy as np
from collectives import Comm
from collectives.train.job import make_trainer, prepare

comm = Comm()
trainer = make_trainer(comm, prepare(comm, test_fraction=0), optimizer="adam", sync="local", epochs=1)
opt = trainer.ctx.new_optimizer()
w, epoch, step = trainer.ctx.checkpoints.restore(sys.argv[1], opt)
np.save(f"{sys.argv[1]}.{comm.rank}.npy", np.concatenate((w, opt.m, opt.v, [opt.t, epoch, step, trainer.t])))
"""


def test_local_resumes_at_another_rank_count_from_the_average(tmp_path):
    """Local SGD written at np=2 and loaded at np=3: every rank starts from the mean of the two
    saved models and optimizer states (NumPy's mean of the file's rows)."""
    ckpt = str(tmp_path / "c.npz")
    ok(train(2, ["--optimizer", "adam", "--sync", "local", "--no-progress", "--epochs", "1", "--checkpoint", ckpt,
                 "--max-steps", "13"]))
    with np.load(ckpt, allow_pickle=False) as f:
        saved = {k: f[k] for k in ("w", "m", "v")}
    assert saved["w"].shape == (2, 650) and not np.array_equal(saved["w"][0], saved["w"][1])
    ok(mpiexec(3, ["-c", LOAD, ckpt], timeout=300))
    expected = np.concatenate([saved[k].mean(axis=0) for k in ("w", "m", "v")] + [[13, 0, 13, 13]])
    for rank in range(3):
        np.testing.assert_array_equal(np.load(f"{ckpt}.{rank}.npy"), expected)
