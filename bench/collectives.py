"""Sweep message sizes over every hand-written algorithm of a collective beside the native MPI call.

    mpiexec -n 2 python -m bench.collectives [--collective allreduce ...] [--quick] [--osu]
    python -m bench.collectives --summary          # combine the JSON results of past launches

One launch measures, size by size, the native mpi4py call on the plain communicator, our
``default`` row (``collectives.Comm(comm)`` with no options: what users get, the cross-rank
argument check on), our ``auto`` row (``Comm(comm, check=False)`` letting the ``auto`` policy
choose) and every algorithm of ``collectives.names(collective)`` forced by name (check off).  Within a size the contenders are
interleaved: each repetition times every contender once, in an order rotated by one per
repetition, so drift within the launch (on this machine 1-4 MiB cells move 4x with core
placement) hits all contenders alike.  A sample is ``batch`` back-to-back calls after a
Barrier, divided by ``batch`` and taken as the slowest rank's; avg/min/median are over
samples.  ``batch`` grows for small messages so a sample is long enough to time; the number
of repetitions follows a time budget per size (many for 8 B, a few for 64 MiB).

Correctness is checked once per size and contender, native included, against the exact
result: inputs are multiples of 2**-10 below 2 in magnitude, so every summation order gives
the same float32 sum, and ``#wrong`` counts differing elements over all ranks.

Native MPI allocates temporaries per call, which glibc serves as fresh mappings above its
mmap threshold; ``make bench`` therefore runs every launch twice, the second time with
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised, and that launch's native row is
labelled ``native[no-mmap]``.  Results go to bench/results/<collective>_np<p>_<malloc>.json.
"""
import argparse
import functools
import glob
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "collectives" or (__name__ == "__main__" and not __package__):
    # Run as a script (this one, or python bench/train.py importing collectives), bench/ heads
    # sys.path and this file shadows the package: put the repository root in its place, and
    # hand an importer of "collectives" the package instead of this file.
    sys.path[:] = [os.path.dirname(_HERE) if os.path.abspath(p or os.curdir) == _HERE else p
                   for p in sys.path]
    if __name__ == "collectives":
        del sys.modules[__name__]
        sys.modules[__name__] = importlib.import_module("collectives")

import numpy as np
from mpi4py import MPI

import collectives
from collectives.comm import NATIVE
from bench.common import RESULTS, environment, sizes, stats, table, write_json

# Per collective: the mpi4py method (ours has the same name), the nccl-tests bus-bandwidth
# factor, and whether every rank holds 1/p of the data (so counts are multiples of p).
SPEC = {
    "allreduce": ("Allreduce", lambda p: 2 * (p - 1) / p, False),
    "bcast": ("Bcast", lambda p: 1.0, False),
    "allgather": ("Allgather", lambda p: (p - 1) / p, True),
    "reduce_scatter": ("Reduce_scatter_block", lambda p: (p - 1) / p, True),
    "reduce": ("Reduce", lambda p: 1.0, False),
}
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOT = 0
PERIOD, HALF, SCALE = 4093, 2046, np.float32(2.0 ** -10)

NO_MMAP = bool(os.environ.get("MALLOC_MMAP_THRESHOLD_"))
MALLOC = "no-mmap" if NO_MMAP else "glibc"
NATIVE_LABEL = "native[no-mmap]" if NO_MMAP else "native"
THREAD_LEVELS = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                 MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}

COLUMNS = [("size", 10, "d"), ("count", 9, "d"), ("type", 5, "s"), ("redop", 5, "s"),
           ("algorithm", 34, "s"), ("avg(us)", 10, ".2f"), ("min(us)", 10, ".2f"),
           ("median(us)", 10, ".2f"), ("algbw(GB/s)", 11, ".3f"), ("busbw(GB/s)", 11, ".3f"),
           ("#wrong", 6, "d"), ("native/ours", 11, ".2f"), ("reps", 5, "d"), ("batch", 5, "d")]
SUMMARY = [("size", 10, "d"), ("best", 34, "s"), ("median(us)", 10, ".2f"),
           ("native(us)", 10, ".2f"), ("speedup", 7, ".2f"), ("busbw", 7, ".3f"),
           ("native busbw", 12, ".3f"), ("default", 7, ".2f"), ("auto", 7, ".2f")]
# The rows that measure what users get, beside native and the named algorithms.
DEFAULT, AUTO = "default", "auto"


def _data(base, rank):
    """Rank ``rank``'s float32 input: exact multiples of 2**-10, varied, not periodic in blocks."""
    return (((base + 5 * rank) % PERIOD) - HALF).astype(np.float32) * SCALE


class Case:
    """Buffers, calls and exact expected result of ``collective`` at ``count`` elements on ``comm``."""

    def __init__(self, collective, count, comm):
        p, r = comm.size, comm.rank
        method = SPEC[collective][0]
        idx = np.arange(count, dtype=np.int32)
        base = (idx * 7 + (idx >> 12) * 3) % PERIOD
        part = count // p
        n_in = part if collective == "allgather" else count
        inputs = [_data(base[:n_in], i) for i in ([ROOT] if collective == "bcast" else range(p))]
        kwargs = {"root": ROOT} if collective in ("bcast", "reduce") else {}
        self.source = None
        if collective == "bcast":
            self.out = np.empty(count, np.float32)
            args, want = (self.out,), inputs[0]
            self.source = inputs[0] if r == ROOT else None
        else:
            self.out = np.empty(part if collective == "reduce_scatter" else count, np.float32)
            args = (inputs[r], self.out)
            if collective == "allgather":
                want = np.concatenate(inputs)
            else:
                want = functools.reduce(np.add, inputs)
                if collective == "reduce_scatter":
                    want = want[r * part:(r + 1) * part]
                elif collective == "reduce" and r != ROOT:
                    want = None
        self.want = want
        self.nbytes = count * 4
        self.call = lambda comm, **kw: getattr(comm, method)(*args, **kwargs, **kw)

    def check(self, call):
        """Run ``call`` once on poisoned output; the number of elements that differ from exact."""
        self.out.fill(np.nan)
        if self.source is not None:
            self.out[:] = self.source
        call()
        return 0 if self.want is None else int(np.count_nonzero(self.out != self.want))


def counts_for(collective, size_list, p):
    """Element counts of float32 buffers for ``size_list`` bytes, multiples of p where data splits."""
    out = []
    for nbytes in size_list:
        n = nbytes // 4
        if SPEC[collective][2]:
            n = max(p, n // p * p)
        out.append(max(n, 1))
    return sorted(set(out))


def contenders(collective, comm, count):
    """(name, key or None, reason) for native, default, auto and every algorithm; None where one
    cannot run."""
    rows = [(NATIVE_LABEL, "native", None), (DEFAULT, DEFAULT, None), (AUTO, AUTO, None)]
    arg = count * 4 if collective == "bcast" else count
    for algo in collectives.ALGORITHMS[collective]:
        if importlib.util.find_spec(f"collectives.algorithms.{algo.name}") is None:
            rows.append((algo.name, None, "not implemented yet"))
        else:
            reason = algo.applies(comm.size, arg, True)
            rows.append((algo.name, None if reason else algo.name, reason))
    return rows


def measure(comm, calls, budget, min_reps, max_reps, sample_s):
    """Time ``calls`` interleaved; (samples[reps, len(calls)] in s per call, batch sizes)."""
    est = np.empty(len(calls))
    for j, call in enumerate(calls):
        times = []
        for _ in range(2):
            comm.Barrier()
            t0 = MPI.Wtime()
            call()
            times.append(MPI.Wtime() - t0)
        est[j] = min(times)
    # Every rank must make the same number of calls: agree on the estimates first, and let
    # rank 0's clock alone decide when the budget is spent.
    comm.Allreduce(MPI.IN_PLACE, est, op=MPI.MAX)
    batch = np.clip(np.ceil(sample_s / np.maximum(est, 1e-7)), 1, 10000).astype(int)
    samples = np.empty((max_reps, len(calls)))
    stop = np.zeros(1, np.int32)
    start = MPI.Wtime()
    reps = 0
    while reps < max_reps and not stop[0]:
        for j in np.roll(np.arange(len(calls)), -reps):
            call, k = calls[j], batch[j]
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(k):
                call()
            samples[reps, j] = (MPI.Wtime() - t0) / k
        reps += 1
        stop[0] = reps >= min_reps and MPI.Wtime() - start >= budget
        comm.Bcast(stop, root=0)
    samples = samples[:reps]
    comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
    return samples, batch


def sweep(comm, collective, size_list, budget=2.0, min_reps=3, max_reps=200, sample_s=200e-6,
          emit=None):
    """Benchmark ``collective`` at ``size_list`` bytes on ``comm``; the result record.

    ``emit`` receives lines of the table as sizes complete (rank 0 only prints them).
    """
    p = comm.size
    busbw_factor = SPEC[collective][1](p)
    ours = collectives.Comm(comm, check=False)
    default = collectives.Comm(comm)
    rows, skipped, summary = [], [], []
    emit = emit or (lambda line: None)
    emit("\n".join(table(COLUMNS, [])))
    try:
        for count in counts_for(collective, size_list, p):
            case = Case(collective, count, comm)
            named = contenders(collective, comm, count)
            skipped += [{"size": case.nbytes, "algorithm": n, "reason": why}
                        for n, key, why in named if key is None]
            live = [(n, key) for n, key, _ in named if key is not None]
            calls = [functools.partial(case.call, comm) if key == "native"
                     else functools.partial(case.call, default) if key == DEFAULT
                     else functools.partial(case.call, ours) if key == AUTO
                     else functools.partial(case.call, ours, algorithm=key) for _, key in live]
            wrong = np.array([case.check(call) for call in calls], dtype=np.int64)
            comm.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
            samples, batch = measure(comm, calls, budget, min_reps, max_reps, sample_s)
            block = []
            for j, (name, _) in enumerate(live):
                st = stats(samples[:, j])
                algbw = case.nbytes / (st["median_us"] * 1e-6) / 1e9
                block.append({"size": case.nbytes, "count": count, "type": "float",
                              "redop": "sum" if collective in REDUCING else "none",
                              "algorithm": name, "avg(us)": st["avg_us"], "min(us)": st["min_us"],
                              "median(us)": st["median_us"], "algbw(GB/s)": algbw,
                              "busbw(GB/s)": algbw * busbw_factor, "#wrong": int(wrong[j]),
                              "reps": len(samples), "batch": int(batch[j])})
            native = block[0]
            for row in block:
                row["native/ours"] = native["median(us)"] / row["median(us)"]
            rows += block
            emit("\n".join(table(COLUMNS, block)[1:]))
            by_name = {row["algorithm"]: row for row in block if row["#wrong"] == 0}
            mine = [row for row in block[1:] if row["algorithm"] not in (DEFAULT, AUTO)
                    and row["#wrong"] == 0]
            if mine:
                best = min(mine, key=lambda row: row["median(us)"])
                summary.append({"size": case.nbytes, "best": best["algorithm"],
                                "median(us)": best["median(us)"], "native(us)": native["median(us)"],
                                "speedup": best["native/ours"], "busbw": best["busbw(GB/s)"],
                                "native busbw": native["busbw(GB/s)"],
                                "default": by_name.get(DEFAULT, {}).get("native/ours", float("nan")),
                                "auto": by_name.get(AUTO, {}).get("native/ours", float("nan"))})
    finally:
        ours.Free()
        default.Free()
    return {"collective": collective, "np": p, "native": NATIVE_LABEL, "malloc": MALLOC,
            "rows": rows, "skipped": skipped, "summary": summary}


def header(comm, collective):
    """Comment lines saying what was measured, how, and under which settings."""
    p = comm.size
    env = environment()
    cores = env["cores"]
    device = os.environ.get("MPIR_CVAR_DEVICE_COLLECTIVES")
    method = SPEC[collective][0]
    factor = {"allreduce": "2(p-1)/p", "allgather": "(p-1)/p", "reduce_scatter": "(p-1)/p"}
    return [
        f"# collectives benchmark: {collective}, float32, np={p} on {cores} cores, {env['date_utc']}",
        f"# {env['mpi_library']}; mpi4py {env['mpi4py']}, thread level "
        f"{THREAD_LEVELS.get(MPI.Query_thread(), '?')}; numpy {env['numpy']}",
        f"# ours ({'Cython engine' if NATIVE else 'NumPy/mpi4py fallback executor'}): `default` is "
        "collectives.Comm(comm) with no options, as users get it",
        "#   (cross-rank argument check on); `auto` and the named algorithms run on Comm(comm, check=False)",
        f"# {NATIVE_LABEL}: mpi4py comm.{method} on the plain COMM_WORLD, malloc: "
        + ("MALLOC_MMAP_THRESHOLD_=%s MALLOC_TRIM_THRESHOLD_=%s (no fresh mappings per call)"
           % (os.environ.get("MALLOC_MMAP_THRESHOLD_"), os.environ.get("MALLOC_TRIM_THRESHOLD_"))
           if NO_MMAP else "glibc defaults (large temporaries are fresh mappings)"),
        f"# MPIR_CVAR_DEVICE_COLLECTIVES={device or '<unset: MPICH default>'} "
        f"(np={p} {'>' if p > cores else '<='} {cores} cores).  make bench gives native MPICH's defaults,",
        "#   device collectives included, while the ranks fit on the cores, and sets none when oversubscribed,",
        "#   as make test does: MPICH's shared-memory collectives spin on flags and collapse when ranks share",
        "#   a core (below MPI_THREAD_MULTIPLE; at multiple we measured no difference).  Ours is point-to-point.",
        "# time: a sample is `batch` calls back to back after a Barrier, divided by batch, slowest rank;",
        "#   avg/min/median over `reps` samples; contenders interleaved per repetition, order rotated",
        "# native/ours = native median / ours median: > 1.00 means ours is faster",
        f"# algbw = size / median time; busbw = algbw x {factor.get(collective, '1')} (nccl-tests)",
        "# #wrong: elements differing from the exact result, over all ranks (native checked too)",
    ]


def osu(rows):
    """OSU-style blocks, one per contender: # Size, Avg, Min and Median latency (us)."""
    lines = []
    for name in dict.fromkeys(row["algorithm"] for row in rows):
        lines += [f"# OSU-style: {name}",
                  f"# {'Size':<10}{'Avg Latency(us)':>18}{'Min Latency(us)':>18}{'Median Latency(us)':>20}"]
        lines += [f"{row['size']:<12}{row['avg(us)']:>18.2f}{row['min(us)']:>18.2f}{row['median(us)']:>20.2f}"
                  for row in rows if row["algorithm"] == name]
    return lines


def summarize(collective, suffix, directory=RESULTS):
    """Lines comparing, per np and size, native with the default row, the auto row and the best
    named algorithm, in both malloc settings (ratios native / ours)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, f"{collective}_np*_*{suffix}.json"))):
        with open(path) as f:
            data = json.load(f)
        if data.get("quick", False) == (suffix == "_quick"):
            runs.setdefault(data["np"], {})[data["malloc"]] = data
    lines = []
    for p, by_malloc in sorted(runs.items()):
        dates = ", ".join(f"{m} {d['env']['date_utc']}" for m, d in sorted(by_malloc.items()))
        lines += [f"# {collective} np={p}: native median / ours, per malloc setting ({dates})",
                  f"#{'size':>10}" + "".join(f" {'default':>8} {'auto':>6} {'best (' + m + ')':>34} {'x':>5}"
                                             for m in ("glibc", "no-mmap"))]
        cells = {}
        for malloc in ("glibc", "no-mmap"):
            for s in by_malloc.get(malloc, {}).get("summary", []):
                cells.setdefault(s["size"], {})[malloc] = s
        for size, got in sorted(cells.items()):
            parts = []
            for malloc in ("glibc", "no-mmap"):
                s = got.get(malloc)
                if s is None:
                    parts.append(f" {'-':>8} {'-':>6} {'-':>34} {'-':>5}")
                else:
                    parts.append(f" {s.get('default', float('nan')):>8.2f} {s.get('auto', float('nan')):>6.2f}"
                                 f" {s['best']:>34} {s['speedup']:>5.2f}")
            lines.append(f"{size:>11}" + "".join(parts))
        lines.append("")
    return lines


def _bytes(text):
    """Parse 8, 64K, 64Ki, 64M, 64MiB as bytes (binary units)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def main(argv=None):
    """Command line: parse options, run the sweeps, print tables, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective", nargs="+", default=["allreduce"],
                        choices=list(SPEC) + ["all"], help="collectives to sweep (default allreduce)")
    parser.add_argument("--min-bytes", type=_bytes, default=8)
    parser.add_argument("--max-bytes", type=_bytes, default=64 << 20)
    parser.add_argument("--factor", type=int, default=4, help="ratio of consecutive sizes")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds of timed repetitions per size (at least 3 are made)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 B .. 64 KiB, tiny budget")
    parser.add_argument("--osu", action="store_true", help="also print OSU-style blocks per contender")
    parser.add_argument("--no-json", action="store_true", help="do not write bench/results/*.json")
    parser.add_argument("--summary", action="store_true",
                        help="no measuring: combine the JSON results of earlier launches")
    args = parser.parse_args(argv)
    chosen = list(SPEC) if "all" in args.collective else args.collective
    suffix = "_quick" if args.quick else ""
    if args.summary:
        for collective in chosen:
            print("\n".join(summarize(collective, suffix)))
        return
    if args.quick:
        args.max_bytes, args.factor, args.budget = min(args.max_bytes, 64 << 10), 64, 0.05
    comm = MPI.COMM_WORLD
    emit = functools.partial(print, flush=True) if comm.rank == 0 else None
    for collective in chosen:
        if emit:
            emit("\n".join(header(comm, collective)))
        result = sweep(comm, collective, sizes(args.min_bytes, args.max_bytes, args.factor),
                       budget=args.budget, min_reps=2 if args.quick else 3,
                       max_reps=20 if args.quick else 200, sample_s=50e-6 if args.quick else 200e-6,
                       emit=emit)
        if comm.rank:
            continue
        for s in result["skipped"]:
            emit(f"# not measured: {s['algorithm']} at {s['size']} B: {s['reason']}")
        emit(f"# summary, {collective} np={comm.size}: best correct named algorithm per size; "
             f"speedup = {NATIVE_LABEL} median / best median; default, auto: {NATIVE_LABEL} / their median")
        emit("\n".join(table(SUMMARY, result["summary"])))
        if args.osu:
            emit("\n".join(osu(result["rows"])))
        if not args.no_json:
            result.update(quick=args.quick, check=False, engine="cython" if NATIVE else "python",
                          env=environment(), header=header(comm, collective))
            path = write_json(f"{collective}_np{comm.size}_{MALLOC}{suffix}.json", result)
            emit(f"# wrote {os.path.relpath(path)}")
        emit("")


if __name__ == "__main__":
    main()
