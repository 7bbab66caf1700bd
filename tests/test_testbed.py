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


@pytest.mark.serial
@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(NET, "*.sh"))), ids=os.path.basename)
def test_script_parses(script):
    subprocess.run(["bash", "-n", script], check=True)


@pytest.mark.serial
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


@pytest.mark.serial
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


@pytest.mark.serial
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


@pytest.mark.serial
def test_measure_binds_rank_r_to_the_r_th_core(monkeypatch):
    bound = []
    monkeypatch.setattr(measure.os, "sched_getaffinity", lambda pid: {3, 5})
    monkeypatch.setattr(measure.os, "sched_setaffinity", lambda pid, cores: bound.append(cores))
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    monkeypatch.delenv("TESTBED_BIND", raising=False)
    for rank in range(4):
        monkeypatch.setenv("PMI_RANK", str(rank))
        measure.bind()
    assert bound == [{3}, {5}, {3}, {5}]
    monkeypatch.setenv("TESTBED_BIND", "none")
    measure.bind()
    monkeypatch.delenv("TESTBED_BIND")
    monkeypatch.delenv("PMI_RANK")
    measure.bind()
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    measure.bind()
    assert bound == [{3}, {5}, {3}, {5}, {5}]


@pytest.mark.serial
def test_model_check_fits_the_shared_memory_pipeline():
    import model_check

    # Single exchanges: 50 us within the eager cell; beyond it a line of intercept 100 us.
    single = {"8": 45.0, "512": 50.0, "4096": 55.0}
    single |= {str(n): 100.0 + n * 2e-4 for n in (16 << 10, 64 << 10, 256 << 10, 1 << 20)}
    train = {"8": 10.0, "512": 10.5, "4096": 12.0, "8192": 23.0}
    fits = {model_check.INTRA: {"beta_s_per_byte": 2e-10, "one_way_us": single},
            f"{model_check.INTRA}, train of 16": {"one_way_us": train}}
    first, later = model_check.pipeline_step(fits, model_check.INTRA)
    # The 1 MiB point is outside PIPELINE: were it used, a line through it would still fit
    # exactly here, so bend it to show that it is left out.
    assert first == pytest.approx(50e-6) and later == pytest.approx(11e-6)
    single[str(1 << 20)] = 5000.0
    assert model_check.pipeline_step(fits, model_check.INTRA) == pytest.approx((50e-6, 11e-6))
    links = model_check.links_of({"links": fits}, 3e-10)
    assert links.step == pytest.approx((50e-6, 11e-6)) and links.eager == model_check.INTRA_EAGER
    # Nothing beyond the cell measured: no step, and none slower than the eager times.
    fits = {model_check.INTRA: {"beta_s_per_byte": 2e-10, "one_way_us": {"8": 20.0, "4096": 20.0}}}
    assert model_check.pipeline_step(fits, model_check.INTRA) == (0.0, 0.0)
    single = {"8": 90.0, "4096": 90.0, str(16 << 10): 60.0, str(64 << 10): 60.0}
    fits = {model_check.INTRA: {"beta_s_per_byte": 2e-10, "one_way_us": single}}
    assert model_check.pipeline_step(fits, model_check.INTRA) == (0.0, 0.0)


def launch_rows(cells):
    """model_check.check's rows of one launch from {(algorithm, bytes): (predicted ms, measured ms)}."""
    return [dict(algorithm=name, bytes=n, predicted_s=p * 1e-3, measured_s=m * 1e-3, error=p / m - 1)
            for (name, n), (p, m) in cells.items()]


@pytest.mark.serial
def test_model_check_combines_launches_by_medians():
    import model_check

    small, big = ("ring", 64 << 10), ("ring", 1 << 20)
    launches = [launch_rows({small: (1.1, 1.0), big: (9.0, 10.0)}),
                launch_rows({big: (14.0, 11.0), small: (1.3, 2.0)}),  # another order: cells match by name
                launch_rows({small: (1.6, 1.2), big: (12.1, 12.0)})]
    rows = {(r["algorithm"], r["bytes"]): r for r in model_check.combine(launches)}
    # 64 KiB: measured medians 1.0, 2.0, 1.2 -> 1.2 ms, predictions 1.1, 1.3, 1.6 -> 1.3 ms, so
    # +8.3% on the medians, where the launches' own errors are +10%, -35% and +33%.
    assert rows[small]["measured_s"] == pytest.approx(1.2e-3) and rows[small]["predicted_s"] == pytest.approx(1.3e-3)
    assert rows[small]["error"] == pytest.approx(1.3 / 1.2 - 1)
    assert rows[small]["launch_errors"] == pytest.approx([0.1, -0.35, 1.6 / 1.2 - 1])
    # 1 MiB: 10, 11, 12 -> 11 ms against 9, 14, 12.1 -> 12.1 ms: +10% (launches -10%, +27%, +1%).
    assert rows[big]["measured_s"] == pytest.approx(11e-3) and rows[big]["predicted_s"] == pytest.approx(12.1e-3)
    assert rows[big]["error"] == pytest.approx(0.1)
    assert rows[big]["launch_errors"] == pytest.approx([-0.1, 14 / 11 - 1, 12.1 / 12 - 1])
    assert model_check.within(r["error"] for r in rows.values()) == 2
    assert [model_check.within(r["error"] for r in one) for one in launches] == [2, 0, 1]
    with pytest.raises(ValueError, match="different cells"):
        model_check.combine([launches[0], launches[1][:1]])


def launch_record(label, beta, measured_ms):
    """A measure.py result of 2 nodes x 1 rank with inter-node beta ``beta`` and the cells'
    medians ``measured_ms`` ({bytes: {contender: ms}})."""
    import model_check

    times = {str(n): (40e-6 + n * 1e-9) * 1e6 for n in measure.PINGPONG_SIZES if n <= model_check.BURST // 2}
    return {"label": label, "layout": {"nodes": 2, "ranks_per_node": 1, "hosts": {"ctb-n0": [0], "ctb-n1": [1]}},
            "links": {model_check.EXCHANGE: {"beta_s_per_byte": beta, "one_way_us": times}},
            "gamma_s_per_byte": 1e-10, "fixed_cost_calls": {"bytes": 4096, "median_s": {"ring": 2e-4}},
            "allreduce_median_s": {str(n): {name: t * 1e-3 for name, t in row.items()}
                                   for n, row in measured_ms.items()}}


@pytest.mark.serial
def test_model_check_predicts_each_launch_from_its_own_fits(tmp_path, capsys):
    import model_check

    records = [launch_record("l1", 8e-9, {1 << 20: {"native": 12.0, "ring": 10.0}}),
               launch_record("l2", 12e-9, {1 << 20: {"native": 9.0, "ring": 14.0}}),
               launch_record("l3", 9e-9, {1 << 20: {"native": 15.0, "ring": 11.0}})]
    paths = []
    for record in records:
        paths.append(str(tmp_path / f"{record['label']}.json"))
        with open(paths[-1], "w") as f:
            json.dump(record, f)
    own = [model_check.check(r)[2][0]["predicted_s"] for r in records]
    assert len(set(own)) == 3  # the launches' betas give three different predictions
    with pytest.raises(SystemExit):
        model_check.main(paths)  # several launches without -o
    out = str(tmp_path / "combined.json")
    model_check.main(["-o", out, *paths])
    with open(out) as f:
        combined = json.load(f)
    assert combined["launches"] == ["l1", "l2", "l3"]
    assert combined["allreduce_median_s"] == {str(1 << 20): {"native": pytest.approx(12e-3),
                                                            "ring": pytest.approx(11e-3)}}
    [row] = combined["model"]["rows"]
    assert row["predicted_s"] == pytest.approx(sorted(own)[1]) and row["measured_s"] == pytest.approx(11e-3)
    assert row["launch_errors"] == pytest.approx([p / m - 1 for p, m in zip(own, (10e-3, 14e-3, 11e-3))])
    for path, p in zip(paths, own):
        with open(path) as f:
            assert json.load(f)["model"]["rows"][0]["predicted_s"] == pytest.approx(p)
    assert "per launch:" in capsys.readouterr().out
    # The combination given back as if it were a launch: a message naming its launches, and
    # the file left as it was (model_check writes each launch's model into the launch's file).
    with open(out) as f:
        before = f.read()
    with pytest.raises(SystemExit, match=r"combined.json is a combination of the launches l1, l2, l3"):
        model_check.main([out])
    with open(out) as f:
        assert f.read() == before
    # A wrong file after a good one: the good one does not get its model written either.
    with open(paths[1], "w") as f:
        json.dump(records[1], f)
    with open(paths[1]) as f:
        good = f.read()
    with open(paths[0], "w") as f:
        json.dump({"results": []}, f)
    with pytest.raises(SystemExit, match="not a bench/net/measure.py result .*no label, layout, links, allreduce_median_s"):
        model_check.main(["-o", out, paths[1], paths[0]])
    with open(paths[1]) as f:
        assert f.read() == good
    with open(paths[0], "w") as f:
        json.dump(records[0], f)
    records[2]["layout"]["hosts"] = {"ctb-n0": [1], "ctb-n1": [0]}
    with open(paths[2], "w") as f:
        json.dump(records[2], f)
    with pytest.raises(SystemExit, match="different layouts"):
        model_check.main(["-o", out, *paths])
