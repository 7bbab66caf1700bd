"""collectives-bench --compress: compressed all-reduce rows with their bytes, phase times and error."""
import pytest

from bench import cli, harness
from collectives.compression import chunks

QUICK = dict(budget=0.0, min_reps=1, sample_s=0.0, iterations=2, warmup=0)


def test_compressed_rows(mpi_comm):
    p, n = mpi_comm.size, 4096
    result = harness.sweep(mpi_comm, "allreduce", [4 * n], algorithms=["ring"], compress=["int8", "randk"], **QUICK)
    rows = {row["algorithm"]: row for row in result["rows"]}
    int8, randk = rows["compress:int8"], rows["compress:randk"]
    # int8 (buckets of 512): every rank sends p - 1 chunk payloads in each phase; the biggest chunk
    # is the first one, sent p - 1 times by rank 0 in the all-gather
    size = [hi - lo + 4 * -(-(hi - lo) // 512) for lo, hi in zip(chunks(n, p, 512), chunks(n, p, 512)[1:])]
    assert int8["wire(B)"] == max(sum(size) - s + (p - 1) * s for s in size)
    assert 0 <= randk["wire(B)"] <= 2 * 4 * n // 50
    for row in (int8, randk):
        assert row["#wrong"] == 0 and row["p50(us)"] > 0 and row["native/ours"] > 0
        assert min(row["compress(us)"], row["comm(us)"], row["decompress(us)"]) >= 0
    assert int8["rel.err"] < 2 * 2 / 127  # two roundings of at most a bucket's step each
    assert randk["rel.err"] > 0.5  # 99% of the values stay in the residual on the first calls
    assert result["summary"] and all(s["best"] == "allreduce_ring" for s in result["summary"])


@pytest.mark.serial
def test_compress_needs_allreduce_and_known_names(capsys):
    for argv in (["bcast", "--compress", "int8"], ["allreduce", "--compress", "zip"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert "--compress" in capsys.readouterr().err
