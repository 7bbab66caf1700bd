"""One testbed launch: check the node layout, fit alpha-beta per link type, time Allreduce.

    bench/net/testbed.sh mpiexec NODES K python bench/net/measure.py --label 1gbit_2x2

Run by bench/net/bench_net.sh on the emulated cluster (testbed.sh); it also runs under a plain
``mpiexec -n P`` (every rank on one node).

1. Layout: ``Split_type(COMM_TYPE_SHARED)`` per host; the launch fails unless every host holds
   the same number of ranks and the groups match the host names MPI reports.
2. Link fits (see link_fits), each of 8 B .. 8 MiB fitted to alpha + beta * bytes (see fit):
   a ping-pong (half the round trip) of rank 0 with the first other rank on its node and with
   the first rank on another node; an exchange (Sendrecv both ways at once, the step every
   all-reduce schedule takes) with that rank on another node; and, with several ranks per
   node, every rank of node 0 exchanging at once with its counterpart on node 1, so k
   messages share each direction of the two nodes' links (the cost model's sharing term);
   with several ranks per node, the first two ranks of every node exchanging at once in
   shared memory (as the node-aware phases do, all nodes at once on the shared cores).
   Each exchange also as a train of TRAIN back to back at up to 8 KiB, for the start-up of a
   schedule's steps (no Barrier skew between them).
   gamma: the float32 sum kernel on every rank at once (see kernel_gamma).
   Fixed costs: every algorithm forced by name (as in 3.) at FIXED_BYTES, timed as the cells
   are (see fixed_costs): the model's size-independent cost of each call.
3. Allreduce of float32 at 64 KiB, 1 MiB, 4 MiB, 16 MiB: native ``Allreduce``, our default
   ``collectives.Comm(comm)`` and a few algorithms forced by name (check off; the node-aware
   ones only where they apply: several nodes, several ranks per node), interleaved:
   each repetition times every contender once in an order rotated by one per repetition, and
   a sample is the slowest rank's time after an idle GAP and a Barrier.  Each contender's
   result is checked once against the exact sum (inputs are multiples of 2**-10, so every
   order sums exactly).

Binding: before MPI starts, each rank binds itself to one core, rank r to the r-th core
(modulo the cores it may use), so that the ranks of a node are on different cores as on a
real node, and each core carries one rank of each of k nodes (at 2x2: ranks 0 and 2 on the
first core, 1 and 3 on the second).  Hydra's ``-bind-to core`` cannot do it here: each
emulated node runs its own proxy, which binds its first rank to the first core, so at 4x1
every rank would share one core.  Unbound, the kernel moved the 4 ranks between the 2 cores
as it liked and the 64 KiB cells moved by up to 50% between launches (recursive doubling at
2x2: 1.03, 0.96 and 0.67 ms); bound, 0.43, 0.40 and 0.44 ms.  ``TESTBED_BIND=none`` leaves
the ranks unbound.  The result records each rank's cores ("binding").

Prints the tables on rank 0 and writes bench/results/net_<label>.json.
"""
import argparse
import json
import os
import socket
import sys
import time

import numpy as np


def bind():
    """Bind this process to one core, by its launcher's rank (module docstring), before MPI
    starts, so the threads MPI starts inherit it; nothing under TESTBED_BIND=none or without
    a rank in the environment (Hydra's PMI_RANK, Open MPI's OMPI_COMM_WORLD_RANK)."""
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
    if os.environ.get("TESTBED_BIND", "core") == "none" or rank is None:
        return
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[int(rank) % len(cores)]})


if __name__ == "__main__":  # a launch binds; a test importing the module keeps its cores
    bind()
from mpi4py import MPI  # noqa: E402  (after bind: MPI's threads start bound)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import collectives  # noqa: E402  (the repository root is put on sys.path just above)

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
ALGORITHMS = ("ring", "ring_segmented", "recursive_doubling", "rabenseifner")
NODE_ALGORITHMS = ("hierarchical", "node_leader")
SIZES = (64 << 10, 1 << 20, 4 << 20, 16 << 20)
PINGPONG_SIZES = (8, 64, 512, 4096, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, 2 << 20, 8 << 20)
# Seconds the links stay idle before each timed sample: tbf refills its 256 KiB burst in 2.1 ms
# at 1 Gbit/s, so every sample starts with full buckets instead of what the one before left.
GAP = 0.005
TRAIN, TRAIN_SIZES = 16, (8, 512, 4096, 8192)  # 16 x 8 KiB stays within the burst
# The calls timed for each algorithm's fixed cost: 4 KiB (1 KiB blocks at 4 ranks, so every
# schedule runs all its steps with messages in them), 16x below the smallest cell predicted;
# 60 samples each, about 2 s a launch.
FIXED_BYTES, FIXED_REPS = 4096, 60


def idle(seconds):
    """Wait ``seconds`` on the CPU: a sleeping rank gives its core away, and on a loaded machine
    getting it back took milliseconds (64 KiB all-reduces took 5-11 ms instead of 0.5)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


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


def pingpong(comm, pairs, reps, both=False, sizes=PINGPONG_SIZES, train=1):
    """Half round-trip seconds per size, median of ``reps``, between each pair (a, b) of
    ``pairs`` at once (rank 0 is a first ``a``); ``both``: each side sends and receives at once
    (Sendrecv) instead of a sending first, and the time is one exchange, not half of two;
    ``train``: that many back to back per sample, the time divided by it."""
    role = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    out = {}
    for nbytes in sizes:
        buf, other = np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        samples = []
        for _ in range(reps + 2):
            idle(GAP)
            comm.Barrier()
            start = time.perf_counter()
            peer = role.get(comm.rank)
            for _ in range(train):
                if peer is not None and both:
                    comm.Sendrecv(buf, peer, recvbuf=other, source=peer)
                elif peer is not None and comm.rank < peer:
                    comm.Send(buf, peer)
                    comm.Recv(buf, peer)
                elif peer is not None:
                    comm.Recv(buf, peer)
                    comm.Send(buf, peer)
            # The slowest pair's time: pairs at once share links.
            elapsed = (time.perf_counter() - start) / (train if both else 2 * train)
            samples.append(comm.allreduce(elapsed, MPI.MAX))
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
    """alpha/beta of each pattern that exists in this layout (module docstring, point 2)."""
    hosts = list(info["hosts"].values())
    patterns = {}
    if len(hosts[0]) > 1:
        patterns["intra-node (shared memory)"] = ([(0, hosts[0][1])], False)
        patterns["intra-node exchange, every node at once"] = ([tuple(h[:2]) for h in hosts], True)
    if len(hosts) > 1:
        patterns["inter-node (shaped link)"] = ([(0, hosts[1][0])], False)
        patterns["inter-node exchange"] = ([(0, hosts[1][0])], True)
        if len(hosts[0]) > 1:
            patterns[f"inter-node exchange, {len(hosts[0])} pairs on one link"] = (
                list(zip(hosts[0], hosts[1])), True)
    # Each exchange again at small sizes as a train: a schedule's steps follow each other with
    # no Barrier between, so their start-up is the train's, without the Barrier's skew.
    runs = [(name, pairs, both, PINGPONG_SIZES, 1) for name, (pairs, both) in patterns.items()]
    runs += [(f"{name}, train of {TRAIN}", pairs, both, TRAIN_SIZES, TRAIN)
             for name, (pairs, both) in patterns.items() if both]
    out = {}
    for name, pairs, both, sizes, train in runs:
        times = pingpong(comm, pairs, reps, both, sizes, train)
        alpha, beta = fit(times)
        out[name] = {"pairs": pairs, "alpha_us": alpha * 1e6, "beta_s_per_byte": beta,
                     "bandwidth_gbit_s": 8e-9 / beta if beta > 0 else float("inf"),
                     "one_way_us": {str(k): v * 1e6 for k, v in times.items()}}
    return out


def kernel_gamma(comm, reps=5):
    """Seconds per byte of the float32 sum kernel (the combine every schedule calls) run on
    every rank at once, as in an all-reduce's steps: the slowest rank's median at 16 MiB, where
    the operands do not stay in cache and the ranks share the cores and memory bandwidth."""
    from collectives import kernels
    from collectives.ops import OP_CODE, dtype_code

    dst, src = np.ones(4 << 20, np.float32), np.ones(4 << 20, np.float32)
    samples = []
    for _ in range(reps):
        comm.Barrier()
        start = time.perf_counter()
        kernels.reduce_into(dst, src, dtype_code(np.float32), OP_CODE["sum"])
        samples.append(comm.allreduce(time.perf_counter() - start, MPI.MAX))
    return float(np.median(samples)) / dst.nbytes


def exact_input(comm, count):
    """This rank's input (multiples of 2**-10 below 1) and the exact float32 sum over ranks."""
    def of(rank):
        return (np.random.default_rng(rank).integers(-1024, 1024, count) / 1024).astype(np.float32)
    return of(comm.rank), sum(of(r).astype(np.float64) for r in range(comm.size)).astype(np.float32)


def contenders(comm, ours):
    """Name -> callable(send, recv) for every Allreduce timed; ``ours``: the collectives.Comm
    (check off) that runs the forced algorithms."""
    default = collectives.Comm(comm)
    out = {"native": comm.Allreduce, "ours default": default.Allreduce}
    info = layout(comm)
    node_aware = NODE_ALGORITHMS if info["nodes"] > 1 and info["ranks_per_node"] > 1 else ()
    for name in ALGORITHMS + node_aware:
        out[name] = lambda s, r, name=name: ours.Allreduce(s, r, algorithm=name)
    return out


def fixed_costs(comm, ours, reps):
    """Median seconds of each forced algorithm's Allreduce of FIXED_BYTES of float32, timed as
    the cells are (interleaved, slowest rank after GAP and a Barrier; native and the default
    are not modelled): calls whose size hardly matters, from which model_check.py takes each
    call's fixed cost."""
    send = np.ones(FIXED_BYTES // 4, np.float32)
    recv = np.empty_like(send)
    calls = {name: call for name, call in contenders(comm, ours).items() if name not in ("native", "ours default")}
    samples = {name: [] for name in calls}
    for rep in range(reps):
        repetition(comm, calls, rep, send, recv, samples)
    return {name: float(np.median(s)) for name, s in samples.items()}


def repetition(comm, calls, rep, send, recv, samples):
    """Time every contender of ``calls`` once, in the order rotated by ``rep``, each after an
    idle GAP and a Barrier; append the slowest rank's seconds to ``samples[name]``."""
    names = list(calls)
    for i in range(len(names)):
        name = names[(i + rep) % len(names)]
        idle(GAP)
        comm.Barrier()
        start = time.perf_counter()
        calls[name](send, recv)
        samples[name].append(comm.allreduce(time.perf_counter() - start, MPI.MAX))


def allreduce(comm, ours, budget):
    """Median seconds per contender and size, interleaved; raises on a wrong result."""
    calls = contenders(comm, ours)
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
            repetition(comm, calls, rep, send, recv, samples)
            rep += 1
        medians[nbytes] = {name: float(np.median(s)) for name, s in samples.items()}
    return medians


def report(info, fits, medians):
    """The tables, as text."""
    lines = [f"layout: {info['nodes']} node(s) x {info['ranks_per_node']} rank(s): {info['hosts']}"]
    for name, f in fits.items():
        # A train's sizes are all small: its slope is no bandwidth.
        rate = "" if ", train of " in name else (f", beta {f['beta_s_per_byte'] * 1e9:.3f} ns/B "
                                                  f"({f['bandwidth_gbit_s']:.2f} Gbit/s)")
        lines.append(f"ping-pong {name}: alpha {f['alpha_us']:.1f} us{rate}")
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
    # 40: the in-burst rate is a slope through medians 4 KiB .. 128 KiB apart, and at 20
    # samples those medians moved +-50 us between neighbouring sizes in a loaded launch.
    parser.add_argument("--pingpong-reps", type=int, default=40, help="samples per link-fit size")
    parser.add_argument("--layout-only", action="store_true", help="only check the node layout")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    info = layout(comm)
    if args.layout_only:
        if comm.rank == 0:
            print(json.dumps(info), flush=True)
        return
    binding = comm.gather(sorted(os.sched_getaffinity(0)))
    load = [os.getloadavg()[0]]
    fits = link_fits(comm, info, args.pingpong_reps)
    gamma = kernel_gamma(comm)
    ours = collectives.Comm(comm, check=False)
    fixed = fixed_costs(comm, ours, FIXED_REPS)
    medians = allreduce(comm, ours, args.budget)
    load.append(os.getloadavg()[0])
    if comm.rank == 0:
        print(report(info, fits, medians), flush=True)
        print(f"cores of each rank: {binding}")
        print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores")
        os.makedirs(RESULTS, exist_ok=True)
        print(f"gamma (float32 sum on every rank at once, 16 MiB): {gamma * 1e9:.3f} ns/B", flush=True)
        result = {"label": args.label, "layout": info, "binding": binding, "links": fits, "gamma_s_per_byte": gamma,
                  "load_average_1min": load,
                  "fixed_cost_calls": {"bytes": FIXED_BYTES, "median_s": fixed},
                  "allreduce_median_s": {str(k): v for k, v in medians.items()},
                  "environment": {k: v for k, v in os.environ.items()
                                  if k.startswith(("MPIR_CVAR", "FI_", "TESTBED_"))}}
        with open(os.path.join(RESULTS, f"net_{args.label}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
