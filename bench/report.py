"""The benchmark's output formats: OSU's and nccl-tests' text tables, CSV and JSON.

Each text format keeps its tool's conventions, so the scripts people already have for it read
ours: data lines are whitespace-separated columns, everything else starts with ``#``.  A row
that failed validation never shows a time: OSU blocks print it as a ``# FAILED`` comment,
nccl-tests blocks print ``N/A`` for its time and bandwidths beside the ``#wrong`` count.
Nonblocking tests have OSU's format only (nccl-tests has none).
"""
import csv
import io

from .common import NONBLOCKING_TESTS, blocking

OSU_TITLES = {"allreduce": "Allreduce", "bcast": "Broadcast", "reduce": "Reduce", "allgather": "Allgather",
              "reduce_scatter": "Reduce_scatter", "alltoall": "All-to-All Personalized Exchange",
              "alltoallv": "All-to-Allv Personalized Exchange", "gather": "Gather", "scatter": "Scatter",
              "barrier": "Barrier", "scan": "Scan", "exscan": "Exscan", "neighbor_allgather": "Neighborhood Allgather",
              "neighbor_alltoall": "Neighborhood All-to-All"}
P2P_TITLES = {"latency": "Latency", "bw": "Bandwidth", "bibw": "Bi-Directional Bandwidth",
              "exchange": "Ring Exchange Latency"}
# Per-row fields of the CSV, then the launch's.
CSV_ROW = ("collective", "np", "size", "count", "type", "redop", "root", "algorithm", "place", "min(us)",
           "p50(us)", "p99(us)", "max(us)", "avg(us)", "iters", "batch", "algbw(GB/s)", "busbw(GB/s)", "MB/s",
           "#wrong", "native/ours", "overall(us)", "compute(us)", "pure_comm(us)", "overlap(%)", "init(us)",
           "wait(us)", "comm_iters", "wire(B)", "compress(us)", "comm(us)", "decompress(us)", "rel.err", "binding",
           "hosts", "mpi_library", "date_utc", "git")


def _contenders(result):
    return list(dict.fromkeys((row["algorithm"], row["place"]) for row in result["rows"]))


def osu(result):
    """OSU blocks, one per contender and placement, as osu_allreduce -f / osu_latency / osu_bw /
    osu_iallreduce print."""
    if result["collective"] in NONBLOCKING_TESTS:
        return osu_overlap(result)
    lines = []
    test = result["collective"]
    for name, place in _contenders(result):
        rows = [row for row in result["rows"] if row["algorithm"] == name and row["place"] == place]
        title = P2P_TITLES.get(test) or OSU_TITLES[test] + " Latency"
        lines += [f"# OSU MPI {title} Test (collectives-bench: {name}{', in place' if place == 'in' else ''}, "
                  f"np={result['np']})",
                  f"# Datatype: {result['dtype']}."]
        bandwidth = test in ("bw", "bibw")
        if bandwidth:
            lines.append(f"# {'Size':<10}{'Bandwidth (MB/s)':>20}{'Iterations':>12}")
        else:
            lines.append(f"# {'Size':<8}{'Avg Latency(us)':>18}{'Min Latency(us)':>18}{'Max Latency(us)':>18}"
                         f"{'Iterations':>12}{'P50 Latency(us)':>18}{'P99 Latency(us)':>18}")
        for row in rows:
            if row["p50(us)"] is None:
                lines.append(f"# FAILED validation: size {row['size']}, {row['#wrong']} wrong elements")
            elif bandwidth:
                lines.append(f"{row['size']:<12}{row['MB/s']:>20.2f}{row['iters']:>12}")
            else:
                lines.append(f"{row['size']:<10}{row['avg(us)']:>18.2f}{row['min(us)']:>18.2f}"
                             f"{row['max(us)']:>18.2f}{row['iters']:>12}{row['p50(us)']:>18.2f}{row['p99(us)']:>18.2f}")
        lines.append("")
    return lines


def osu_overlap(result):
    """OSU blocks of a nonblocking test, one per contender and placement: osu_iallreduce's four
    columns, then the post's and the wait's times (its -f columns Coll. Init and MPI_Wait) and the
    calls timed with the compute."""
    lines = []
    title = "Non-blocking " + OSU_TITLES[blocking(result["collective"])] + " Latency"
    for name, place in _contenders(result):
        rows = [row for row in result["rows"] if row["algorithm"] == name and row["place"] == place]
        lines += [f"# OSU MPI {title} Test (collectives-bench: {name}{', in place' if place == 'in' else ''}, "
                  f"np={result['np']})",
                  "# Overall = Coll. Init + Compute + MPI_Wait (no MPI_Test in the compute)",
                  f"# Datatype: {result['dtype']}.",
                  f"# {'Size':<8}{'Overall(us)':>18}{'Compute(us)':>18}{'Pure Comm.(us)':>18}{'Overlap(%)':>18}"
                  f"{'Coll. Init(us)':>18}{'MPI_Wait(us)':>18}{'Iterations':>12}"]
        for row in rows:
            if row["overall(us)"] is None:
                lines.append(f"# FAILED validation: size {row['size']}, {row['#wrong']} wrong elements")
            else:
                lines.append(f"{row['size']:<10}{row['overall(us)']:>18.2f}{row['compute(us)']:>18.2f}"
                             f"{row['pure_comm(us)']:>18.2f}{row['overlap(%)']:>18.2f}{row['init(us)']:>18.2f}"
                             f"{row['wait(us)']:>18.2f}{row['iters']:>12}")
        lines.append("")
    return lines


def _nccl_half(row):
    if row is None:
        return f"{'N/A':>9} {'N/A':>7} {'N/A':>7} {'N/A':>6}"
    if row["p50(us)"] is None:
        return f"{'N/A':>9} {'N/A':>7} {'N/A':>7} {row['#wrong']:>6}"
    return f"{row['p50(us)']:>9.2f} {row['algbw(GB/s)']:>7.2f} {row['busbw(GB/s)']:>7.2f} {row['#wrong']:>6}"


def nccl(result):
    """nccl-tests blocks, one per contender: out-of-place and in-place halves, then the average
    bus bandwidth over the timed rows (the time column is the p50, in us)."""
    lines = []
    for name in dict.fromkeys(row["algorithm"] for row in result["rows"]):
        rows = [row for row in result["rows"] if row["algorithm"] == name]
        by_size = {}
        for row in rows:
            by_size.setdefault(row["size"], {})[row["place"]] = row
        lines += [f"# collectives-bench {result['collective']}: {name}, np={result['np']}",
                  f"#{'':>53}{'out-of-place':>22}{'in-place':>33}",
                  f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6} {'root':>6} "
                  f"{'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}",
                  f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6} {'':>6} "
                  f"{'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6} {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"]
        for size, got in by_size.items():
            first = next(iter(got.values()))
            lines.append(f"{size:>12} {first['count']:>12} {first['type']:>8} {first['redop']:>6} {first['root']:>6} "
                         f"{_nccl_half(got.get('out'))} {_nccl_half(got.get('in'))}")
        timed = [row["busbw(GB/s)"] for row in rows if row["p50(us)"] is not None]
        wrong = sum(row["#wrong"] for row in rows)
        lines += [f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
                  f"# Avg bus bandwidth    : {sum(timed) / len(timed) if timed else 0.0:.6g} ", "#", ""]
    return lines


def csv_text(results, env):
    """CSV with a header line: one line per row of every result, the launch's settings repeated."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_ROW, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for result in results:
        for row in result["rows"]:
            writer.writerow({**row, "collective": result["collective"], "np": result["np"],
                             "binding": result["binding"], "hosts": result["hosts"],
                             "mpi_library": env["mpi_library"], "date_utc": env["date_utc"], "git": env["git"]})
    return out.getvalue()
