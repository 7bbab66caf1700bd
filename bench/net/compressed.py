"""One testbed launch: compressed and node-aware all-reduces beside native ``Allreduce``.

    bench/net/testbed.sh mpiexec NODES K python bench/net/compressed.py --label 1gbit_2x2

Per size (default 16 MiB of float32), interleaved as in measure.py (each repetition times every
contender once, rotated by one per repetition; a sample is the slowest rank's time after a
Barrier): native ``Allreduce``; our algorithms forced by name (default the node-aware ones and
ring; results checked exact); and ``compression.allreduce`` through each compressor named
(default int8 and 1% top-k) into the receive buffer native writes (``out``), compression and
decompression included, with its bytes sent per rank and the error max |ours - exact| /
max |exact|.  Prints a table on rank 0 and writes bench/results/net_compressed_<label>.json.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import collectives  # noqa: E402  (the repository root is put on sys.path just above)
from bench.common import parse_bytes  # noqa: E402
from bench.net.measure import RESULTS, exact_input, layout  # noqa: E402
from collectives import compression  # noqa: E402


def contenders(comm, ours, algorithms, compressors):
    """name -> (callable(send, recv) -> Stats or None, exact?)."""
    out = {"native": (comm.Allreduce, True)}
    for name in algorithms:
        out[name] = (lambda s, r, name=name: ours.Allreduce(s, r, algorithm=name), True)
    for name in compressors:
        comp, state = compression.COMPRESSORS[name](), [None]

        def call(s, r, comp=comp, state=state):
            _, state[0] = compression.allreduce(ours, s, comp, state[0], out=r)
            return comp.last
        out[f"compress:{name}"] = (call, False)
    return out


def run(comm, nbytes, calls, budget, reps):
    """Per contender: median seconds, bytes sent by a rank (compressed ones) and the error."""
    send, expected = exact_input(comm, nbytes // 4)
    recv = np.empty_like(send)
    names, rows = list(calls), {}
    for name in names:
        call, exact = calls[name]
        recv.fill(np.nan)
        call(send, recv)
        err = float(np.max(np.abs(recv - expected)) / np.max(np.abs(expected)))
        if exact and comm.allreduce(int(np.count_nonzero(recv != expected))):
            raise SystemExit(f"{name} at {nbytes} B: wrong result")
        rows[name] = {"samples": [], "error": comm.allreduce(err, op=MPI.MAX), "stats": []}
    deadline, rep = time.perf_counter() + budget, 0
    while rep < 3 or (rep < reps and comm.bcast(time.perf_counter() < deadline)):
        for i in range(len(names)):
            name = names[(i + rep) % len(names)]
            comm.Barrier()
            start = time.perf_counter()
            stats = calls[name][0](send, recv)
            rows[name]["samples"].append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
            if stats is not None:
                rows[name]["stats"].append((stats.wire_bytes, stats.compress_s, stats.communicate_s,
                                            stats.decompress_s))
        rep += 1
    out = {}
    for name, row in rows.items():
        phases = np.median(row["stats"], axis=0) if row["stats"] else np.zeros(4)
        comm.Allreduce(MPI.IN_PLACE, phases, op=MPI.MAX)
        out[name] = {"median_s": float(np.median(row["samples"])), "reps": len(row["samples"]),
                     "error": row["error"], "wire_bytes": int(phases[0]), "compress_s": float(phases[1]),
                     "communicate_s": float(phases[2]), "decompress_s": float(phases[3])}
    return out


def main():
    """Parse arguments, measure, print and save on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="local", help="result name: bench/results/net_compressed_<label>.json")
    ap.add_argument("--sizes", nargs="+", type=parse_bytes, default=[16 << 20])
    ap.add_argument("--algorithms", nargs="+", default=["hierarchical", "node_leader", "ring"])
    ap.add_argument("--compress", nargs="+", default=["int8", "topk"], choices=list(compression.COMPRESSORS))
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per size at most")
    ap.add_argument("--reps", type=int, default=15, help="repetitions per size at most")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    info = layout(comm)
    ours = collectives.Comm(comm, check=False)
    calls = contenders(comm, ours, args.algorithms, args.compress)
    results = {nbytes: run(comm, nbytes, calls, args.budget, args.reps) for nbytes in args.sizes}
    ours.Free()
    if comm.rank:
        return
    lines = [f"layout: {info['nodes']} node(s) x {info['ranks_per_node']} rank(s); "
             f"links: {os.environ.get('TESTBED_SHAPING', 'see testbed.sh')}",
             f"{'contender':>18} {'size':>10} {'median ms':>10} {'native/ours':>11} {'reps':>5} "
             f"{'sent/rank B':>12} {'compress ms':>11} {'comm ms':>9} {'decomp ms':>9} {'rel.err':>8}"]
    for nbytes, rows in results.items():
        native = rows["native"]["median_s"]
        for name, r in rows.items():
            lines.append(f"{name:>18} {nbytes:>10} {r['median_s'] * 1e3:>10.2f} {native / r['median_s']:>11.2f} "
                         f"{r['reps']:>5} {r['wire_bytes']:>12} {r['compress_s'] * 1e3:>11.2f} "
                         f"{r['communicate_s'] * 1e3:>9.2f} {r['decompress_s'] * 1e3:>9.2f} {r['error']:>8.1e}")
    print("\n".join(lines), flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"net_compressed_{args.label}.json"), "w") as f:
        json.dump({"label": args.label, "layout": info, "results": {str(k): v for k, v in results.items()},
                   "environment": {k: v for k, v in os.environ.items()
                                   if k.startswith(("MPIR_CVAR", "FI_", "TESTBED_"))}}, f, indent=1)


if __name__ == "__main__":
    main()
