"""``collectives-bench plot FILE...``: PNG per collective and rank count from benchmark JSON.

Three panels against message size: bus bandwidth, p50 latency, and native p50 / ours p50 (the
ratio to native, > 1 where ours is faster); for a nonblocking test (nonblocking.py) the overall
time, the overlap and native overall / ours overall.  One line per algorithm, native as the thick
black reference line.  Reads the files the benchmark writes (bench/results/*.json, or --json
output).
"""
import argparse
import json
import os
import sys

from .common import NONBLOCKING_TESTS, RESULTS, human

PANELS = (("busbw(GB/s)", "bus bandwidth (GB/s)", "log"), ("p50(us)", "p50 latency (us)", "log"),
          ("native/ours", "native p50 / ours p50", "linear"))
OVERLAP_PANELS = (("overall(us)", "overall: post + compute + wait (us)", "log"), ("overlap(%)", "overlap (%)", "linear"),
                  ("native/ours", "native overall / ours overall", "linear"))


def results_in(path):
    """The result records in one JSON file (a sweep's own file, or --json output holding several)."""
    with open(path) as f:
        data = json.load(f)
    if "results" in data:
        return [dict(result, env=result.get("env", data["env"])) for result in data["results"]]
    return [data] if "rows" in data else []


def plot(result, path):
    """Write ``result``'s three panels to ``path``; False when it has nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels, timing = ((OVERLAP_PANELS, "overall(us)") if result["collective"] in NONBLOCKING_TESTS
                      else (PANELS, "p50(us)"))
    rows = [row for row in result["rows"] if row["place"] == "out" and row["size"] > 0
            and row[timing] is not None]
    if not rows:
        return False
    names = list(dict.fromkeys(row["algorithm"] for row in rows))
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    for name in names:
        mine = sorted((row for row in rows if row["algorithm"] == name), key=lambda row: row["size"])
        native = name.startswith("native")
        style = dict(color="black", linewidth=3, zorder=3) if native else dict(linewidth=1.3, marker=".")
        if name in ("default", "auto"):
            style.update(linestyle="--", linewidth=2)
        for ax, (key, _, scale) in zip(axes, panels):
            points = [(row["size"], row[key]) for row in mine
                      if row.get(key) is not None and (row[key] > 0 or scale == "linear")]
            if points:
                ax.plot(*zip(*points), label=name, **style)
    for ax, (_, title, scale) in zip(axes, panels):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human(int(x)).replace(" ", "")))
        ax.set_yscale(scale)
        ax.set_xlabel("message size (bytes)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[2].axhline(1.0, color="black", linewidth=1)
    axes[0].legend(fontsize=8, loc="upper left")
    env = result.get("env", {})
    fig.suptitle(f"{result['collective']}, {result.get('dtype', '')}, np={result['np']}, "
                 f"{result.get('native', 'native')} = mpi4py on {env.get('mpi_library', 'MPI')}; "
                 f"{env.get('date_utc', '')} git {env.get('git', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv=None):
    """Command line: plot every result in the given files; returns the exit status."""
    ap = argparse.ArgumentParser(prog="collectives-bench plot", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="benchmark JSON files")
    ap.add_argument("-o", "--output", default=os.path.join(RESULTS, "plots"), help="directory of the PNG files")
    args = ap.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    for path in args.files:
        for result in results_in(path):
            name = (f"{result['collective']}_np{result['np']}_{result.get('malloc', 'glibc')}"
                    f"{'_quick' if result.get('quick') else ''}.png")
            out = os.path.join(args.output, name)
            if plot(result, out):
                print(f"# wrote {out}")
            else:
                print(f"# nothing to plot in {path} ({result['collective']})", file=sys.stderr)
    return 0
