"""``collectives-bench model``: the alpha-beta-gamma cost model, fitted here, against measurements,
and projected to large rank counts.

    collectives-bench model                                # fit, compare with bench/results/tune_np*.json, project
    collectives-bench model --params p.json results/*.json # reuse a fit; compare with these benchmark files
    collectives-bench model --ranks 2:4 results/*.json     # fit for np 2..4 only

* Fit: the terms of the shared-memory model (``shm_params``), each measured here, none from
  the benchmark cells it predicts:
  - alpha(p) and beta(p, n), from a native ping-pong between ranks 0 and 1 of a launch of p
    ranks (bench/p2p.py's ``latency``, 8 B .. 64 MiB; the other ranks wait in its Barrier, as
    busy as the ranks of a collective waiting for a message), p = 2..8: alpha(p) the least
    median one-way time up to 4 KiB, beta(p, n) = (p50 - alpha(p)) / n at n bytes.  It holds
    what the flat model lacks: from 16 MiB the data leave the caches, and beyond 2 ranks on
    the 2 cores a message waits for the other end to be scheduled;
  - the pipelined alpha(p), for a call whose messages (about n / p bytes and more) are all
    beyond MPICH's eager cell (EAGER, the testbed's ``Links``): such a message goes by the
    shared-memory pipeline, whose start costs more than an eager message's alpha.  It is the
    intercept of a least-squares line through the same ping-pong's p50 at PIPELINE_FIT sizes
    (at least alpha(p)), and beta(p, n) is then (p50 - that intercept) / n, so one message of
    n bytes still costs its ping-pong time; a schedule's steps of n / p bytes each pay the
    start-up instead of a share of the whole message's (what it gains:
    docs/results/cost-model.md);
  - the exchange beta(p, n), for the algorithms whose STEPS are "exchange" (every rank sends
    and receives at once in each step): from bench/p2p.py's ``exchange`` in a launch of p
    ranks (every rank a Sendrecv to rank + 1 from rank - 1 at once, 8 B .. 64 MiB), (p50 -
    the alpha charged) / n, so one step of n bytes costs the measured exchange.  On shared
    memory all ranks then move their bytes through the one memory system at once, which a
    ping-pong between two ranks never shows (what it gains: docs/results/cost-model.md);
  - gamma(n), the float32 sum kernel (collectives.kernels.reduce_into, the combine every
    reducing schedule calls) at n bytes, median of several runs, 4 KiB .. 64 MiB: in cache
    and out of it;
  - share(p), the slowdown of that kernel (256 KiB) when p processes run it at once on this
    machine's cores, p = 1..8 (gamma x share(p): the ranks combine at once).
  - for the algorithms whose STEPS are "shared" (they run in the node's shared segment), the
    memory-bandwidth term: beta(n), the per-byte time of ``np.copyto`` at n bytes, 4 KiB ..
    64 MiB, in cache and out of it, x share(p) (the ranks copy at once); and their alpha(p),
    one phase, barrier_shm's p50 at p ranks (a barrier is one phase; the call's entry, which
    it includes, the fixed cost below takes back).
  The model predicts the median call (p50), so these are medians too.  ``alpha_s`` (printed)
  is the fastest one-way time at np=2.  The projection uses none of these: its interconnects
  have one alpha and beta, one rank per core and no cache effect, and it keeps gamma as one
  number (``gamma_s_per_byte``, the kernel's median per-byte time over 1-16 MiB).
* Compare: every named algorithm's row of the given benchmark results at 64 KiB and more,
  measured p50 and min beside ``cost(p, n, *shm_params(params, p, n))`` from its module plus
  the call's fixed cost, and the errors.  The fixed cost (the Python and Cython entry, the
  schedule, the oversubscribed ranks' latency beyond alpha) does not depend on the size: it is
  the same algorithm's p50 at 4 KiB in the same result record less ``cost`` there, as the
  testbed model below takes it (a size 16x below the smallest predicted one).
* Agreement: when the results hold the same cell more than once (a repeat mode's file holds
  each of its launches), one launch's p50 taken as the prediction of another's, counted
  within 25% as the model's cells are: the most a model can score on such launches here.
* Testbed (simulate.py's ``predict``, run by bench/net/model_check.py): each algorithm's own
  schedule walked over a node map, with shared memory within a node, links shared by the messages of a step
  and the links' token bucket, plus the call's fixed cost (the comment above ``Links``).
  Parameters (``Links``, ``fixed_cost``), each from bench/net/measure.py in the launch whose
  all-reduce cells it predicts, none from those cells (model_check.py's docstring says how):
  intra-node alpha and beta, from every node's shared-memory exchange at once, and from the
  same exchanges the start-up that a message beyond MPICH's eager cell adds; inter-node
  alpha, from a train of exchanges across the shaped link; inter-node beta, from the
  exchange's largest sizes, beyond the burst; the in-burst beta, per message, from the
  exchange's slope over 4 KiB .. the burst; the burst, testbed.sh's tbf setting; gamma,
  the sum kernel on every rank at once; each algorithm's fixed cost, its own call timed at
  4 KiB less the walk's time there.
* Project: per collective, the algorithm of least predicted time and that time at 64 .. 4096
  ranks for two interconnects (100 Gbit/s with 1.5 us, 25 Gbit/s with 5 us; gamma stays this
  machine's), the sizes where the choice changes, beside MPICH's published thresholds.
"""
import argparse
import glob
import importlib
import json
import math
import os
import statistics
import sys
import time

from .common import RESULTS, human, sizes, write_json
from .launches import launch

NETWORKS = {"100Gbit/s+1.5us": (1.5e-6, 8 / 100e9), "25Gbit/s+5us": (5e-6, 8 / 25e9)}
PROJECT_RANKS = (64, 256, 1024, 4096)
LARGE = 64 << 10
SMALL = 4 << 10
# MPICH 5.0.2's shared-memory eager cell (payload bytes, the ``Links`` docstring below) and the
# ping-pong sizes, all beyond it, whose line gives the pipelined alpha.
EAGER = 8064
PIPELINE_FIT = (16 << 10, 256 << 10)
KERNEL_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
SHARE_BYTES = 256 << 10
RANKS = tuple(range(2, 9))
# MPICH's defaults (pmodels/mpich, src/mpi/coll/cvars.txt and the CVAR blocks of the
# collectives' sources): the size in bytes where its default choice changes.
MPICH_DEFAULTS = {
    "allreduce": "MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE=2048: recursive doubling up to 2048 B, "
                 "reduce-scatter + allgather (Rabenseifner) above",
    "bcast": "MPIR_CVAR_BCAST_SHORT_MSG_SIZE=12288, _LONG_MSG_SIZE=524288, _MIN_PROCS=8: binomial below "
             "12288 B (or under 8 ranks), scatter + recursive-doubling allgather to 512 KiB (power of two), "
             "scatter + ring allgather above",
    "allgather": "MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE=81920, _LONG_MSG_SIZE=524288: recursive doubling below "
                 "512 KiB for a power of two, Bruck below 80 KiB otherwise, ring above",
    "reduce_scatter": "MPIR_CVAR_REDSCAT_COMMUTATIVE_LONG_MSG_SIZE=524288: recursive halving below 512 KiB, "
                      "pairwise above (commutative ops)",
}


def cost_of(name):
    """The ``cost`` function of algorithm ``name``."""
    return importlib.import_module(f"collectives.algorithms.{name}").cost


def steps_of(name):
    """The ``STEPS`` of algorithm ``name``: "exchange", "one-way" or "shared" (collectives.algorithms._cost)."""
    return importlib.import_module(f"collectives.algorithms.{name}").STEPS


def fit_alpha(rows, column="min(us)"):
    """alpha in seconds from ping-pong rows: the least one-way time in ``column`` up to SMALL
    (by default the fastest sample: on a shared machine it is the one other jobs did not delay)."""
    small = [row[column] * 1e-6 for row in rows
             if row["algorithm"] == "native" and row["size"] <= SMALL and row[column] is not None]
    if not small:
        raise SystemExit(f"collectives-bench model: the ping-pong has no size up to {human(SMALL)} to fit alpha")
    return min(small)


def fit_beta(rows):
    """(alpha, [(bytes, s/byte)]) of the median call: alpha the least p50 up to SMALL, and the
    ping-pong's per-byte time (p50 - alpha) / n at each size from SMALL."""
    alpha = fit_alpha(rows, "p50(us)")
    table = [(row["size"], (row["p50(us)"] * 1e-6 - alpha) / row["size"]) for row in rows
             if row["algorithm"] == "native" and row["size"] >= SMALL and row["p50(us)"] is not None]
    if not any(n >= LARGE and b > 0 for n, b in table):
        raise SystemExit(f"collectives-bench model: the ping-pong has no size of {human(LARGE)} or more "
                         "slower than its small messages to fit beta (a disturbed run: fit again)")
    return alpha, sorted((n, max(b, 0.0)) for n, b in table)


def fit_pipeline(rows, alpha):
    """(alpha, [(bytes, s/byte)]) of a message beyond the eager cell, from ping-pong rows: the
    intercept of a least-squares line through the native p50 at the PIPELINE_FIT sizes (at
    least ``alpha``, the eager alpha), and (p50 - that intercept) / n at each size from the
    first of them."""
    lo, hi = PIPELINE_FIT
    native = sorted((row["size"], row["p50(us)"] * 1e-6) for row in rows
                    if row["algorithm"] == "native" and row["size"] >= lo and row["p50(us)"] is not None)
    line = [(n, t) for n, t in native if n <= hi]
    if len(line) < 2:
        raise SystemExit(f"collectives-bench model: the ping-pong has fewer than two sizes in {human(lo)} .. "
                         f"{human(hi)} to fit the pipelined alpha")
    start = max(alpha, statistics.linear_regression(*zip(*line)).intercept)
    return start, [(n, max((t - start) / n, 0.0)) for n, t in native]


def per_byte(table, n):
    """Seconds per byte at ``n`` bytes from ``table`` [(bytes, s/byte)], ascending: linear in
    lg n between its sizes, its end values beyond them."""
    if not table:
        raise ValueError("an empty per-byte table")
    if n <= table[0][0]:
        return table[0][1]
    for (n0, b0), (n1, b1) in zip(table, table[1:]):
        if n <= n1:
            w = math.log(n / n0) / math.log(n1 / n0)
            return b0 + w * (b1 - b0)
    return table[-1][1]


def _kernel(nbytes):
    """A call of the float32 sum kernel over ``nbytes`` (into a buffer of its own)."""
    import numpy as np

    from collectives import kernels
    from collectives.ops import OP_CODE, dtype_code

    code, add = dtype_code(np.float32), OP_CODE["sum"]
    dst, src = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
    return lambda: kernels.reduce_into(dst, src, code, add)


def _copy(nbytes):
    """A call of ``np.copyto`` of ``nbytes`` between buffers of its own."""
    import numpy as np

    dst, src = np.zeros(nbytes, np.uint8), np.ones(nbytes, np.uint8)
    return lambda: np.copyto(dst, src)


def by_size(make, repeats=7):
    """[(bytes, s/byte)]: the median per-byte time of ``repeats`` runs of ``make(nbytes)``'s call
    at each of KERNEL_SIZES (a run of many calls below 1 MiB, timed together)."""
    table = []
    for nbytes in KERNEL_SIZES:
        call = make(nbytes)
        calls = max(1, (1 << 20) // nbytes)
        call()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            times.append((time.perf_counter() - t0) / calls)
        table.append((nbytes, statistics.median(times) / nbytes))
    return table


def fit_gamma_by_size(repeats=7):
    """gamma(n): the float32 sum kernel's per-byte time at each size, 4 KiB .. 64 MiB."""
    return by_size(_kernel, repeats)


def fit_copy_by_size(repeats=7):
    """The shared-memory beta(n): a copy's per-byte time at each size, 4 KiB .. 64 MiB."""
    return by_size(_copy, repeats)


def fit_phase(rows):
    """One phase in seconds from a barrier_shm launch's rows: its p50."""
    found = [row["p50(us)"] * 1e-6 for row in rows if row["algorithm"] == "barrier_shm" and row["p50(us)"] is not None]
    if not found:
        raise SystemExit("collectives-bench model: the barrier_shm launch has no barrier_shm row "
                         "(no shared segment on this node?)")
    return min(found)


def one_gamma(table):
    """One gamma (s/byte) from a ``fit_gamma_by_size`` table: its median over 1-16 MiB."""
    return statistics.median(g for n, g in table if (1 << 20) <= n <= (16 << 20))


def fit_gamma():
    """Seconds per byte of the float32 sum kernel, one number (``one_gamma``)."""
    return one_gamma(fit_gamma_by_size())


def _share_run(nbytes, calls, ready, done):
    call = _kernel(nbytes)
    call()
    ready.wait()
    for _ in range(calls):
        call()
    done.put(True)


def fit_share(max_ranks=8, nbytes=SHARE_BYTES, seconds=0.1):
    """[(p, slowdown)] for p = 1..max_ranks: the wall time from a common start until p processes
    have each run the sum kernel as many times as one process does in about ``seconds``, over
    one process's."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    call = _kernel(nbytes)
    t0 = time.perf_counter()
    for _ in range(100):
        call()
    calls = max(100, int(seconds / ((time.perf_counter() - t0) / 100)))
    walls = []
    for p in range(1, max_ranks + 1):
        ready, done = ctx.Barrier(p + 1), ctx.Queue()
        procs = [ctx.Process(target=_share_run, args=(nbytes, calls, ready, done)) for _ in range(p)]
        for proc in procs:
            proc.start()
        ready.wait()
        t0 = time.perf_counter()
        for _ in procs:
            done.get()
        walls.append(time.perf_counter() - t0)
        for proc in procs:
            proc.join()
    return [(p, wall / walls[0]) for p, wall in enumerate(walls, 1)]


def fit(budget, ranks=RANKS, wait=None):
    """Fitted parameters (the module docstring): alpha(p) and beta(p, n) from a ping-pong launch
    at each p of ``ranks`` (each after waiting up to ``wait`` seconds for the fast state, as
    launches.py does; None: no probe), gamma(n) and share(p) in this process."""
    pings, exchanges, phases = {}, {}, {}
    for p in ranks:
        for test, into in (("latency", pings), ("exchange", exchanges)):
            print(f"[collectives-bench model] {test} at np={p}", file=sys.stderr)
            results, error = launch(p, [test, "-m", "8:64M", "-f", "4", "--budget", str(budget)], wait=wait)
            if error:
                raise SystemExit(f"collectives-bench model: the {test} launch at np={p} failed: {error}")
            into[p] = results[0]["rows"]
        print(f"[collectives-bench model] barrier_shm at np={p}", file=sys.stderr)
        # The segment is made whatever the cores (COLLECTIVES_SHM=1), as the benchmark runs it.
        results, error = launch(p, ["barrier", "-a", "barrier_shm", "--budget", str(budget)],
                                env={"COLLECTIVES_SHM": "1"}, wait=wait)
        if error:
            raise SystemExit(f"collectives-bench model: the barrier_shm launch at np={p} failed: {error}")
        phases[p] = fit_phase(results[0]["rows"])
    print("[collectives-bench model] the reduction kernel, a copy and their sharing", file=sys.stderr)
    gamma = fit_gamma_by_size()
    beta = {p: fit_beta(rows) for p, rows in pings.items()}
    return {"alpha_s": fit_alpha(pings[min(pings)]), "gamma_s_per_byte": one_gamma(gamma),
            "ping_pong": [(p, alpha, table) for p, (alpha, table) in beta.items()],
            "pipeline": [(p, *fit_pipeline(pings[p], alpha)) for p, (alpha, _) in beta.items()],
            "exchange": [(p, [(r["size"], r["p50(us)"] * 1e-6) for r in rows
                              if r["algorithm"] == "native" and r["p50(us)"] is not None])
                         for p, rows in exchanges.items()],
            "gamma_by_size": gamma, "copy_by_size": fit_copy_by_size(), "phase": sorted(phases.items()),
            "share_by_ranks": fit_share(max(ranks)), "cores": len(os.sched_getaffinity(0)),
            "ping_pong_us": [(p, [(r["size"], r["min(us)"], r["p50(us)"]) for r in rows if r["algorithm"] == "native"])
                             for p, rows in pings.items()]}


def shm_params(params, p, n, steps="one-way"):
    """(alpha, beta, gamma) that ``cost`` gets for ``p`` ranks and ``n`` bytes on this machine
    (the module docstring): alpha(p), beta(p, n), gamma(n) x share(p); the pipelined alpha(p)
    and its beta(p, n) when n / p is beyond the eager cell.  ``steps`` "exchange" (an
    algorithm's STEPS): beta(p, n) from the exchange instead, (its p50 at n - that alpha) / n,
    so one step of n bytes costs the measured exchange; "shared": one phase and a copy's
    per-byte time x share(p)."""
    needed = {"ping_pong", "pipeline", "exchange", "gamma_by_size", "share_by_ranks"}
    missing = (needed | ({"copy_by_size", "phase"} if steps == "shared" else set())) - params.keys()
    if missing:
        raise SystemExit(f"collectives-bench model: the parameters lack {', '.join(sorted(missing))} "
                         "(an older fit): fit again")
    share = dict(map(tuple, params["share_by_ranks"]))
    if steps == "shared":
        phase = dict(map(tuple, params["phase"]))
        if p not in phase or p not in share:
            raise SystemExit(f"collectives-bench model: the fit has no phase or kernel sharing at np={p} "
                             f"(phase at {sorted(phase)}, sharing at {sorted(share)}): fit with --ranks")
        alpha, beta = phase[p], per_byte(params["copy_by_size"], n) * share[p]
    else:
        alpha, beta = message_terms(params, p, n, steps, share)
    return alpha, beta, per_byte(params["gamma_by_size"], n) * share[p]


def message_terms(params, p, n, steps, share):
    """(alpha, beta) of ``shm_params`` for an algorithm of MPI messages (STEPS "one-way" or
    "exchange")."""
    pings = {q: (alpha, table) for q, alpha, table in params["ping_pong"]}
    if p not in pings or p not in share:
        raise SystemExit(f"collectives-bench model: the fit has no ping-pong or kernel sharing at np={p} "
                         f"(ping-pong at {sorted(pings)}, sharing at {sorted(share)}): fit with --ranks")
    alpha, table = pings[p]
    if n // p > EAGER:
        alpha, table = {q: (start, rest) for q, start, rest in params["pipeline"]}[p]
    if steps == "exchange":
        times = dict(map(tuple, params["exchange"])).get(p)
        if times is None:
            raise SystemExit(f"collectives-bench model: the fit has no exchange at np={p}: fit with --ranks")
        table = [(m, max(t - alpha, 0.0) / m) for m, t in times if m >= SMALL]
    return alpha, per_byte(table, n)


def predicted(name, p, n, params):
    """Seconds of ``cost`` of algorithm ``name`` for ``p`` ranks and ``n`` bytes under ``shm_params``
    for its STEPS."""
    return cost_of(name)(p, n, *shm_params(params, p, n, steps_of(name)))


def fixed_costs(result, params, names):
    """{algorithm: seconds} of one result record, for the algorithms ``names``: each one's p50 at
    its largest size up to SMALL, out of place, less ``predicted`` there."""
    out = {}
    for row in sorted(result["rows"], key=lambda r: r["size"]):
        if row["algorithm"] in names and row["place"] == "out" and 0 < row["size"] <= SMALL and row["p50(us)"]:
            out[row["algorithm"]] = row["p50(us)"] * 1e-6 - predicted(row["algorithm"], result["np"], row["size"], params)
    return out


def compared(row, p):
    """Whether a result row of ``p`` ranks is a cell the model is compared with: out of place,
    timed, LARGE and more.  Collectives that split the data round the size down to whole
    elements per rank (fewer than p float32 elements: 65532 B for 64 KiB at np=3)."""
    return row["place"] == "out" and row["size"] > LARGE - 4 * p and bool(row["p50(us)"])


def compare(results, params):
    """Rows (collective, np, size, algorithm, measured p50 us, measured min us, predicted us, fixed
    us, error against p50, error against min) at LARGE and up, the fixed cost included in the
    prediction (an algorithm without a row at SMALL has none: the cell is left out)."""
    from collectives.registry import ALGORITHMS, SHM

    out = []
    for result in results:
        p = result["np"]
        names = {algo.name for algo in [*ALGORITHMS.get(result["collective"], ()), *SHM.get(result["collective"], ())]}
        fixed = fixed_costs(result, params, names)
        for row in result["rows"]:
            if row["algorithm"] in fixed and compared(row, p):
                f = fixed[row["algorithm"]]
                us = (predicted(row["algorithm"], p, row["size"], params) + f) * 1e6
                out.append((result["collective"], p, row["size"], row["algorithm"], row["p50(us)"], row["min(us)"],
                            us, f * 1e6, us / row["p50(us)"] - 1, us / row["min(us)"] - 1))
    return out


def project(collective, p, alpha, beta, gamma, size_list):
    """[(size, best algorithm, predicted us)] at ``p`` ranks."""
    from collectives.registry import ALGORITHMS

    out = []
    for n in size_list:
        times = {algo.name: cost_of(algo.name)(p, n, alpha, beta, gamma) for algo in ALGORITHMS[collective]}
        best = min(times, key=times.get)
        out.append((n, best, times[best] * 1e6))
    return out


def crossovers(collective, points):
    """'name from SIZE' text for each change of choice along ascending ``points``."""
    out, previous = [], None
    for n, name, _ in points:
        if name != previous:
            out.append(f"{name[len(collective) + 1:]} from {human(n)}")
            previous = name
    return ", ".join(out)


def results_from(paths):
    """Benchmark result records in the JSON files ``paths`` (a sweep's own file, --json output, or
    a repeat mode's file: the records of each of its launches)."""
    out = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if "runs" in data:
            out += [result for run in data["runs"] for result in run]
        else:
            out += data["results"] if "results" in data else [data]
    return out


def agreement(results):
    """Rows (np, within, pairs): for each np, the named algorithms' cells ``compared`` that more
    than one record measured, one record's p50 taken as the prediction of another's, over every
    ordered pair of records: how many are within 25%.  It is what a model that knew one launch
    exactly would score against the other, the ceiling of ``compare``'s count on such launches."""
    from collectives.registry import ALGORITHMS

    cells = {}
    for result in results:
        p = result["np"]
        names = {algo.name for algo in ALGORITHMS.get(result["collective"], ())}
        for row in result["rows"]:
            if row["algorithm"] in names and compared(row, p):
                cells.setdefault((result["collective"], p, row["size"], row["algorithm"]), []).append(row["p50(us)"])
    out = {}
    for (_, p, _, _), times in cells.items():
        pairs = [(a, b) for i, a in enumerate(times) for j, b in enumerate(times) if i != j]
        within, total = out.get(p, (0, 0))
        out[p] = (within + sum(abs(a / b - 1) <= 0.25 for a, b in pairs), total + len(pairs))
    return [(p, *out[p]) for p in sorted(out) if out[p][1]]


def ranks_of(text):
    """(lo, ..., hi) from ``lo:hi``, both at least 2."""
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise SystemExit(f"collectives-bench model: --ranks takes lo:hi, e.g. 2:8, not {text!r}") from None
    if not 2 <= lo <= hi:
        raise SystemExit(f"collectives-bench model: --ranks needs 2 <= lo <= hi, not {text!r}")
    return tuple(range(lo, hi + 1))


def main(argv=None):
    """``collectives-bench model``; the exit status."""
    ap = argparse.ArgumentParser(prog="collectives-bench model", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="*", help="benchmark JSON files to compare with "
                    "(default bench/results/tune_np*.json, which `collectives-bench tune --raw bench/results` writes)")
    ap.add_argument("--params", help="the fit of an earlier run (its --out file) instead of fitting")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per ping-pong size when fitting")
    ap.add_argument("--ranks", default=f"{RANKS[0]}:{RANKS[-1]}", help="rank counts of the ping-pong launches "
                    "and the kernel's sharing when fitting, lo:hi (the results' np must be among them)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "model.json"), help="where to write the numbers")
    ap.add_argument("--wait-fast", type=float, metavar="SECONDS",
                    help="before each ping-pong launch, wait up to SECONDS for the state probe (state.py) to read "
                         "the machine's fast state (launches.py)")
    args = ap.parse_args(argv)
    if args.params:
        with open(args.params) as f:
            params = json.load(f)
        params = params.get("params", params)  # an earlier run's output holds them under "params"
    else:
        params = fit(args.budget, ranks_of(args.ranks), args.wait_fast)
    a, g = params["alpha_s"], params["gamma_s_per_byte"]
    lines = [f"# fitted on this machine: alpha {a * 1e6:.2f} us (np=2, fastest); gamma(n) "
             + ", ".join(f"{human(n)} {x * 1e12:.0f}" for n, x in params["gamma_by_size"])
             + f" ps/byte; share(p) on {params['cores']} cores " + ", ".join(f"{p} {x:.2f}" for p, x in params["share_by_ranks"])]
    pipes = {p: (start, table) for p, start, table in params["pipeline"]}
    lines += [f"# np={p}: alpha(p) {alpha * 1e6:.1f} us, pipelined {pipes[p][0] * 1e6:.1f} us, beta(p, n) "
              + ", ".join(f"{human(n)} {b * 1e12:.0f}" for n, b in pipes[p][1] if n >= LARGE)
              + " ps/byte; exchange beta(p, n) "
              + ", ".join(f"{human(n)} {shm_params(params, p, n, 'exchange')[1] * 1e12:.0f}"
                          for n, _ in pipes[p][1] if n >= LARGE) + " ps/byte"
              for p, alpha, _ in params["ping_pong"]]
    if "copy_by_size" in params:
        lines.append("# shared segment: a copy " + ", ".join(f"{human(n)} {x * 1e12:.0f}" for n, x in params["copy_by_size"])
                     + " ps/byte; one phase " + ", ".join(f"np={p} {t * 1e6:.2f} us" for p, t in params["phase"]))
    results = results_from(args.results or sorted(glob.glob(os.path.join(RESULTS, "tune_np*.json"))))
    rows = compare(results, params)
    if rows:
        lines += [f"# predicted beside measured, {human(LARGE)} and more; predicted = cost(p, n, pipelined alpha(p), "
                  "beta(p, n) (the exchange's for STEPS exchange), gamma(n) x share(p)) + fixed; "
                  "error = predicted / measured - 1",
                  f"#{'collective':>15} {'np':>3} {'size':>9} {'algorithm':>34} {'p50(us)':>11} {'min(us)':>11} "
                  f"{'predicted':>11} {'fixed':>9} {'err(p50)':>8} {'err(min)':>8}"]
        lines += [f"{c:>16} {p:>3} {human(n):>9} {name:>34} {m:>11.1f} {low:>11.1f} {pr:>11.1f} {f:>9.1f} "
                  f"{e:>+8.0%} {el:>+8.0%}" for c, p, n, name, m, low, pr, f, e, el in rows]
        for p in [None] + sorted({r[1] for r in rows}):
            mine = [r for r in rows if p is None or r[1] == p]
            text = []
            for label, k in (("p50", 8), ("min", 9)):
                errors = [abs(r[k]) for r in mine]
                text.append(f"against {label} median |error| {statistics.median(errors):.0%}, "
                            f"{sum(e <= 0.25 for e in errors)} of {len(errors)} within 25%")
            worst = max(mine, key=lambda r: abs(r[8]))
            text.append(f"worst against p50 {worst[3]} {human(worst[2])} at np={worst[1]} {worst[8]:+.0%}")
            lines.append(f"# {'all' if p is None else f'np={p}'}: " + "; ".join(text))
    same = agreement(results)
    if same:
        lines.append("# the same cells in different launches (one launch's p50 as the prediction of another's, "
                     "every ordered pair): within 25%: " + ", ".join(f"np={p} {k} of {n}" for p, k, n in same)
                     + f"; all {sum(k for _, k, _ in same)} of {sum(n for _, _, n in same)}")
    projection = {}
    size_list = sizes(8, 64 << 20, 4)
    for net, (alpha, beta) in NETWORKS.items():
        lines.append(f"\n# projection, {net} (alpha {alpha * 1e6:g} us, beta {8 / beta / 1e9:g} Gbit/s), "
                     f"gamma {g * 1e12:.1f} ps/byte (the kernel, 1-16 MiB), one rank per core, no fixed cost: "
                     "least predicted time per size")
        for collective in ("allreduce", "bcast", "allgather", "reduce_scatter"):
            for p in PROJECT_RANKS:
                points = project(collective, p, alpha, beta, g, size_list)
                projection[f"{net} {collective} {p}"] = points
                at = {n: (name, t) for n, name, t in points}
                lines.append(f"{collective:>15} p={p:<5} {crossovers(collective, points)}; "
                             f"8 B {at[8][1]:.1f} us, 1 MiB {at[1 << 20][1]:.0f} us, 64 MiB {at[64 << 20][1]:.0f} us")
            if collective in MPICH_DEFAULTS:
                lines.append(f"{'':>15} MPICH default: {MPICH_DEFAULTS[collective]}")
    print("\n".join(lines))
    write_json(os.path.basename(args.out), {"params": params, "compare": rows, "projection": projection},
               os.path.dirname(os.path.abspath(args.out)))
    print(f"# wrote {args.out}")
    return 0
