"""The benchmark (bench/): every collective and point-to-point test runs and checks results, and
its OSU and nccl-tests output reads the way those tools' users parse theirs."""
import argparse

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from bench import cases, cli, harness, nonblocking, p2p, report
from bench.common import NONBLOCKING_TESTS, P2P_TESTS, blocking, sizes

QUICK = dict(budget=0.0, min_reps=1, sample_s=0.0, iterations=1, warmup=0)


def _ours(collective):
    """Our rows of a test of ``collective``: default, auto and every algorithm by name (a
    v-form's are its collective's); [] where MPI's own call is all there is."""
    registered = cases.REGISTERED.get(collective, collective)
    if registered not in collectives.ALGORITHMS:
        return []
    return [cases.DEFAULT, cases.AUTO] + collectives.names(registered) + collectives.shm_names(registered)


@pytest.mark.parametrize("collective", list(cases.SPEC))
def test_sweep(mpi_comm, collective):
    # 8 B: fewer elements than ranks for the all-reduce, one per rank where the data splits.
    result = harness.sweep(mpi_comm, collective, [8], places=("out", "in"), validate=True, **QUICK)
    counts = cases.counts_for(collective, [8], mpi_comm.size)
    ours = _ours(collective)
    want = [cases.NATIVE_LABEL] + ours
    places = ["out"] if collective in cases.NO_IN_PLACE else ["out", "in"]
    skipped = {(s["size"], s["algorithm"]) for s in result["skipped"]}
    for count in counts:
        size = count * 4 if collective != "barrier" else 0
        got = [(row["algorithm"], row["place"]) for row in result["rows"] if row["size"] == size]
        assert got == [(n, p) for n in want if (size, n) not in skipped for p in places], f"{collective} {count}"
    assert all(row["#wrong"] == 0 and row["p50(us)"] > 0 for row in result["rows"]), result["rows"]
    assert all(row["min(us)"] <= row["p50(us)"] <= row["p99(us)"] <= row["max(us)"] for row in result["rows"])
    if ours:
        # The best named algorithm is never the default or auto row, which are reported beside it.
        assert [s["size"] for s in result["summary"]] == [c * 4 if collective != "barrier" else 0 for c in counts]
        assert all(s["best"] in ours[2:] for s in result["summary"])
        assert all(s["default"] > 0 and s["auto"] > 0 for s in result["summary"])


@pytest.mark.parametrize("dtype,op", [("float64", "sum"), ("int32", "max"), ("int64", "min")])
@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "reduce"])
def test_dtypes_ops_root(mpi_comm, collective, dtype, op):
    root = mpi_comm.size - 1
    result = harness.sweep(mpi_comm, collective, [1000], algorithms=["auto"], dtype=dtype, op=op, root=root,
                         places=("out", "in"), **QUICK)
    assert {row["algorithm"] for row in result["rows"]} == {cases.NATIVE_LABEL, cases.DEFAULT, cases.AUTO}
    assert all(row["#wrong"] == 0 for row in result["rows"])
    assert {row["type"] for row in result["rows"]} == {cases.DTYPES[dtype]}
    assert {row["root"] for row in result["rows"]} == {root if collective == "reduce" else -1}


@pytest.mark.parametrize("collective", [c for c in cases.SPEC if c != "barrier"])
def test_check_catches_wrong_results(mpi_comm, collective):
    work = cases.workspace(mpi_comm, collective)
    try:
        case = cases.Case(collective, 4 * mpi_comm.size, work, "int32")
        if case.want is not None and case.prefill is None:  # a rank that receives nothing, or
            # holds the result already (the root of a broadcast), has nothing to check
            assert case.check(lambda: None) == case.want.size
            assert case.check(lambda: case.out.__setitem__(slice(0, case.want.size), case.want)) == 0
        # The exact reference is independent of ours: native MPI agrees with it.
        assert case.check(case.bound(work)) == 0
    finally:
        if work is not mpi_comm:
            work.Free()


@pytest.mark.parametrize("collective", ["allreduce", "bcast", "gather"])
def test_bound_calls_run_what_they_name(mpi_comm, collective):
    # The timed loop's calls (Case.bound): native, auto, and each algorithm by name, every one
    # checked against the exact result and, for ours, by the algorithm the Comm says it ran.
    case = cases.Case(collective, 4 * mpi_comm.size, mpi_comm, "int32")
    ours = collectives.Comm(mpi_comm, check=False)
    try:
        assert case.check(case.bound(mpi_comm)) == 0
        assert case.check(case.bound(ours)) == 0
        for name in collectives.names(collective):
            assert case.check(case.bound(ours, algorithm=name)) == 0 and ours.last_algorithm == name
    finally:
        ours.Free()


def test_failed_row_is_never_timed(mpi_comm, monkeypatch):
    # A contender that computes nothing: its row must carry the wrong count and no time.  The
    # native contender's call is the one bound to the mpi4py communicator itself.
    bound = cases.Case.bound

    def tagged(self, comm, **kw):
        call = bound(self, comm, **kw)
        call.native = comm is mpi_comm
        return call
    monkeypatch.setattr(cases.Case, "bound", tagged)
    monkeypatch.setattr(cases.Case, "check", lambda self, call: 3 if getattr(call, "native", False) else 0)
    result = harness.sweep(mpi_comm, "allreduce", [64], algorithms=["auto"], **QUICK)
    native = [row for row in result["rows"] if row["algorithm"] == cases.NATIVE_LABEL]
    assert [row["#wrong"] for row in native] == [3 * mpi_comm.size]
    assert native[0]["p50(us)"] is None and native[0]["busbw(GB/s)"] is None and native[0]["iters"] == 0
    assert result["summary"] == []
    text = report.nccl(result) + report.osu(result)
    assert any(line.startswith("# FAILED validation: size 64") for line in text)
    assert not any(line.split()[:1] == ["64"] and "N/A" not in line for line in report.nccl(result)[:8])


def test_iterations_and_warmup(mpi_comm):
    calls = 0

    def call():
        nonlocal calls
        calls += 1

    samples, batch = harness.measure(mpi_comm, [call], budget=60.0, iterations=7, warmup=3, sample_s=0.0)
    assert batch[0] == 1 and len(samples[0]) == 7
    assert calls == 3 + 2 + 7  # warm-up, the two estimating calls, the timed ones
    assert harness.osu_counts(8) == (1000, 200) and harness.osu_counts(8192) == (100, 10)
    assert harness.osu_counts(8, 5, 0) == (5, 0)
    assert harness.osu_counts(8, defaults=p2p.OSU_P2P["latency"]) == (10000, 100)


def test_interleave_order(mpi_comm):
    # Every rank times the calls in the same order (else the collectives would pair up wrongly),
    # and no call always runs right after the same one: its predecessor's cache footprint
    # would bias it (a rotated fixed order has that fault).
    trace = []
    calls = [lambda j=j: trace.append(j) for j in range(5)]
    harness.measure(mpi_comm, calls, budget=60.0, iterations=40, warmup=0, sample_s=0.0)
    timed = trace[2 * len(calls):]  # after each call's two estimating calls
    assert sorted(timed) == sorted(list(range(5)) * 40)
    assert mpi_comm.allgather(timed) == [timed] * mpi_comm.size
    reps = [timed[i:i + 5] for i in range(0, len(timed), 5)]
    assert all(sorted(rep) == list(range(5)) for rep in reps)
    for j in range(5):
        before = {rep[rep.index(j) - 1] for rep in reps if rep.index(j)}
        assert len(before) > 1, (j, before)


@pytest.mark.parametrize("test", P2P_TESTS)
def test_p2p(mpi_comm, test):
    if mpi_comm.size < 2:
        with pytest.raises(ValueError, match="at least 2 ranks"):
            p2p.sweep(mpi_comm, test, [8], **QUICK)
        return
    result = p2p.sweep(mpi_comm, test, [1, 4096], validate=True, **QUICK)
    assert [(row["size"], row["algorithm"]) for row in result["rows"]] == [
        (s, n) for s in (1, 4096) for n in (p2p.NATIVE, p2p.OURS)]
    assert all(row["#wrong"] == 0 and row["p50(us)"] > 0 for row in result["rows"])
    assert all((row["MB/s"] is None) == (test == "latency") for row in result["rows"])
    ours = collectives.Comm(mpi_comm, check=False)
    try:
        case = p2p.P2PCase(test, 100, mpi_comm, ours)
        # Nothing sent: every receiving rank counts every byte wrong.
        wrong = mpi_comm.allreduce(case.check(lambda: None))
        receivers = {"bw": 1, "exchange": mpi_comm.size}.get(test, 2)
        assert wrong == receivers * 100
    finally:
        ours.Free()


@pytest.mark.parametrize("test", NONBLOCKING_TESTS)
def test_nonblocking_sweep(mpi_comm, test):
    # Every contender of the blocking test, through its I-method, checked before and after its
    # timed calls; OSU's four columns (and the post's and the wait's times) on every row.
    collective = blocking(test)
    places = ["out"] if collective in cases.NO_IN_PLACE else ["out", "in"]
    result = nonblocking.sweep(mpi_comm, test, [64], places=places, validate=True, **QUICK)
    ours = _ours(collective)
    skipped = {s["algorithm"] for s in result["skipped"]}
    assert [(row["algorithm"], row["place"]) for row in result["rows"]] == [
        (n, p) for n in [cases.NATIVE_LABEL] + ours if n not in skipped for p in places]
    rows = result["rows"]
    # Open MPI 5.0's Ineighbor_alltoall puts the two blocks of a dimension of size 1 or 2 (the
    # grid's at up to 4 ranks) the other way round from MPI-4's order, which its blocking
    # Neighbor_alltoall and ours follow: the sweep counts its elements wrong and never times it.
    diverges = test == "ineighbor_alltoall" and MPI.Get_library_version().startswith("Open MPI")
    if diverges:
        native = [row for row in rows if row["algorithm"] == cases.NATIVE_LABEL]
        assert all(row["#wrong"] > 0 and row["overall(us)"] is None for row in native), native
        rows = [row for row in rows if row["algorithm"] != cases.NATIVE_LABEL]
    for row in rows:
        assert row["#wrong"] == 0 and row["iters"] >= 1 and row["comm_iters"] >= 1, row
        assert all(row[key] >= 0 for key in nonblocking.TIMES), row
        assert row["overall(us)"] > 0 and row["pure_comm(us)"] > 0 and 0 <= row["overlap(%)"] <= 100, row
        # The row's overlap is the formula's on the row's own times (in any unit).
        assert row["overlap(%)"] == pytest.approx(
            nonblocking.overlap(row["overall(us)"], row["compute(us)"], row["pure_comm(us)"]))
        if not diverges:
            assert row["native/ours"] == pytest.approx(
                next(n["overall(us)"] for n in rows if n["algorithm"] == cases.NATIVE_LABEL
                     and n["place"] == row["place"]) / row["overall(us)"])
    assert [s["size"] for s in result["summary"]] == ([rows[0]["size"]] if ours and not diverges else [])
    assert all(0 <= s["native overlap(%)"] <= 100 and s["default"] > 0 and s["auto"] > 0 for s in result["summary"])
    data = _parse_osu(report.osu(result))
    assert len(data) == len(rows)
    for row in data:
        # Size, Overall, Compute, Pure Comm., Overlap(%) as osu_iallreduce; Coll. Init, MPI_Wait, Iterations.
        assert len(row) == 8 and int(row[0]) == rows[0]["size"] and float(row[1]) > 0
        assert float(row[3]) > 0 and 0 <= float(row[4]) <= 100 and int(row[7]) >= 1


@pytest.mark.serial
@pytest.mark.parametrize("overall, compute, pure, want", [
    (30.0, 20.0, 20.0, 50.0),     # half the communication showed beyond the compute
    (35.0, 20.0, 20.0, 25.0),
    (20.0, 20.0, 20.0, 100.0),    # all of it hidden
    (40.0, 20.0, 20.0, 0.0),      # none hidden: post + wait cost the whole pure time
    (55.0, 20.0, 20.0, 0.0),      # worse than none: clipped at 0 (OSU's max(0, ...))
    (15.0, 20.0, 20.0, 100.0),    # overall below the compute (noise): clipped at 100
    (3e-6, 2e-6, 4e-6, 75.0),     # seconds read as microseconds do
    (130.0, 100.0, 40.0, 25.0),   # a compute longer than the communication
    (5.0, 5.0, 0.0, 0.0),         # no communication time: nothing to hide
])
def test_overlap_formula(overall, compute, pure, want):
    assert nonblocking.overlap(overall, compute, pure) == pytest.approx(want)


def test_nonblocking_failed_row_is_never_timed(mpi_comm, monkeypatch):
    # Native's start returns a request of a collective that never ran: its output stays poisoned,
    # so its row carries the wrong count and no time, and OSU's block says FAILED.
    started = cases.Case.started

    class Idle:
        def Wait(self):
            return None

    def idle_native(self, comm, **kw):
        return (lambda: Idle()) if comm is mpi_comm else started(self, comm, **kw)
    monkeypatch.setattr(cases.Case, "started", idle_native)
    result = nonblocking.sweep(mpi_comm, "iallreduce", [64], algorithms=["auto"], **QUICK)
    native = [row for row in result["rows"] if row["algorithm"] == cases.NATIVE_LABEL]
    assert [row["#wrong"] for row in native] == [16 * mpi_comm.size]
    assert all(native[0][key] is None for key in nonblocking.TIMES) and native[0]["iters"] == 0
    assert all(row["#wrong"] == 0 and row["overall(us)"] > 0 and "native/ours" not in row
               for row in result["rows"][1:])
    assert result["summary"] == []
    assert any(line.startswith("# FAILED validation: size 64") for line in report.osu(result))


def _parse_osu(lines):
    """Parse OSU output the way its users' scripts do: skip '#' lines, split on whitespace."""
    return [line.split() for line in lines if line.strip() and not line.startswith("#")]


def test_osu_and_nccl_formats(mpi_comm):
    result = harness.sweep(mpi_comm, "allreduce", [8, 1024], algorithms=["auto"], places=("out", "in"), **QUICK)
    osu = report.osu(result)
    blocks = [i for i, line in enumerate(osu) if line.startswith("# OSU MPI Allreduce Latency Test")]
    assert len(blocks) == 6  # native, default, auto, out of place and in place
    assert osu[blocks[0] + 2].split()[1:6] == ["Size", "Avg", "Latency(us)", "Min", "Latency(us)"]
    for row in _parse_osu(osu):
        size, avg, lo, hi, iters = int(row[0]), float(row[1]), float(row[2]), float(row[3]), int(row[4])
        assert size in (8, 1024) and 0 <= lo <= avg <= hi and iters >= 1
    nccl = report.nccl(result)
    data = [line.split() for line in nccl if line.strip() and not line.startswith("#")]
    assert len(data) == 6
    for row in data:
        # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        assert len(row) == 13 and row[2] == "float" and row[3] == "sum" and row[4] == "-1"
        assert float(row[5]) > 0 and int(row[8]) == 0 and float(row[9]) > 0 and int(row[12]) == 0
    avg = [line for line in nccl if line.startswith("# Avg bus bandwidth")]
    assert len(avg) == 3 and all(float(line.split(":")[1]) >= 0 for line in avg)
    csv = report.csv_text([dict(result, hosts="h")], {"mpi_library": "MPI x", "date_utc": "d", "git": "g"})
    head, *rows = csv.splitlines()
    assert head.split(",")[:3] == ["collective", "np", "size"] and len(rows) == len(result["rows"])


@pytest.mark.serial
def test_command_line_sizes():
    assert cli.parse_bytes("64M") == 64 << 20 and cli.parse_bytes("8") == 8 and cli.parse_bytes("4KiB") == 4096
    assert cli.parse_range("8:64M") == (8, 64 << 20) and cli.parse_range("1K") == (None, 1024)
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        cli.parse_bytes("lots")
    ap = cli.parser()
    assert cli.size_range(ap.parse_args(["-m", "16:1K"])) == (16, 1024, 2)
    assert cli.size_range(ap.parse_args(["-b", "8", "-e", "128M", "-f", "4"])) == (8, 128 << 20, 4)
    args = ap.parse_args(["bcast", "-n", "10", "-w", "2", "-d", "float64", "-o", "max", "-a", "auto", "native"])
    assert (args.iterations, args.warmup, args.datatype, args.op, args.algorithm) == (10, 2, "float64", "max",
                                                                                       ["auto", "native"])
    with pytest.raises(SystemExit):
        cli.size_range(ap.parse_args(["-m", "8:64", "-b", "8"]))
    assert cli.tests_of(["p2p", "allreduce"], ap) == ["latency", "bw", "bibw", "exchange", "allreduce"]
    assert cli.tests_of(["nonblocking", "iallreduce"], ap) == ["i" + test for test in cli.COLLECTIVE_TESTS]
    assert cli.tests_of(["all"], ap) == list(cli.COLLECTIVE_TESTS) and set(cli.COLLECTIVE_TESTS) == set(cases.SPEC)
    assert cli.known_algorithm("ring", ["bcast", "allreduce"]) and cli.known_algorithm("auto", ["bcast"])
    assert not cli.known_algorithm("ring", ["bcast"]) and not cli.known_algorithm("rnig", ["allreduce"])
    assert cli.known_algorithm("ring", ["iallreduce"]) and not cli.known_algorithm("ring", ["ibcast"])
    with pytest.raises(SystemExit):
        cli.main(["allreduce", "-a", "rnig"])


@pytest.mark.parametrize("names", [["ring"], ["allreduce_ring", "binomial"]])
def test_named_algorithms(mpi_comm, names):
    got = [n for n, key, _ in cases.contenders("allreduce", mpi_comm, 100, names)]
    want = [f"allreduce_{n.removeprefix('allreduce_')}" for n in names]
    assert got == [cases.NATIVE_LABEL, cases.DEFAULT, cases.AUTO] + [n for n in collectives.names("allreduce")
                                                                    if n in want]


@pytest.mark.serial
def test_sizes():
    assert sizes(8, 64 << 20, 4) == [8, 16] + [16 * 4**k for k in range(1, 12)]
    assert np.all(np.diff(sizes(8, 1000, 3)) > 0)


def test_state_probe(mpi_comm, capsys):
    """bench.state: its rule on hand figures (the limit itself is not slow), and a run that
    measures and gives every rank the same verdict, or refuses one rank."""
    from bench import state

    assert state.slow(301.0, 46.0) and state.slow(139.0, 46.0)
    assert not state.slow(138.0, 46.0) and not state.slow(80.0, 46.0)
    code = state.main(mpi_comm)
    if mpi_comm.size == 1:
        assert code == 2 and "needs at least 2 ranks" in capsys.readouterr().err
        return
    assert code in (0, 1) and set(mpi_comm.allgather(code)) == {code}
    if mpi_comm.rank == 0:
        out = capsys.readouterr().out
        assert f"collectives.bench.state: np={mpi_comm.size}" in out
        assert out.rstrip().endswith("slow state" if code else "fast state"), out


def test_rows_of_auto_and_default_name_the_algorithm_they_ran(mpi_comm):
    from collectives import config, plans
    from collectives.registry import Shape, decide_for

    n = 64 << 10
    result = harness.sweep(mpi_comm, "allreduce", [n], **QUICK)
    ran = {row["algorithm"]: row.get("ran") for row in result["rows"]}
    # The registry's choice for the call (COLLECTIVES_ALLREDUCE, if the matrix sets it, names both),
    # on a communicator like the harness's (a shared-memory segment where the ranks share one).
    comm = collectives.Comm(mpi_comm)
    where = plans.topology(comm._engine)
    comm.Free()
    for name, checked in ((cases.AUTO, False), (cases.DEFAULT, True)):
        assert ran[name] == decide_for("allreduce", None, None, config.get("COLLECTIVES_ALLREDUCE"),
                                       Shape(n // 4, n), where, checked=checked)[0].name
        assert ran[ran[name]] is None  # a row by that name exists, and it is not one of these two
    assert {name for name, r in ran.items() if r is not None} == {cases.AUTO, cases.DEFAULT}
