"""The slow-network testbed (bench/net/): scripts parse, the fit and layout check are right, and
as root at one rank a 2-node testbed comes up, MPI sees one rank per node, and nothing is left."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from mpi4py import MPI

from tests.launch import OPEN_MPI

NET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "net")
sys.path.insert(0, NET)
import measure  # noqa: E402  (bench/net is put on sys.path just above)

TESTBED = os.path.join(NET, "testbed.sh")
ROOT_ONE_RANK = pytest.mark.skipif(os.geteuid() != 0 or MPI.COMM_WORLD.size != 1,
                                   reason="needs root, and runs in the 1-rank launch only")


@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(NET, "*.sh"))))
def test_script_parses(script):
    subprocess.run(["bash", "-n", script], check=True)


def test_fit_recovers_alpha_beta():
    alpha, beta = 30e-6, 8e-9  # 30 us, 1 Gbit/s
    times = {m: alpha + beta * m for m in measure.PINGPONG_SIZES}
    assert np.allclose(measure.fit(times), (alpha, beta), rtol=1e-9)


def test_layout_on_one_host(mpi_comm):
    info = measure.layout(mpi_comm)
    assert (info["nodes"], info["ranks_per_node"]) == (1, mpi_comm.size)
    assert list(info["hosts"].values()) == [list(range(mpi_comm.size))]


def namespaces():
    """Names of the testbed's network namespaces that exist now."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith("ctb-")]


def test_without_root_measures_nothing():
    if os.geteuid() != 0:
        out = subprocess.run(["bash", os.path.join(NET, "bench_net.sh")], capture_output=True, text=True)
    else:  # drop to nobody to see the non-root path, from a copy that nobody may read (the
        # checkout may sit in a directory only root may enter, as mktemp -d makes them)
        copy = tempfile.mkdtemp()
        try:
            os.chmod(copy, 0o755)
            for name in ("bench_net.sh", "testbed.sh"):
                shutil.copy(os.path.join(NET, name), copy)
            out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                  "bash", os.path.join(copy, "bench_net.sh")], capture_output=True, text=True)
        finally:
            shutil.rmtree(copy)
    assert out.returncode == 0 and "skipped, nothing measured: needs root" in out.stdout, out


@ROOT_ONE_RANK
@pytest.mark.skipif(OPEN_MPI, reason="the testbed launches through MPICH's Hydra (mpiexec --launcher)")
def test_two_nodes_one_rank_each_then_nothing_left():
    if namespaces():
        pytest.skip(f"a testbed is up already (bench-net running?): {namespaces()}")
    # The nested mpiexec must not see this launch's PMI and Hydra settings (HYDI_CONTROL_FD
    # would make its proxies write to a closed descriptor).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDI_", "MPI_LOCAL"))}
    env["MPIEXEC"] = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    try:
        subprocess.run([TESTBED, "up", "2", "1gbit"], env=env, check=True, timeout=60)
        assert sorted(namespaces()) == ["ctb-n0", "ctb-n1", "ctb-sw"]
        out = subprocess.run([TESTBED, "mpiexec", "2", "1", sys.executable,
                              os.path.join(NET, "measure.py"), "--layout-only"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        info = json.loads(out.stdout.splitlines()[-1])
        assert info == {"nodes": 2, "ranks_per_node": 1, "hosts": {"ctb-n0": [0], "ctb-n1": [1]}}
    finally:
        subprocess.run([TESTBED, "down"], env=env, check=True, timeout=60)
    assert namespaces() == []


@ROOT_ONE_RANK
def test_failed_run_tears_down():
    if namespaces():
        pytest.skip(f"a testbed is up already (bench-net running?): {namespaces()}")
    env = dict(os.environ, PYTHON="false", RATES="1gbit", LAYOUTS="2x1")
    out = subprocess.run(["bash", os.path.join(NET, "bench_net.sh")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "2 node(s) up" in out.stdout, out
    assert namespaces() == []


def test_model_check_reads_the_fits():
    import model_check

    alpha, fast, beta = 40e-6, 1e-9, 8.4e-9
    times = {str(n): (alpha + n * fast) * 1e6 for n in measure.PINGPONG_SIZES if n <= model_check.BURST // 2}
    result = {"links": {model_check.EXCHANGE: {"alpha_us": 99.0, "beta_s_per_byte": beta, "one_way_us": times},
                        model_check.INTRA: {"beta_s_per_byte": 1e-10, "one_way_us": {"8": 20.0, "4096": 20.0}}}}
    links = model_check.links_of(result, 3e-10)
    assert links.inter == pytest.approx((alpha, beta)) and links.fast == pytest.approx(fast)
    assert links.intra == pytest.approx((20e-6, 1e-10)) and links.gamma == 3e-10
    assert links.burst == model_check.BURST
    # A train (back to back, as a schedule's steps) gives alpha instead of the single exchanges;
    # the in-burst rate stays the single exchanges' slope from IN_BURST_FROM, whatever the
    # train's slope and however the smaller single exchanges step.
    train = {str(n): (25e-6 + n * 2e-9) * 1e6 for n in measure.TRAIN_SIZES}
    result["links"][f"{model_check.EXCHANGE}, train of 16"] = {"one_way_us": train}
    for n in times:
        if int(n) < model_check.IN_BURST_FROM:
            times[n] /= 2
    links = model_check.links_of(result, 3e-10)
    assert links.inter == pytest.approx((25e-6, beta)) and links.fast == pytest.approx(fast)
    # tc's "256kb" is KiB: the constant is that burst as TCP payload.
    with open(TESTBED) as f:
        assert "burst 256kb" in f.read()
