"""One testbed launch: check the node layout, fit alpha-beta per link type, time Allreduce.

    bench/net/testbed.sh mpiexec NODES K python bench/net/measure.py --label 1gbit_2x2

Run by bench/net/bench_net.sh on the emulated cluster (testbed.sh); it also runs under a plain
``mpiexec -n P`` (every rank on one node).

1. Layout: ``Split_type(COMM_TYPE_SHARED)`` per host; the launch fails unless every host holds
   the same number of ranks and the groups match the host names MPI reports.
2. Ping-pong (rank 0 with the first other rank on its node, and with the first rank on another
   node): half the round trip for 8 B .. 8 MiB, fitted to alpha + beta * bytes (see fit).
3. Allreduce of float32 at 64 KiB, 1 MiB, 16 MiB: native ``Allreduce``, our default
   ``collectives.Comm(comm)`` and a few algorithms forced by name (check off), interleaved:
   each repetition times every contender once in an order rotated by one per repetition, and
   a sample is the slowest rank's time after a Barrier.  Each contender's result is checked
   once against the exact sum (inputs are multiples of 2**-10, so every order sums exactly).

Prints the tables on rank 0 and writes bench/results/net_<label>.json.
"""
import argparse
import json
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import collectives  # noqa: E402  (the repository root is put on sys.path just above)

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
ALGORITHMS = ("ring", "ring_segmented", "recursive_doubling", "rabenseifner")
SIZES = (64 << 10, 1 << 20, 16 << 20)
PINGPONG_SIZES = (8, 64, 512, 4096, 32 << 10, 256 << 10, 2 << 20, 8 << 20)


def layout(comm):
    """Ranks per host from Split_type(COMM_TYPE_SHARED), checked against the host names."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    host = MPI.Get_processor_name()
    rows = comm.allgather((comm.rank, host, socket.gethostname(), node.rank, node.size))
    hosts = {}
    for rank, name, _, _, size in rows:
        hosts.setdefault(name, []).append((rank, size))
    sizes = {len(members) for members in hosts.values()}
    if len(sizes) != 1 or any(s != len(m) for m in hosts.values() for _, s in m):
        raise SystemExit(f"node layout is not uniform: {rows}")
    node.Free()
    return {"nodes": len(hosts), "ranks_per_node": sizes.pop(),
            "hosts": {h: [r for r, _ in m] for h, m in sorted(hosts.items())}}


def pingpong(comm, peer, reps):
    """Half round-trip seconds per size between rank 0 and ``peer`` (median of ``reps``)."""
    out = {}
    for nbytes in PINGPONG_SIZES:
        buf = np.zeros(nbytes, np.uint8)
        samples = []
        for _ in range(reps + 2):
            comm.Barrier()
            start = time.perf_counter()
            if comm.rank == 0:
                comm.Send(buf, peer)
                comm.Recv(buf, peer)
            elif comm.rank == peer:
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
            samples.append((time.perf_counter() - start) / 2)
        out[nbytes] = float(np.median(samples[2:]))
    return out


def fit(times):
    """alpha (s) and beta (s/byte) of t = alpha + beta * bytes: beta from the two largest
    sizes, alpha from the smallest.  A least-squares fit over all sizes would be skewed by the
    middle sizes, which the tbf burst lets through faster than the link rate."""
    m = sorted(times)
    beta = (times[m[-1]] - times[m[-2]]) / (m[-1] - m[-2])
    return times[m[0]] - beta * m[0], beta


def link_fits(comm, info, reps):
    """alpha/beta for the intra-node and inter-node pairs that exist in this layout."""
    hosts = list(info["hosts"].values())
    pairs = {}
    if len(hosts[0]) > 1:
        pairs["intra-node (shared memory)"] = hosts[0][1]
    if len(hosts) > 1:
        pairs["inter-node (shaped link)"] = hosts[1][0]
    out = {}
    for name, peer in pairs.items():
        times = pingpong(comm, peer, reps)
        alpha, beta = fit(times)
        out[name] = {"peer": peer, "alpha_us": alpha * 1e6, "beta_s_per_byte": beta,
                     "bandwidth_gbit_s": 8e-9 / beta if beta > 0 else float("inf"),
                     "half_round_trip_us": {str(k): v * 1e6 for k, v in times.items()}}
    return out


def exact_input(comm, count):
    """This rank's input (multiples of 2**-10 below 1) and the exact float32 sum over ranks."""
    def of(rank):
        return (np.random.default_rng(rank).integers(-1024, 1024, count) / 1024).astype(np.float32)
    return of(comm.rank), sum(of(r).astype(np.float64) for r in range(comm.size)).astype(np.float32)


def contenders(comm):
    """Name -> callable(send, recv) for every Allreduce timed."""
    ours = collectives.Comm(comm, check=False)
    default = collectives.Comm(comm)
    out = {"native": comm.Allreduce, "ours default": default.Allreduce}
    for name in ALGORITHMS:
        out[name] = lambda s, r, name=name: ours.Allreduce(s, r, algorithm=name)
    return out


def allreduce(comm, budget):
    """Median seconds per contender and size, interleaved; raises on a wrong result."""
    calls = contenders(comm)
    names = list(calls)
    medians = {}
    for nbytes in SIZES:
        send, expected = exact_input(comm, nbytes // 4)
        recv = np.empty_like(send)
        for name in names:
            recv.fill(np.nan)
            calls[name](send, recv)
            wrong = comm.allreduce(int(np.count_nonzero(recv != expected)))
            if wrong:
                raise SystemExit(f"{name} at {nbytes} B: {wrong} wrong elements")
        samples = {name: [] for name in names}
        deadline = time.perf_counter() + budget
        rep = 0
        while rep < 3 or (rep < 200 and comm.bcast(time.perf_counter() < deadline)):
            for i in range(len(names)):
                name = names[(i + rep) % len(names)]
                comm.Barrier()
                start = time.perf_counter()
                calls[name](send, recv)
                samples[name].append(comm.allreduce(time.perf_counter() - start, MPI.MAX))
            rep += 1
        medians[nbytes] = {name: float(np.median(s)) for name, s in samples.items()}
    return medians


def report(info, fits, medians):
    """The tables, as text."""
    lines = [f"layout: {info['nodes']} node(s) x {info['ranks_per_node']} rank(s): {info['hosts']}"]
    for name, f in fits.items():
        lines.append(f"ping-pong {name}: alpha {f['alpha_us']:.1f} us, "
                     f"beta {f['beta_s_per_byte'] * 1e9:.3f} ns/B ({f['bandwidth_gbit_s']:.2f} Gbit/s)")
    names = list(next(iter(medians.values())))
    lines.append("Allreduce float32, median ms (native / contender)")
    lines.append(f"{'':>20}" + "".join(f"{n // 1024:>14} KiB" for n in medians))
    for name in names:
        cells = "".join(f"{m[name] * 1e3:>10.2f} ({m['native'] / m[name]:4.2f}x)" for m in medians.values())
        lines.append(f"{name:>20}{cells}")
    return "\n".join(lines)


def main():
    """Parse arguments, measure, print and save on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="local", help="result name: bench/results/net_<label>.json")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per message size")
    parser.add_argument("--pingpong-reps", type=int, default=20)
    parser.add_argument("--layout-only", action="store_true", help="only check the node layout")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    info = layout(comm)
    if args.layout_only:
        if comm.rank == 0:
            print(json.dumps(info), flush=True)
        return
    fits = link_fits(comm, info, args.pingpong_reps)
    medians = allreduce(comm, args.budget)
    if comm.rank == 0:
        print(report(info, fits, medians), flush=True)
        os.makedirs(RESULTS, exist_ok=True)
        result = {"label": args.label, "layout": info, "links": fits,
                  "allreduce_median_s": {str(k): v for k, v in medians.items()},
                  "environment": {k: v for k, v in os.environ.items()
                                  if k.startswith(("MPIR_CVAR", "FI_", "TESTBED_"))}}
        with open(os.path.join(RESULTS, f"net_{args.label}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
