"""Smoke test of the benchmark script (bench/collectives.py): it runs, lists every contender, checks results."""
import numpy as np
import pytest

import collectives
from bench import collectives as bench
from bench.common import sizes


@pytest.mark.parametrize("collective", list(bench.SPEC))
def test_sweep(mpi_comm, collective):
    # 8 B: fewer elements than ranks for the all-reduce, one per rank where the data splits.
    result = bench.sweep(mpi_comm, collective, [8], budget=0.0, min_reps=1, max_reps=1, sample_s=0.0)
    counts = bench.counts_for(collective, [8], mpi_comm.size)
    want = [bench.NATIVE_LABEL, bench.DEFAULT, bench.AUTO] + collectives.names(collective)
    skipped = {(s["size"], s["algorithm"]) for s in result["skipped"]}
    for count in counts:
        got = [row["algorithm"] for row in result["rows"] if row["size"] == count * 4]
        assert got == [n for n in want if (count * 4, n) not in skipped], f"{collective} {count}"
    assert all(row["#wrong"] == 0 for row in result["rows"]), result["rows"]
    assert [s["size"] for s in result["summary"]] == [c * 4 for c in counts]
    # The best named algorithm is never the default or auto row, which are reported beside it.
    assert all(s["best"] in collectives.names(collective) for s in result["summary"])
    assert all(s["default"] > 0 and s["auto"] > 0 for s in result["summary"])


def test_check_catches_wrong_results(mpi_comm):
    case = bench.Case("allreduce", 100, mpi_comm)
    assert case.check(lambda: None) == 100
    assert case.check(lambda: case.out.__setitem__(slice(None), case.want)) == 0


def test_sizes():
    assert sizes(8, 64 << 20, 4) == [8, 16] + [16 * 4**k for k in range(1, 12)]
    assert np.all(np.diff(sizes(8, 1000, 3)) > 0)
