"""The cost model against the testbed: each algorithm's ``cost()`` beside what measure.py timed.

    python bench/net/model_check.py bench/results/net_1gbit_2x2.json

Run by bench_net.sh on the host after each measure.py launch.  alpha and beta are measure.py's
ping-pong fit across the shaped link (the inter-node pair; the intra-node pair on one node);
gamma is the float32 sum kernel timed here (bench/model.py's fit_gamma).  The model is flat:
every message pays the inter-node alpha and beta, so it ignores that some steps stay on a node
(shared memory) and that two ranks of a node share its link.  Prints, per algorithm and size
of 64 KiB and more, predicted and measured median ms and the error (predicted / measured - 1),
and adds them to the JSON file as "model".
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.model import LARGE, cost_of, fit_gamma  # noqa: E402  (the repository root is put on sys.path just above)


def main():
    """Compare, print, and write the comparison back into the result file named on the command line."""
    if len(sys.argv) != 2:
        raise SystemExit("usage: model_check.py bench/results/net_<label>.json")
    path = sys.argv[1]
    with open(path) as f:
        result = json.load(f)
    links = result["links"]
    link = links.get("inter-node (shaped link)") or links["intra-node (shared memory)"]
    alpha, beta, gamma = link["alpha_us"] * 1e-6, link["beta_s_per_byte"], fit_gamma()
    p = result["layout"]["nodes"] * result["layout"]["ranks_per_node"]
    rows = []
    for size, medians in result["allreduce_median_s"].items():
        nbytes = int(size)
        if nbytes < LARGE:
            continue
        for name, measured in medians.items():
            if name.startswith(("native", "ours")):
                continue
            predicted = cost_of(f"allreduce_{name}")(p, nbytes, alpha, beta, gamma)
            rows.append(dict(algorithm=name, bytes=nbytes, predicted_s=predicted, measured_s=measured,
                             error=predicted / measured - 1))
    print(f"model ({result['label']}, p={p}): alpha {alpha * 1e6:.1f} us, beta {beta * 1e9:.3f} ns/B, "
          f"gamma {gamma * 1e9:.3f} ns/B (flat: every message at the link's alpha and beta)")
    print("| algorithm | size | predicted ms | measured ms | error |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| allreduce_{r['algorithm']} | {r['bytes'] >> 10} KiB | {r['predicted_s'] * 1e3:.2f} | "
              f"{r['measured_s'] * 1e3:.2f} | {r['error']:+.0%} |")
    result["model"] = dict(alpha_s=alpha, beta_s_per_byte=beta, gamma_s_per_byte=gamma, rows=rows)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
