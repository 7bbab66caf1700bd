"""The testbed-aware cost model beside what measure.py timed.

    python bench/net/model_check.py bench/results/net_1gbit_2x2.json
    python bench/net/model_check.py -o bench/results/net_1gbit_2x2.json \
        bench/results/net_1gbit_2x2_launch{1,2,3}.json

Run by bench_net.sh on the host after a layout's measure.py launches.  Each algorithm's time is
bench/simulate.py's ``predict``: its own schedule walked over the node map, so steps within a
node pay the shared-memory alpha and beta and the messages of one step that leave or enter a
node share that node's link, through tbf's token bucket; plus the call's fixed cost.
Parameters, all from the file (the same launch as the cells, none from the cells themselves):

* inter-node beta: measure.py's exchange across the shaped link (Sendrecv both ways at once,
  the step every schedule takes), from its two largest sizes, beyond the burst;
* inter-node alpha: the intercept of a least-squares line through the exchange's train (back
  to back up to 8 KiB, as a schedule's steps run, no Barrier skew; older files: through the
  single exchanges up to half the burst);
* the in-burst beta, per message (bench/simulate.py, the comment above ``Links``): the slope of a
  least-squares line through the single exchanges from IN_BURST_FROM to the burst (one
  message each way on each link, so the bucket holds all of it), the sizes of the 64 KiB
  cells' steps, kept within 0 .. beta.  Up to half the burst the line rested on 4 .. 64 KiB
  and one noisy 64 KiB median made it 5.1 ns/B in one launch against 0.6-1.8 in four others;
  with 128 KiB it was 0.9-1.7 ns/B in the same five.  The train's slope is no rate: in one
  quiet launch its times were 32, 60, 74 and 67 us at 8 B, 512 B, 4 KiB and 8 KiB, a slope of
  3.2 ns/B that is the step up from 8 B;
* intra-node alpha and beta: measure.py's exchange in shared memory on every node at once
  (the node-aware phases run so, all ranks on the shared cores; older files: the ping-pong;
  none on 1-rank nodes), alpha from its train if there is one;
* the shared-memory pipeline's start-up (``Links.step``, paid by an intra-node message of more
  than INTRA_EAGER bytes), from the same exchanges in shared memory: in a call's first level,
  the intercept of a least-squares line through the single exchanges of the sizes PIPELINE
  (16 .. 256 KiB, all beyond the eager cell) less the median of those within it (8 B ..
  4 KiB), both after a Barrier as a call's first step is (its skew cancels; the slope is not
  used, beta stays the large-size fit); in the later levels, the train's time at its largest
  size (8 KiB, beyond the cell) less its time at the largest within the cell (4 KiB).  In
  three bound 2x2 launches: 42, 88 and 51 us first, 12, 10 and 11 us later;
* the burst: testbed.sh's ``tbf ... burst 256kb`` in payload bytes;
* gamma: measure.py's float32 sum kernel on every rank at once (bench/model.py's fit_gamma,
  one process here, for older files without it);
* each algorithm's fixed cost (bench/simulate.py's ``fixed_cost``): its time measured at 4 KiB in
  the same launch (measure.py's fixed_costs, 16x below the smallest cell predicted) less the
  walk's time there with the parameters above; 0 for older files without those calls.

Each launch is predicted from its own file alone, so a launch's fits and fixed costs follow
that launch's noise and nothing is pooled or fitted across launches.  One launch: prints, per
algorithm and size of 64 KiB and more, predicted and measured median ms and the error
(predicted / measured - 1), then the model's time for measure.py's concurrent exchanges (k
pairs across one link) beside the measurement, the check of the sharing term; adds the rows
to the JSON file as "model".  Several launches of one layout (each file gets its own "model"
as above; its fits, summary line and sharing check are printed, its table is not): per cell,
the median over the launches of the measured median and of the prediction, the error of
those two medians and the spread (min .. max) of the launches' own errors, then how many
cells are within 25% on the medians and in each launch.  ``-o`` writes that combination
(with every contender's median over the launches) to its own file.
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.model import EAGER as INTRA_EAGER, LARGE, PIPELINE_FIT as PIPELINE, fit_gamma  # noqa: E402
from bench.simulate import Links, fixed_cost, predict, walk  # noqa: E402  (the repository root is on sys.path)

# testbed.sh's tbf burst (256kb: KiB in tc's units) as TCP payload: a 1500-byte MTU frame of
# 1514 bytes on the wire carries 1448 bytes (timestamps on).
BURST = (256 << 10) * 1448 // 1514
IN_BURST_FROM = 4096
# Shared-memory messages within MPICH 5.0.2's eager cell (INTRA_EAGER, bench/model.py's EAGER;
# the sizes beyond it that give the pipeline's start-up are its PIPELINE_FIT, here PIPELINE).
EAGER_SIZES = (0, 4096)
EXCHANGE = "inter-node exchange"
SHARED = "inter-node exchange, {k} pairs on one link"
INTRA = "intra-node exchange, every node at once"
PINGPONG = "intra-node (shared memory)"  # older files' only intra-node fit


def links_of(result, gamma):
    """Links from measure.py's fits in ``result`` (the module docstring)."""
    fits = result["links"]
    own = fits.get(INTRA) or fits.get(PINGPONG)
    intra = (line(fits, INTRA, own)[1], own["beta_s_per_byte"]) if own else (0.0, 0.0)
    step = pipeline_step(fits, INTRA) if INTRA in fits else (0.0, 0.0)
    if EXCHANGE not in fits:
        return Links(intra, intra, gamma, step=step, eager=INTRA_EAGER)
    beta = fits[EXCHANGE]["beta_s_per_byte"]
    alpha = line(fits, EXCHANGE, fits[EXCHANGE])[1]
    fast = fitted_line(fits[EXCHANGE]["one_way_us"], IN_BURST_FROM, BURST)[0]
    return Links(intra, (alpha, beta), gamma, BURST, min(fast, beta), step, INTRA_EAGER)


def pipeline_step(fits, name):
    """(first, later): seconds more that a shared-memory message beyond the eager cell starts
    in, from pattern ``name``'s single exchanges and its train in ``fits`` (the module
    docstring), each at least 0; ``first`` 0 without two PIPELINE sizes and one within the
    cell, ``later`` 0 without a train on both sides of the cell."""
    single = fits[name]["one_way_us"]
    within = [t for n, t in single.items() if EAGER_SIZES[0] <= int(n) <= EAGER_SIZES[1]]
    if within and sum(PIPELINE[0] <= int(n) <= PIPELINE[1] for n in single) >= 2:
        first = max(fitted_line(single, *PIPELINE)[1] - statistics.median(within) * 1e-6, 0.0)
    else:
        first = 0.0
    train = (train_of(fits, name) or {}).get("one_way_us", {})
    beyond = [int(n) for n in train if int(n) > INTRA_EAGER]
    inside = [int(n) for n in train if int(n) <= INTRA_EAGER]
    if not beyond or not inside:
        return first, 0.0
    return first, max((train[str(min(beyond))] - train[str(max(inside))]) * 1e-6, 0.0)


def line(fits, name, fallback):
    """(s/byte, s) of a least-squares line through pattern ``name``'s train in ``fits`` (any
    length), else through ``fallback``'s times up to half the burst; both kept >= 0."""
    return fitted_line((train_of(fits, name) or fallback)["one_way_us"], 0, BURST // 2)


def train_of(fits, name):
    """Pattern ``name``'s train (back-to-back exchanges, any length) in ``fits``, or None."""
    return next((f for key, f in fits.items() if key.startswith(f"{name}, train of ")), None)


def fitted_line(one_way_us, low, high):
    """(s/byte, s) of a least-squares line through the times ``one_way_us`` ({bytes: us}) of
    ``low`` .. ``high`` bytes; both kept >= 0."""
    points = [(int(n), t * 1e-6) for n, t in one_way_us.items() if low <= int(n) <= high]
    slope, intercept = np.polyfit(*zip(*points), 1)
    return max(slope, 0.0), max(intercept, 0.0)


def exchange_rounds(pairs, nbytes):
    """{rank: rounds} of one Sendrecv of ``nbytes`` each way between each pair of ranks."""
    out = {}
    for a, b in pairs:
        out[a] = [[[(b, nbytes)], [(b, nbytes)], 0]]
        out[b] = [[[(a, nbytes)], [(a, nbytes)], 0]]
    return out


def check(result):
    """One launch ``result`` (measure.py's JSON) beside its own model: (links, fixed costs,
    rows), each row one algorithm and size of LARGE and more, predicted from that launch's fits
    and fixed costs alone."""
    nodes, k = result["layout"]["nodes"], result["layout"]["ranks_per_node"]
    links = links_of(result, result["gamma_s_per_byte"] if "gamma_s_per_byte" in result else fit_gamma())
    calls = result.get("fixed_cost_calls", {"bytes": 0, "median_s": {}})
    fixed = {name: fixed_cost(f"allreduce_{name}", nodes, k, calls["bytes"], t, links)
             for name, t in calls["median_s"].items()}
    rows = []
    for size, medians in result["allreduce_median_s"].items():
        nbytes = int(size)
        if nbytes < LARGE:
            continue
        for name, measured in medians.items():
            if name.startswith(("native", "ours")):
                continue
            predicted = predict(f"allreduce_{name}", nodes, k, nbytes, links, fixed=fixed.get(name, 0.0))
            rows.append(dict(algorithm=name, bytes=nbytes, predicted_s=predicted, measured_s=measured,
                             error=predicted / measured - 1))
    return links, fixed, rows


def combine(launches):
    """Rows of one layout over several launches, from each launch's ``check`` rows (a list per
    launch, the same cells in each): per cell the median over launches of the measured median
    and of the prediction, the error of those two medians, and every launch's own error."""
    cells = [(r["algorithm"], r["bytes"]) for r in launches[0]]
    by_launch = [{(r["algorithm"], r["bytes"]): r for r in rows} for rows in launches]
    for rows in by_launch:
        if sorted(rows) != sorted(cells):
            raise ValueError(f"the launches time different cells: {sorted(rows)} against {sorted(cells)}")
    out = []
    for name, nbytes in cells:
        runs = [rows[name, nbytes] for rows in by_launch]
        predicted = statistics.median(r["predicted_s"] for r in runs)
        measured = statistics.median(r["measured_s"] for r in runs)
        out.append(dict(algorithm=name, bytes=nbytes, predicted_s=predicted, measured_s=measured,
                        error=predicted / measured - 1, launch_errors=[r["error"] for r in runs]))
    return out


def within(errors, bound=0.25):
    """How many of ``errors`` (predicted / measured - 1) are within ``bound`` either way."""
    return sum(bool(abs(e) <= bound) for e in errors)


def summary(rows):
    """One line: median and worst |error| of ``rows`` and how many are within 25%."""
    errors = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    return (f"median |error| {statistics.median(errors):.0%}, {within(errors)} of {len(errors)} within 25%, "
            f"worst {worst['error']:+.0%} (allreduce_{worst['algorithm']} {worst['bytes'] >> 10} KiB)")


def describe(result, links, fixed):
    """Print one launch's fits and fixed costs."""
    nodes, k = result["layout"]["nodes"], result["layout"]["ranks_per_node"]
    calls = result.get("fixed_cost_calls", {"bytes": 0})
    (a, b), (big_a, big_b) = links.intra, links.inter
    print(f"model ({result['label']}, {nodes} nodes x {k}): intra alpha {a * 1e6:.1f} us beta {b * 1e9:.3f} ns/B, "
          f"beyond {links.eager} B {links.step[0] * 1e6:.1f} us more first, {links.step[1] * 1e6:.1f} later; "
          f"inter alpha {big_a * 1e6:.1f} us beta {big_b * 1e9:.3f} ns/B, burst {links.burst} B at "
          f"{links.fast * 1e9:.3f} ns/B; gamma {links.gamma * 1e9:.3f} ns/B")
    if fixed:
        print(f"fixed cost per call, ms (measured at {calls['bytes']} B less the walk there): "
              + ", ".join(f"{name} {t * 1e3:.3f}" for name, t in fixed.items()))


def sharing(result, links):
    """Print the model's time for one launch's concurrent exchanges (k pairs across one link)
    beside the measurement: the check of the sharing term."""
    k = result["layout"]["ranks_per_node"]
    shared = result["links"].get(SHARED.format(k=k))
    if shared:
        node_of = {r: i for i, host in enumerate(result["layout"]["hosts"].values()) for r in host}
        print(f"sharing check, {k} exchanges at once across one link: size, predicted / measured ms")
        for n, t in shared["one_way_us"].items():
            if int(n) >= LARGE:
                model = walk(exchange_rounds(shared["pairs"], int(n)), node_of, links)
                print(f"  {int(n) >> 10} KiB: {model * 1e3:.2f} / {t * 1e-3:.2f} ({model / (t * 1e-6) - 1:+.0%})")


def not_a_launch(result):
    """Why ``result`` (a JSON file's content) is not one measure.py launch, or None if it is."""
    if "launches" in result:
        return (f"is a combination of the launches {', '.join(result['launches'])} (model_check -o wrote it): "
                "give their own files, net_<label>.json each")
    missing = [key for key in ("label", "layout", "links", "allreduce_median_s") if key not in result]
    if missing:
        return f"is not a bench/net/measure.py result (it has no {', '.join(missing)})"
    return None


def main(argv=None):
    """Compare each launch named on the command line with its own model and write that into its
    file; with ``-o``, also the launches' combination (several launches need it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("launches", nargs="+", metavar="LAUNCH.json", help="measure.py results of one layout")
    parser.add_argument("-o", "--output", help="write the combination of the launches here")
    args = parser.parse_args(argv)
    if len(args.launches) > 1 and not args.output:
        parser.error("several launches need -o (where to write their combination)")
    # Every file is read and checked before any is written, so a wrong one among them leaves
    # all of them as they were.
    launches = []
    for path in args.launches:
        with open(path) as f:
            launches.append((path, json.load(f)))
        problem = not_a_launch(launches[-1][1])
        if problem:
            raise SystemExit(f"model_check: {path} {problem}")
    results, checks = [], []
    for path, result in launches:
        links, fixed, rows = check(result)
        describe(result, links, fixed)
        if len(args.launches) == 1:
            print("| algorithm | size | predicted ms | measured ms | error |\n|---|---:|---:|---:|---:|")
            for r in rows:
                print(f"| allreduce_{r['algorithm']} | {r['bytes'] >> 10} KiB | {r['predicted_s'] * 1e3:.2f} | "
                      f"{r['measured_s'] * 1e3:.2f} | {r['error']:+.0%} |")
        if rows:
            print(summary(rows))
        sharing(result, links)
        result["model"] = dict(intra=links.intra, inter=links.inter, gamma_s_per_byte=links.gamma, burst=links.burst,
                               fast_s_per_byte=links.fast, pipeline_step_s=links.step, eager_bytes=links.eager,
                               fixed_cost_s=fixed, rows=rows)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        results.append(result)
        checks.append(rows)
    if not args.output:
        return
    layouts = {json.dumps(r["layout"], sort_keys=True) for r in results}
    if len(layouts) > 1:
        raise SystemExit(f"model_check: the launches ran different layouts: {sorted(layouts)}")
    rows = combine(checks)
    n = len(results)
    per_launch = [within(e) for e in zip(*(r["launch_errors"] for r in rows))]
    if rows:
        print(f"over {n} launches: median predicted / median measured ms, their error, and the "
              f"{n} launches' own errors (min .. max)")
        print("| algorithm | size | predicted ms | measured ms | error | per launch |\n|---|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| allreduce_{r['algorithm']} | {r['bytes'] >> 10} KiB | {r['predicted_s'] * 1e3:.2f} | "
                  f"{r['measured_s'] * 1e3:.2f} | {r['error']:+.0%} | "
                  f"{min(r['launch_errors']):+.0%} .. {max(r['launch_errors']):+.0%} |")
        print(f"on the medians: {summary(rows)}; per launch: "
              + ", ".join(map(str, per_launch)) + f" of {len(rows)} within 25%")
    measured = {size: {name: statistics.median(r["allreduce_median_s"][size][name] for r in results)
                       for name in results[0]["allreduce_median_s"][size]}
                for size in results[0]["allreduce_median_s"]}
    combined = {"launches": [r["label"] for r in results], "layout": results[0]["layout"],
                "allreduce_median_s": measured,
                "model": dict(rows=rows, within_25_medians=within(r["error"] for r in rows),
                              within_25_per_launch=per_launch)}
    with open(args.output, "w") as f:
        json.dump(combined, f, indent=1)


if __name__ == "__main__":
    main()
