"""``collectives-bench timeline``: merge and draw the timeline of every rank (collectives.timeline).

    collectives-bench timeline merge trace.json               # the ranks' files into trace.json
    collectives-bench timeline trace.json -o timeline.png     # ranks as rows, one colour per phase

``merge`` reads what each rank left beside ``trace.json``: its trace file
``trace.rank<R>.json`` or, for a rank that was killed before writing it, its ring
``trace.rank<R>.ring``; it writes one Trace Event Format file with a track per rank, for
Perfetto (ui.perfetto.dev) or chrome://tracing.  Drawing a trace merges it first when only the
rank files exist.  The picture has one row per rank: the training loop's phases in its upper
half, the collectives' transfers, checks and waits in its lower half; the row's label names
the rank it waited for longest.
"""
import argparse
import collections
import os
import sys

from collectives import timeline

# One colour per phase (training phases and the collectives' parts), colour-blind safe.
COLOURS = {"gradient": "#0072B2", "communication": "#E69F00", "update": "#009E73", "evaluation": "#CC79A7",
           "checkpoint": "#56B4E9", "wait": "#D55E00", "transfer": "#F0E442", "check": "#999999"}


def merged(path):
    """Merge the rank files of the timeline at ``path`` into it; the files merged."""
    files = timeline.inputs(path)
    if not files:
        raise SystemExit(f"collectives-bench timeline: no rank files of {path} "
                         f"({timeline.rank_path(path, 0)} or {timeline.ring_path(path, 0)} ...)")
    timeline.merge(files, path)
    return files


def spans(events):
    """{rank: {lane: [(start_ms, length_ms, phase)]}} of the complete events; lane 0 the
    collectives' transfers, checks and waits (drawn below), lane 1 the training phases."""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in events:
        if e.get("ph") != "X":
            continue
        name = e["name"] if e["tid"] == 1 else e["cat"]
        if name in COLOURS:
            out[e["pid"]][e["tid"]].append((e["ts"] / 1e3, e["dur"] / 1e3, name))
    return out


def waited_for(events):
    """{rank: the rank it spent longest waiting for, and the seconds}."""
    per = collections.defaultdict(collections.Counter)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "wait":
            per[e["pid"]][e["args"]["waited_for"]] += e["dur"] / 1e6
    return {rank: c.most_common(1)[0] for rank, c in per.items()}


def draw(path, out):
    """Draw the trace at ``path`` into the PNG ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = timeline.load(path)
    rows, waits = spans(events), waited_for(events)
    ranks = sorted(rows)
    if not ranks:
        raise SystemExit(f"collectives-bench timeline: {path} holds no events")
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.6 * len(ranks)))
    used = set()
    for y, rank in enumerate(ranks):
        for lane, top in ((0, 0.45), (1, 0.0)):
            by_phase = collections.defaultdict(list)
            for start, length, name in rows[rank][lane]:
                by_phase[name].append((start, length))
            for name, bars in by_phase.items():
                ax.broken_barh(bars, (y + top - 0.4, 0.4), facecolors=COLOURS[name], linewidth=0)
                used.add(name)
    labels = []
    for rank in ranks:
        who = waits.get(rank)
        labels.append(f"rank {rank}" + (f"\nwaits on {who[0]} ({who[1]:.3g} s)" if who else ""))
    ax.set_yticks(range(len(ranks)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms since rank 0's start")
    ax.legend(handles=[Patch(color=COLOURS[n], label=n) for n in COLOURS if n in used], loc="upper center",
              bbox_to_anchor=(0.5, -0.25 if len(ranks) < 4 else -0.1), ncol=8, frameon=False)
    ax.set_title(os.path.basename(path))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Entry point of ``collectives-bench timeline``; returns the exit status."""
    ap = argparse.ArgumentParser(prog="collectives-bench timeline", description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="+", metavar="[merge] PATH", help="merge PATH, or the trace PATH to draw")
    ap.add_argument("-o", "--output", default="timeline.png", help="the picture (default timeline.png)")
    args = ap.parse_args(argv)
    if args.what[0] == "merge":
        if len(args.what) != 2:
            ap.error("merge takes one trace path: collectives-bench timeline merge trace.json")
        files = merged(args.what[1])
        print(f"{args.what[1]}: {len(files)} ranks ({', '.join(os.path.basename(f) for f in files)})")
        return 0
    if len(args.what) != 1:
        ap.error("one trace path to draw")
    path = args.what[0]
    if not os.path.exists(path):
        merged(path)
    draw(path, args.output)
    print(f"{args.output}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
