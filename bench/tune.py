"""``collectives-bench tune``: measure every algorithm, write the ``auto`` decision table.

    collectives-bench tune                       # np 2..8, 8 B .. 64 MiB: collectives/data/tuning.json
    collectives-bench tune --np 2:4 -m 8:1M -o my.json
    COLLECTIVES_TUNING=my.json mpiexec -n 4 python prog.py

One launch per rank count (``launches.launch``, without mpiexec around this command;
``--launches N``: N of them) runs the benchmark sweep of every tuned collective with all
algorithms forced by name, interleaved in that launch.  Per collective, rank count and size
the winner is the lowest p50 (or min, ``--stat min``), over several launches the lowest
median p50 (least min): the choice a single launch's noise would flip is taken on the
typical launch instead.  A size keeps the previous size's winner while that one is within
``--tolerance`` of the best (noise should not split a range).  Equal winners over consecutive
sizes become one bytes range (up to and including the last size it won), and consecutive rank
counts with the same ranges one ranks range.  The largest measured size extends to unbounded,
the largest rank count does not: the rows of ``--base`` (by default bench/tuning_base.json, the
hand-set policy) follow the measured ones, for the rank counts and collectives not measured.
The table's metadata records the machine, the date, the command and every measured point.
"""
import argparse
import datetime
import json
import os
import sys

from .common import parse_range, write_json
from .launches import launch

BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuning_base.json")
# Collectives with more than one algorithm (reduce has one: its row needs no measuring).
TUNED = ("allreduce", "bcast", "allgather", "reduce_scatter", "gather", "scatter", "barrier")


def parse_ranks(text):
    """``2:8`` or ``4`` as (lo, hi) rank counts."""
    lo, _, hi = text.partition(":")
    try:
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rank range: {text!r} (e.g. 2:8)") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"rank range {text!r}: want 1 <= low <= high")
    return lo, hi


def parser():
    """The argument parser of ``collectives-bench tune``."""
    from collectives.tuning import DEFAULT_PATH

    ap = argparse.ArgumentParser(prog="collectives-bench tune", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collectives", nargs="*", default=list(TUNED), metavar="COLLECTIVE",
                    help=f"which to tune (default: {', '.join(TUNED)})")
    ap.add_argument("--np", type=parse_ranks, default=(2, 8), help="rank counts LOW:HIGH (default 2:8)")
    ap.add_argument("-m", "--message-size", type=parse_range, default=(8, 64 << 20), metavar="[MIN:]MAX",
                    help="size range (default 8:64M)")
    ap.add_argument("-f", "--stepfactor", type=int, default=2, help="ratio of consecutive sizes (default 2)")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per size (default 1)")
    ap.add_argument("--launches", type=int, default=1,
                    help="launches per rank count; a cell's time is its median p50 (and least min) over "
                         "them (default 1)")
    ap.add_argument("--tolerance", type=float, default=0.03,
                    help="keep the previous size's winner within this fraction of the best (default 0.03)")
    ap.add_argument("--stat", choices=["p50", "min"], default="p50",
                    help="the time that ranks algorithms (default p50; min on a machine other jobs load: "
                         "their delays only add)")
    ap.add_argument("--quick", action="store_true", help="smoke run: np 2, 8 B .. 64 KiB, factor 64, tiny budget")
    ap.add_argument("-o", "--output", default=DEFAULT_PATH, help=f"table to write (default {DEFAULT_PATH})")
    ap.add_argument("--raw", metavar="DIR", help="also write each launch's benchmark results here (tune_np<p>.json)")
    ap.add_argument("--from", dest="source", metavar="DIR",
                    help="measure nothing: build the table from the tune_np<p>.json files an earlier --raw wrote")
    ap.add_argument("--base", metavar="FILE", default=BASE,
                    help="a table whose rows follow the measured ones: the choice for rank counts and "
                         "collectives not measured (default: the hand-set policy, bench/tuning_base.json; "
                         "'' for none)")
    ap.add_argument("--note", default="", help="text for the table's metadata (e.g. the machine's load)")
    ap.add_argument("--wait-fast", type=float, metavar="SECONDS",
                    help="before each launch, wait up to SECONDS for the state probe (state.py) to read the "
                         "machine's fast state (launches.py); the table's metadata lists each launch's state")
    return ap


def cell(result, row):
    """What identifies a result row across launches: the result's collective, dtype, op and
    root, and the row's size, place and algorithm."""
    return (result["collective"], result.get("dtype"), result.get("op"), result.get("root"),
            row["size"], row["place"], row["algorithm"])


def merge(launches):
    """One sweep's results from several launches of it, rows matched by ``cell``: each row's
    p50 is the median of its p50s, its min the least of its mins (None if any launch has none:
    a failed cell).  ValueError when a launch lacks a row of the first."""
    import statistics

    out = json.loads(json.dumps(launches[0]))
    rows = [{cell(result, row): row for result in launch for row in result["rows"]} for launch in launches]
    for result in out:
        for row in result["rows"]:
            key = cell(result, row)
            missing = [k + 1 for k, launch in enumerate(rows) if key not in launch]
            if missing:
                raise ValueError(f"launch {missing[0]} of {len(launches)} has no row for {key[0]} "
                                 f"size {row['size']} place {row['place']} {row['algorithm']} "
                                 "(launch 1 has): the launches measured different sweeps")
            same = [launch[key] for launch in rows]
            for stat, pick in (("p50(us)", statistics.median), ("min(us)", min)):
                values = [r.get(stat) for r in same]
                row[stat] = None if None in values else pick(values)
    return out


def winners(rows, tolerance, stat="p50"):
    """[(size, algorithm)] ascending from one sweep's rows: the lowest ``stat`` (p50 or min) of
    the named algorithms, or the previous size's winner while it is within ``tolerance`` of that."""
    by_size = {}
    for row in rows:
        if row["place"] == "out" and row[f"{stat}(us)"] is not None and row["algorithm"] not in (
                "default", "auto") and not row["algorithm"].startswith("native"):
            by_size.setdefault(row["size"], {})[row["algorithm"]] = row[f"{stat}(us)"]
    out, previous = [], None
    for size in sorted(by_size):
        times = by_size[size]
        best = min(times, key=times.get)
        if previous in times and times[previous] <= times[best] * (1 + tolerance):
            best = previous
        out.append((size, best))
        previous = best
    return out


def ranges(points):
    """[(lo, hi, algorithm)] bytes ranges from ascending (size, winner) points; the last is unbounded."""
    out = []
    for size, name in points:
        if out and out[-1][2] == name:
            out[-1][1] = size
        else:
            out.append([out[-1][1] + 1 if out else 0, size, name])
    if out:
        out[-1][1] = None
    return [tuple(r) for r in out]


def table_rows(per_np):
    """Decision rows of one collective from {rank count: [(lo, hi, algorithm)]}: rank counts with
    equal ranges merge; the smallest starts at 1 rank, the largest ends at the largest measured
    (an oversubscribed run says nothing about a cluster's thousands of ranks)."""
    groups = []
    for np_ in sorted(per_np):
        if groups and groups[-1][2] == per_np[np_]:
            groups[-1][1] = np_
        else:
            groups.append([np_, np_, per_np[np_]])
    if not groups:
        return []
    groups[0][0] = 1
    return [{"ranks": [lo, hi], "bytes": [blo, bhi], "algorithm": name}
            for lo, hi, spans in groups for blo, bhi, name in spans]


def build(sweeps, tolerance, metadata, stat="p50", base=None):
    """The Table from {rank count: [result records of the benchmark]}, followed by the rows of
    the Table ``base`` (the choices where nothing was measured: more ranks, other collectives);
    without a base, a collective without measurements gets its first algorithm."""
    from collectives.registry import ALGORITHMS, row_name
    from collectives.tuning import FORMAT, parse

    per = {}
    points = {}
    for np_, results in sweeps.items():
        for result in results:
            won = winners(result["rows"], tolerance, stat)
            if won:
                per.setdefault(result["collective"], {})[np_] = ranges(won)
                points.setdefault(result["collective"], {})[str(np_)] = won
    fallback = {c: [r.as_json() for r in rows] for c, rows in base.rows.items()} if base else {
        c: [{"ranks": [1, None], "bytes": [0, None], "algorithm": ALGORITHMS[c][0].name}] for c in ALGORITHMS}
    # The base's fused rows stay first: they are taken only with the check on, which the sweep
    # (check=False, every algorithm forced) does not measure (bench.default_path does); so do
    # its rows of a layout (several nodes, a transport), which a sweep on one node never covers.
    fused = {c: [r for r in rows if r["algorithm"].endswith("_fused") or set(r) & {"nodes", "per_node", "transport"}]
             for c, rows in fallback.items()}
    collectives = {c: fused.get(c, []) + table_rows(per.get(c, {}))
                   + [r for r in fallback.get(c, []) if r not in fused.get(c, [])] for c in ALGORITHMS}
    return parse({"format": FORMAT, "metadata": dict(metadata, winners=points), "collectives": collectives},
                 row_name, "<tune>")


def main(argv=None):
    """``collectives-bench tune``: launch the sweeps, write the table; the exit status."""
    from collectives.registry import load_table
    from collectives.tuning import write

    args = parser().parse_args(argv)
    unknown = [c for c in args.collectives if c not in TUNED]
    if unknown:
        raise SystemExit(f"collectives-bench tune: cannot tune {', '.join(unknown)}; choose from {', '.join(TUNED)}")
    (lo, hi), factor, (nlo, nhi), budget = args.message_size, args.stepfactor, args.np, args.budget
    if args.quick:
        (lo, hi), factor, (nlo, nhi), budget = (8, 64 << 10), 64, (2, 2), 0.05
    sweep = [*args.collectives, "-m", f"{lo or 8}:{hi}", "-f", str(factor), "-a", "all", "--budget", str(budget),
             "-x", "3"]
    sweeps, states, cores = {}, {}, os.cpu_count() or 1
    base = load_table(args.base) if args.base else None
    for np_ in range(nlo, nhi + 1):
        if args.source:
            path = os.path.join(args.source, f"tune_np{np_}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                results = json.load(f)["results"]
        else:
            launches = []
            for k in range(args.launches):
                print(f"[collectives-bench tune] np={np_} launch {k + 1}/{args.launches}: {' '.join(sweep)}",
                      file=sys.stderr, flush=True)
                results, error = launch(np_, sweep, wait=args.wait_fast)
                if error:
                    raise SystemExit(f"collectives-bench tune: the launch at np={np_} failed: {error}")
                launches.append(results)
                if args.wait_fast is not None:
                    states.setdefault(str(np_), []).append(results[0]["state"])
            try:
                results = merge(launches)
            except ValueError as exc:
                raise SystemExit(f"collectives-bench tune: np={np_}: {exc}") from None
            if args.raw:
                write_json(f"tune_np{np_}.json", {"results": results}, args.raw)
        sweeps[np_] = results
        metadata = {
            "command": "collectives-bench tune " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ranks_measured": sorted(sweeps), "bytes": [lo or 8, hi], "stepfactor": factor, "budget_s": budget,
            "launches": args.launches, "tolerance": args.tolerance, "statistic": args.stat, "base": args.base, "cores": cores,
            "oversubscribed_above_ranks": cores, "note": args.note, "wait_fast_s": args.wait_fast,
            "launch_states": states,
            "environment": next(iter(sweeps.values()))[0].get("env"),
        }
        # Written after every rank count, so a sweep cut short still leaves a table.
        table = build(sweeps, args.tolerance, metadata, args.stat, base)
        write(table, args.output)
        print(f"# wrote {args.output} (np {', '.join(map(str, sorted(sweeps)))}): "
              + ", ".join(f"{c} {len(r)} rows" for c, r in table.rows.items()), flush=True)
    if not sweeps:
        raise SystemExit(f"collectives-bench tune: no tune_np<p>.json for np {nlo}..{nhi} in {args.source}")
    return 0
