"""The ``auto`` decision table (collectives.tuning): round trip, auto following a hand-written
table, the explain text, and malformed files."""
import json

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import comm as comm_module, registry, tuning
from collectives.exchange import FUSED_BYTES
from bench import tune


def _write(path, collectives_rows, fmt=tuning.FORMAT):
    path.write_text(json.dumps({"format": fmt, "metadata": {"by": "hand"}, "collectives": collectives_rows}))
    return str(path)


@pytest.mark.serial
def test_shipped_table_loads_and_covers_every_collective():
    table = registry.load_table(tuning.DEFAULT_PATH)
    for collective in collectives.ALGORITHMS:
        for size in (1, 2, 3, 8, 64):
            for nbytes in (0, 8, 1 << 16, 1 << 26):
                assert table.lookup(collective, size, nbytes), (collective, size, nbytes)


@pytest.mark.serial
def test_round_trip(tmp_path):
    rows = {"allreduce": [{"ranks": [1, 4], "bytes": [0, 100], "algorithm": "allreduce_binomial"},
                          {"ranks": [5, None], "bytes": [0, None], "algorithm": "allreduce_ring"}],
            "barrier": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "barrier_linear"}]}
    path = _write(tmp_path / "t.json", rows)
    table = registry.load_table(path)
    again = tmp_path / "again.json"
    tuning.write(table, str(again))
    assert json.loads(again.read_text()) == {"format": tuning.FORMAT, "metadata": {"by": "hand"},
                                             "collectives": rows}
    assert [r.algorithm for r in table.lookup("allreduce", 4, 100)] == ["allreduce_binomial"]
    assert table.lookup("allreduce", 4, 101) == []
    assert [r.algorithm for r in table.lookup("allreduce", 9, 1 << 30)] == ["allreduce_ring"]


@pytest.mark.serial
def test_short_names_resolve(tmp_path):
    path = _write(tmp_path / "t.json", {"bcast": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "binomial"}]})
    assert registry.load_table(path).rows["bcast"][0].algorithm == "bcast_binomial"


def _sweep_rows(collective, times):
    """Benchmark result rows from {size: {algorithm: p50}}, with native and auto rows to ignore."""
    rows = []
    for size, by_name in times.items():
        for name, p50 in {**by_name, "native": 0.1, "auto": 0.1, "default": 0.1}.items():
            rows.append({"size": size, "algorithm": name, "place": "out", "p50(us)": p50})
    return [{"collective": collective, "rows": rows}]


@pytest.mark.serial
def test_tune_builds_ranges_from_measured_winners():
    rd, ring, seg = "allreduce_recursive_doubling", "allreduce_ring", "allreduce_ring_segmented"
    small = {8: {rd: 1.0, ring: 2.0}, 64: {rd: 1.0, ring: 1.02},  # ring within 3%: rd kept
             4096: {rd: 3.0, ring: 2.0}, 1 << 20: {rd: 9.0, ring: 5.0, seg: 4.0}}
    sweeps = {2: _sweep_rows("allreduce", small), 3: _sweep_rows("allreduce", small),
              4: _sweep_rows("allreduce", {8: {rd: 1.0, ring: 2.0}, 4096: {rd: 1.0, ring: 2.0}})}
    table = tune.build(sweeps, 0.03, {"note": "synthetic"})
    got = [r.as_json() for r in table.rows["allreduce"]]
    assert got == [{"ranks": [1, 3], "bytes": [0, 64], "algorithm": rd},
                   {"ranks": [1, 3], "bytes": [65, 4096], "algorithm": ring},
                   {"ranks": [1, 3], "bytes": [4097, None], "algorithm": seg},
                   {"ranks": [4, 4], "bytes": [0, None], "algorithm": rd},
                   {"ranks": [1, None], "bytes": [0, None], "algorithm": "allreduce_all_to_all"}]
    assert table.metadata["winners"]["allreduce"]["2"][0] == (8, rd)
    # Ranked by the fastest sample instead: binomial's min beats recursive doubling's.
    rows = [{"size": 8, "place": "out", "algorithm": a, "p50(us)": p50, "min(us)": low}
            for a, p50, low in ((rd, 1.0, 0.9), ("allreduce_binomial", 2.0, 0.5))]
    assert tune.winners(rows, 0.03) == [(8, rd)] and tune.winners(rows, 0.03, "min") == [(8, "allreduce_binomial")]
    # Unmeasured collectives get a row for every call.
    assert [r.algorithm for r in table.lookup("gather", 64, 1 << 30)] == ["gather_linear"]
    # With a base table, its rows follow the measured ones: the choice beyond what was measured;
    # its rows of a shared segment, its fused row (taken only with the check on, which the sweep
    # does not measure) and its rows of several nodes (which a sweep on one node does not
    # measure) stay first.
    base = registry.load_table(tune.BASE)
    based = tune.build(sweeps, 0.03, {}, base=base)
    base_rows = [r.as_json() for r in base.rows["allreduce"]]
    shared = [row for row in base_rows if row.get("transport") == "shm"]
    k = len(shared)
    assert shared and base_rows[:k] == shared
    fused = [{"ranks": [1, None], "bytes": [0, FUSED_BYTES], "algorithm": "allreduce_fused"}]
    assert base_rows[k:k + 1] == fused
    layouts = [row for row in base_rows if "nodes" in row]
    assert layouts and base_rows[k + 1:k + 1 + len(layouts)] == layouts
    assert [r.as_json() for r in based.rows["allreduce"]] == (shared + fused + layouts + got[:4]
                                                             + base_rows[k + 1 + len(layouts):])
    assert based.lookup("allreduce", 64, 8)[0].algorithm == base.lookup("allreduce", 64, 8)[0].algorithm
    assert [r.algorithm for r in based.rows["gather"]] == [r.algorithm for r in base.rows["gather"]]


def _allreduce(c, n):
    x = np.arange(n, dtype=np.float32) + c.rank
    got, want = np.empty_like(x), np.empty_like(x)
    c.Allreduce(x, got)
    MPI.COMM_WORLD.Allreduce(x, want)
    np.testing.assert_array_equal(got, want)
    return c.last_algorithm


def test_auto_follows_a_hand_written_table(tmp_path, monkeypatch):
    size = MPI.COMM_WORLD.size
    other = size + 1  # a rank range this launch does not match
    path = _write(tmp_path / "t.json", {
        "allreduce": [{"ranks": [other, None], "bytes": [0, None], "algorithm": "allreduce_ring"},
                      {"ranks": [1, size], "bytes": [0, 400], "algorithm": "allreduce_binomial"},
                      {"ranks": [1, size], "bytes": [401, None], "algorithm": "allreduce_round_robin"}],
        "bcast": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "bcast_scatter_allgather"}]})
    monkeypatch.setenv("COLLECTIVES_TUNING", path)
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    monkeypatch.delenv("COLLECTIVES_BCAST", raising=False)
    for check in (True, False):
        c = collectives.Comm(MPI.COMM_WORLD, check=check)
        assert _allreduce(c, 100) == "allreduce_binomial"  # 400 B: the second row
        assert _allreduce(c, 101) == "allreduce_round_robin"  # 404 B: the third
        buf = np.arange(10, dtype=np.int64) if c.rank == 0 else np.zeros(10, np.int64)
        c.Bcast(buf)
        np.testing.assert_array_equal(buf, np.arange(10))
        assert c.last_algorithm == "bcast_scatter_allgather"
        # A collective the table leaves out runs its first applicable algorithm.
        c.Barrier()
        assert c.last_algorithm == collectives.names("barrier")[0]
        c.Free()


@pytest.mark.mpi(min_size=2)
def test_a_row_whose_algorithm_does_not_apply_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "MAX_SCRATCH_ELEMENTS", MPI.COMM_WORLD.size - 1)
    path = _write(tmp_path / "t.json", {
        "allreduce": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "allreduce_all_to_all"},
                      {"ranks": [1, None], "bytes": [0, None], "algorithm": "allreduce_ring"}]})
    monkeypatch.setenv("COLLECTIVES_TUNING", path)
    comm = collectives.Comm(MPI.COMM_WORLD)
    assert _allreduce(comm, 50) == "allreduce_ring"
    text = comm.explain("allreduce", 50)
    assert text.startswith("allreduce_ring: auto: allreduce row 1 (ranks 1.., bytes 0..) of " + path)
    assert "skipped row 0" in text and "COLLECTIVES_MAX_SCRATCH" in text
    comm.Free()


def test_explain_names_the_request_row_or_fallback(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", {
        "allreduce": [{"ranks": [1, None], "bytes": [0, 64], "algorithm": "allreduce_binomial"}]})
    monkeypatch.setenv("COLLECTIVES_TUNING", path)
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    comm = collectives.Comm(MPI.COMM_WORLD)
    row0 = f"allreduce row 0 (ranks 1.., bytes 0..64) of {path}"
    assert comm.explain("allreduce", 16) == f"allreduce_binomial: auto: {row0}"
    beyond = comm.explain("allreduce", 17, "float32")
    assert beyond.startswith(f"{collectives.names('allreduce')[0]}: auto: no usable allreduce row of {path} for "
                             f"{comm.size} ranks and 68 bytes")
    assert comm.explain("allreduce", 16, algorithm="ring") == "allreduce_ring: allreduce_ring (per call)"
    monkeypatch.setenv("COLLECTIVES_ALLREDUCE", "round_robin")
    assert comm.explain("allreduce", 16) == f"allreduce_binomial: auto: {row0}"  # read when the Comm was made
    forced = collectives.Comm(MPI.COMM_WORLD)
    assert forced.explain("allreduce", 16) == "allreduce_round_robin: allreduce_round_robin (COLLECTIVES_ALLREDUCE)"
    forced.Free()
    per_comm = collectives.Comm(MPI.COMM_WORLD, algorithms={"allreduce": "ring_segmented"})
    assert per_comm.explain("allreduce", 16) == "allreduce_ring_segmented: allreduce_ring_segmented (per Comm)"
    if comm.size > 1:
        monkeypatch.setattr(registry, "MAX_SCRATCH_ELEMENTS", comm.size - 1)
        assert comm.explain("allreduce", 16, algorithm="all_to_all") == (
            "allreduce_binomial: allreduce_all_to_all (per call) does not apply: needs (p - 1) x count elements "
            f"of scratch, over COLLECTIVES_MAX_SCRATCH; auto: {row0}")
    with pytest.raises(ValueError, match="unknown collective 'allreduc'"):
        comm.explain("allreduc", 16)
    per_comm.Free()
    comm.Free()


def test_explain_mode_prints_a_line_per_call(monkeypatch, capsys):
    monkeypatch.setenv("COLLECTIVES_EXPLAIN", "1")
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    monkeypatch.delenv("COLLECTIVES_TUNING", raising=False)
    comm = collectives.Comm(MPI.COMM_WORLD)
    capsys.readouterr()
    for _ in range(2):
        name = _allreduce(comm, 4)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[collectives explain]")]
    assert lines == [f"[collectives explain] rank {comm.rank}/{comm.size} allreduce 16 B -> "
                     + comm.explain("allreduce", 4)] * 2
    assert lines[0].split("-> ")[1].startswith(name + ": auto: allreduce row ")
    comm.Free()


@pytest.mark.parametrize("content, problem", [
    (None, "cannot read it"),
    ("{not json", "not valid JSON"),
    ('{"collectives": {}}', "not a decision table"),
    ({"allreduce": {}}, "collectives.allreduce must be a list of rows"),
    ({"allreduc": []}, "unknown collective 'allreduc'"),
    ({"allreduce": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "rings"}]},
     "collectives.allreduce[0].algorithm: unknown allreduce algorithm 'rings'"),
    ({"allreduce": [{"ranks": [1, None], "bytes": [0, None], "transport": "rdma", "algorithm": "ring"}]},
     "collectives.allreduce[0].transport: one of p2p, shm, got 'rdma'"),
    ({"allreduce": [{"ranks": [1, None], "nodes": [0, 2], "bytes": [0, None], "algorithm": "ring"}]},
     "collectives.allreduce[0].nodes: empty or out of range"),
    ({"allreduce": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "bcast_binomial"}]},
     "unknown allreduce algorithm"),
    ({"bcast": [{"ranks": [4, 2], "bytes": [0, None], "algorithm": "binomial"}]},
     "collectives.bcast[0].ranks: empty or out of range"),
    ({"bcast": [{"ranks": [0, 2], "bytes": [0, None], "algorithm": "binomial"}]}, "ranks: empty or out of range"),
    ({"bcast": [{"ranks": [1, 2], "bytes": [0, "8K"], "algorithm": "binomial"}]},
     "collectives.bcast[0].bytes: want [low, high] with integer low"),
    ({"bcast": [{"ranks": [1, 2], "algorithm": "binomial"}]}, "collectives.bcast[0]: missing bytes"),
    ({"bcast": [{"ranks": [1, 2], "bytes": [0, 1], "algorithm": "binomial", "x": 1}]},
     "ranks, nodes, per_node, bytes, transport, algorithm only"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path, monkeypatch, content, problem):
    path = tmp_path / "bad.json"
    if isinstance(content, dict):
        _write(path, content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(tuning.TuningError) as info:
        registry.load_table(str(path))
    assert str(info.value).startswith(f"tuning table {path}: ") and problem in str(info.value)
    # A call under COLLECTIVES_TUNING=bad raises the same error (on every rank alike).
    monkeypatch.setenv("COLLECTIVES_TUNING", str(path))
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    comm = collectives.Comm(MPI.COMM_WORLD)
    with pytest.raises(tuning.TuningError, match="tuning table "):
        comm.Allreduce(np.ones(4, np.float32), np.empty(4, np.float32))
    comm.Free()


@pytest.mark.serial
def test_repeat_mode_reports_auto_against_the_best_named_algorithm():
    from bench.launches import auto_vs_best

    def launch(auto, ring):
        rows = [("native", 1.0), ("default", 9.0), ("auto", auto), ("allreduce_ring", ring),
                ("allreduce_binomial", 3.0)]
        return {"rows": [{"size": 8, "place": "out", "algorithm": a, "p50(us)": t} for a, t in rows]
                + [{"size": 64, "place": "out", "algorithm": "auto", "p50(us)": None}]}

    # Per launch best / auto: 1.9 / 2.0, 2.0 / 2.0 (auto ran the best), 1.0 / 2.0.
    assert auto_vs_best([launch(2.0, 1.9), launch(2.0, 2.0), launch(2.0, 1.0)]) == {(8, "out"): (0.95, 0.5, 1.0)}


@pytest.mark.serial
def test_repeat_mode_sets_auto_beside_its_own_choice_by_name():
    from bench.launches import auto_vs_itself

    def launch(auto, ring, ran="allreduce_ring"):
        rows = [("native", 1.0, None), ("auto", auto, ran), ("allreduce_ring", ring, None),
                ("allreduce_binomial", 0.5, None)]
        return {"rows": [{"size": 8, "place": "out", "algorithm": a, "p50(us)": t, **({"ran": r} if r else {})}
                         for a, t, r in rows]
                + [{"size": 64, "place": "out", "algorithm": "auto", "p50(us)": 3.0, "ran": "allreduce_ring"}]}

    # The ring by name / auto, which ran the ring: 1.9 / 2.0, 2.2 / 2.0, 2.0 / 2.0; the binomial
    # row, faster, is not auto's choice and does not count; 64 B has no ring row, and a launch
    # whose auto ran another algorithm has nothing to set beside it.
    got = auto_vs_itself([launch(2.0, 1.9), launch(2.0, 2.2), launch(2.0, 2.0), launch(2.0, 9.0, "allreduce_tree")])
    assert got.keys() == {(8, "out")}
    assert got[(8, "out")] == pytest.approx((1.0, 0.95, 1.1))


@pytest.mark.serial
def test_tune_merges_launches_by_median_p50_and_least_min():
    def launch(p50s, mins, order=(0, 1)):
        rows = [{"size": 8, "place": "out", "algorithm": a, "p50(us)": p, "min(us)": m}
                for a, p, m in zip(("allreduce_ring", "allreduce_binomial"), p50s, mins)]
        return [{"collective": "allreduce", "rows": [rows[i] for i in order]}]
    merged = tune.merge([launch((1.0, 5.0), (0.5, 4.0)), launch((9.0, 2.0), (0.7, 1.0)),
                         launch((2.0, None), (0.6, None))])
    rows = merged[0]["rows"]
    assert [(r["p50(us)"], r["min(us)"]) for r in rows] == [(2.0, 0.5), (None, None)]
    assert tune.winners(rows, 0.03) == [(8, "allreduce_ring")]
    # Rows, and results, in another order in a later launch are matched by what they measure.
    other = {"collective": "bcast", "rows": [{"size": 8, "place": "out", "algorithm": "bcast_binomial",
                                              "p50(us)": 3.0, "min(us)": 2.0}]}
    merged = tune.merge([launch((1.0, 5.0), (0.5, 4.0)) + [other],
                         [other] + launch((4.0, 6.0), (0.7, 1.0), order=(1, 0)),
                         launch((2.0, 9.0), (0.6, 3.0), order=(1, 0)) + [other]])
    assert [(r["algorithm"], r["p50(us)"], r["min(us)"]) for r in merged[0]["rows"]] == [
        ("allreduce_ring", 2.0, 0.5), ("allreduce_binomial", 6.0, 1.0)]
    assert merged[1]["rows"][0]["p50(us)"] == 3.0
    with pytest.raises(ValueError, match="launch 2 of 2 has no row for allreduce size 8 place out "
                                         "allreduce_binomial"):
        tune.merge([launch((1.0, 5.0), (0.5, 4.0)),
                    [{"collective": "allreduce", "rows": launch((1.0, 5.0), (0.5, 4.0))[0]["rows"][:1]}]])


@pytest.mark.serial
def test_rows_keyed_by_layout_and_transport():
    """A row with nodes, per_node or transport covers only the communicators they describe; one
    without them covers every layout; a node-aware algorithm may be a row's."""
    table = tuning.parse({"format": tuning.FORMAT, "collectives": {"allreduce": [
        {"ranks": [1, None], "nodes": [2, None], "per_node": [2, None], "bytes": [0, None], "algorithm": "hierarchical"},
        {"ranks": [1, None], "nodes": [2, None], "bytes": [0, None], "algorithm": "ring"},
        {"ranks": [1, None], "bytes": [0, None], "transport": "shm", "algorithm": "binomial"},
        {"ranks": [1, None], "bytes": [0, None], "algorithm": "recursive_doubling"}]}}, registry.row_name)
    first = {name: table.lookup("allreduce", topo, 64)[0].algorithm for name, topo in {
        "2 nodes of 2": registry.Topology(4, (2, 2)), "4 nodes of 1": registry.Topology(4, (1, 1, 1, 1)),
        "one node, shared": registry.Topology(4, (), True), "one node": registry.Topology(4)}.items()}
    assert first == {"2 nodes of 2": "allreduce_hierarchical", "4 nodes of 1": "allreduce_ring",
                     "one node, shared": "allreduce_binomial", "one node": "allreduce_recursive_doubling"}
    assert table.rows["allreduce"][0].describe() == "row 0 (ranks 1.., nodes 2.., ranks per node 2.., bytes 0..)"
    assert tuning.parse(table.as_json(), registry.row_name).as_json() == table.as_json()
