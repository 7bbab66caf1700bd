"""Time to accuracy on the testbed: training runs through each compressor beside native Allreduce.

    RATES=1gbit bench/net/bench_net.sh train      (make bench-net-train; root)

Runs on the host while bench_net.sh holds the testbed up; every run is one
``testbed.sh mpiexec NODES K python -m collectives train`` (default 2 nodes x 2 ranks).  Per
problem (the bundled digits, and the synthetic problem of 10^6 parameters) and contender
(native ``Allreduce``; ours (auto); each compressor with its default error feedback and with it
flipped), all with the same SGD settings:

* time to target: training wall time (evaluations excluded) at the first epoch whose objective
  is within 1% of the reference, or "never" (then the final objective says how close it got);
  the reference is the optimum an L-BFGS run with native ``Allreduce`` reaches (digits), or the
  final objective of the uncompressed native SGD run (synthetic: L-BFGS to the optimum would take
  longer than the whole benchmark);
* the objective reached within the wall-time budget of the uncompressed native SGD run (the last
  report at or before its training seconds), for the runs that never reach the target;
* final objective, train and test accuracy, training seconds;
* bytes on the wire: what the nodes' shaped interfaces sent during the run (TCP/IP headers
  included; traffic between ranks of one node uses shared memory and is not on the wire).

Prints a table per problem and writes bench/results/net_train_<label>.json.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(ROOT, "bench", "results")
COMPRESSORS = ("fp16", "int8", "qsgd", "sign", "topk", "randk")
# (problem, --data, SGD options, reference run's options or None for "the native SGD run")
PROBLEMS = {
    "digits": (None, ["--lr", "0.1", "--batch", "64", "--epochs", "40"],
               ["--optimizer", "lbfgs", "--allreduce", "native", "--epochs", "300"]),
    "synthetic": ("synthetic:5000x10000x100", ["--lr", "0.01", "--batch", "128", "--epochs", "6"], None),
}
TOLERANCE = 0.01


def wire_bytes(nodes):
    """Bytes sent so far by each node's shaped interface, summed over the nodes."""
    total = 0
    for i in range(nodes):
        out = subprocess.run(["ip", "netns", "exec", f"ctb-n{i}", "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                             check=True, capture_output=True, text=True)
        total += int(out.stdout)
    return total


def train(args, data, options, path):
    """One training run on the testbed; (its metrics, the bytes it put on the wire)."""
    command = [os.path.join(HERE, "testbed.sh"), "mpiexec", str(args.nodes), str(args.k), args.python,
               "-m", "collectives", "train", "--optimizer", "sgd", "--log-every", "1", "--no-progress",
               "--metrics", path, *(["--data", data] if data else []), *options]
    before = wire_bytes(args.nodes)
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONPATH=ROOT))
    sent = wire_bytes(args.nodes) - before
    with open(path) as f:
        return json.load(f), sent


def contenders():
    """(name, error feedback label, extra options) of every run."""
    out = [("native", "-", ["--allreduce", "native", "--compress", "none"]),
           ("ours", "-", ["--compress", "none"])]
    for name in COMPRESSORS:
        for ef in ("--error-feedback", "--no-error-feedback"):
            out.append((name, "on" if ef == "--error-feedback" else "off",
                        ["--compress", name, ef]))
    return out


def time_to(history, target):
    """Training seconds at the first report whose objective is at most ``target``, or None."""
    return next((row["training"] for row in history if row["objective"] <= target), None)


def objective_by(history, seconds):
    """Objective of the last report within ``seconds`` of training, or None."""
    return next((row["objective"] for row in reversed(history) if row["training"] <= seconds), None)


def problem(args, name):
    """Every contender's run on one problem; the rows of its table."""
    data, options, reference = PROBLEMS[name]
    runs = {}
    scratch = os.path.join(RESULTS, f"net_train_{args.label}_{name}")
    os.makedirs(scratch, exist_ok=True)
    if reference:
        metrics, _ = train(args, data, reference, os.path.join(scratch, "reference.json"))
        runs["reference"] = ("lbfgs native", "-", metrics, None)
    for contender, ef, extra in contenders():
        metrics, sent = train(args, data, options + extra, os.path.join(scratch, f"{contender}_{ef}.json"))
        runs[f"{contender}_{ef}"] = (contender, ef, metrics, sent)
        print(f"  {name} {contender} error feedback {ef}: objective {metrics['objective']:.6f}, "
              f"{metrics['seconds']:.1f} s", flush=True)
    F_ref = runs["reference" if reference else "native_-"][2]["objective"]
    target = F_ref * (1 + TOLERANCE)
    budget = runs["native_-"][2]["history"][-1]["training"]
    rows = []
    for contender, ef, metrics, sent in runs.values():
        last = metrics["history"][-1]
        rows.append(dict(run=contender, error_feedback=ef, time_to_target=time_to(metrics["history"], target),
                         objective_in_budget=objective_by(metrics["history"], budget), objective=metrics["objective"], train_accuracy=metrics["train_metric"],
                         test_accuracy=metrics["test_metric"], training_seconds=last["training"],
                         epochs=last["epoch"], wire_bytes=sent))
    return dict(reference=F_ref, target=target, budget_s=budget, options=options, data=data or "digits", rows=rows)


def show(name, result):
    """Print one problem's table."""
    print(f"\n{name} ({result['data']}, sgd {' '.join(result['options'])}): target objective "
          f"{result['target']:.6f} (reference {result['reference']:.6f} + 1%), budget {result['budget_s']:.2f} s")
    print("| run | error feedback | time to target s | objective in budget | final objective | train acc | test acc | "
          "training s (epochs) | wire MB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        reach = "never" if r["time_to_target"] is None else f"{r['time_to_target']:.2f}"
        wire = "-" if r["wire_bytes"] is None else f"{r['wire_bytes'] / 1e6:.1f}"
        within = "-" if r["objective_in_budget"] is None else f"{r['objective_in_budget']:.6f}"
        print(f"| {r['run']} | {r['error_feedback']} | {reach} | {within} | {r['objective']:.6f} | {r['train_accuracy']:.4f} | "
              f"{r['test_accuracy']:.4f} | {r['training_seconds']:.2f} ({r['epochs']}) | {wire} |")


def main():
    """Run every problem, print the tables, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True, help="names the results file (rate and layout)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--k", type=int, default=2, help="ranks per node")
    p.add_argument("--problems", nargs="+", choices=list(PROBLEMS), default=list(PROBLEMS))
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    results = {name: problem(args, name) for name in args.problems}
    for name, result in results.items():
        show(name, result)
    path = os.path.join(RESULTS, f"net_train_{args.label}.json")
    with open(path, "w") as f:
        json.dump(dict(nodes=args.nodes, ranks_per_node=args.k, problems=results), f, indent=1)
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
