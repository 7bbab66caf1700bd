"""The benchmark's harness: sweep message sizes over every hand-written algorithm of a collective
beside the native MPI call, and time them.

    mpiexec -n 2 collectives-bench allreduce [options]     # cli.py: the command line
    collectives-bench --summary                            # combine the JSON results of past launches

One launch measures, size by size, the native mpi4py call on the plain communicator, our
``default`` row (``collectives.Comm(comm)`` with no options: what users get, the cross-rank
argument check on), our ``auto`` row (``Comm(comm, check=False)`` letting the ``auto`` policy
choose) and every algorithm of ``collectives.names(collective)`` forced by name (check off).  Within a size the contenders are
interleaved: each repetition times every contender once, in a fresh random order (the same on
every rank), so drift within the launch (on this machine 1-4 MiB cells move 4x with core
placement) hits all contenders alike, and no contender always runs after the same one: at
16 MiB the same plan measured 10% apart depending on what its predecessor left in the
shared 32 MiB L3.  A sample is ``batch`` back-to-back calls after a Barrier, divided by
``batch`` and taken as the slowest rank's; min/p50/p99/max are over samples.  ``batch``
grows for small messages so a sample is long enough to time; a contender gets samples until
its timed calls reach the iteration count (OSU's by default) or the time budget per size is
spent, after warm-up calls.

Correctness is checked once per size and contender, native included, against the exact
result: inputs are small integers (multiples of 2**-10 below 2 in magnitude for floats), so
every summation order gives the same sum, and ``#wrong`` counts differing elements over all
ranks; a contender with wrong elements is not timed.

Native MPI allocates temporaries per call, which glibc serves as fresh mappings above its
mmap threshold; ``make bench`` therefore runs every launch twice, the second time with
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised, and that launch's native row is
labelled ``native[no-mmap]``.  Results go to bench/results/<collective>_np<p>_<malloc>.json.
The measuring is here (``sweep``, ``measure``); the cases in cases.py; the options, output
formats, point-to-point tests, nonblocking tests and the modes that launch jobs in cli.py,
report.py, p2p.py, nonblocking.py and launches.py.
"""
import glob
import json
import os

import numpy as np
from mpi4py import MPI

from collectives.comm import NATIVE

from .cases import (AUTO, COMPRESS_PREFIX, DEFAULT, MALLOC, NATIVE_LABEL, NO_IN_PLACE, NO_MMAP, REDUCING, ROOTED,
                    SPEC, TYPE_NAMES, Case, Compressed, contenders, counts_for, handles)
from .common import NONBLOCKING_TESTS, RESULTS, environment, human, stats, table

THREAD_LEVELS = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                 MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}

COLUMNS = [("size", 10, "d"), ("count", 9, "d"), ("type", 6, "s"), ("redop", 5, "s"),
           ("algorithm", 34, "s"), ("place", 5, "s"), ("min(us)", 10, ".2f"), ("p50(us)", 10, ".2f"),
           ("p99(us)", 10, ".2f"), ("max(us)", 10, ".2f"), ("busbw(GB/s)", 11, ".3f"),
           ("#wrong", 6, "d"), ("native/ours", 11, ".2f"), ("iters", 6, "d"), ("batch", 5, "d")]
SUMMARY = [("size", 10, "d"), ("best", 34, "s"), ("p50(us)", 10, ".2f"),
           ("native(us)", 10, ".2f"), ("speedup", 7, ".2f"), ("busbw", 7, ".3f"),
           ("native busbw", 12, ".3f"), ("default", 7, ".2f"), ("auto", 7, ".2f")]
# Compressed all-reduce rows (``compress:<name>``): per call, median over the timed calls of the
# slowest rank, the bytes a rank sent (the most of any rank) and the time in each phase, and the
# error of the result, max |ours - exact| / max |exact|.
COMPRESSED = [("algorithm", 34, "s"), ("size", 10, "d"), ("p50(us)", 10, ".2f"), ("native/ours", 11, ".2f"),
              ("wire(B)", 10, "d"), ("compress(us)", 12, ".1f"), ("comm(us)", 10, ".1f"),
              ("decompress(us)", 14, ".1f"), ("rel.err", 8, ".1e")]
# OSU's defaults (osu_coll.h): 1000 timed iterations after 200 warm-up below 8 KiB, 100 after 10
# from 8 KiB; the time budget per size may stop the timed loop earlier (the Iterations column
# says how many ran).
LARGE_MESSAGE = 8192
OSU_ITERATIONS = {"small": (1000, 200), "large": (100, 10)}


def osu_counts(nbytes, iterations=None, warmup=None, defaults=OSU_ITERATIONS):
    """(timed iterations, warm-up iterations) at ``nbytes``: the given ones or OSU's defaults."""
    its, skip = defaults["large" if nbytes >= LARGE_MESSAGE else "small"]
    return (its if iterations is None else iterations), (skip if warmup is None else warmup)



def measure(comm, calls, budget, iterations, warmup, sample_s, min_reps=1):
    """Time ``calls`` interleaved; (list of per-call seconds per sample, one array per call,
    batch sizes).

    Each call first runs ``warmup`` times untimed.  A sample is ``batch`` back-to-back calls
    after a Barrier; a call gets samples until ``iterations`` calls are timed or, once every
    call has ``min_reps`` samples, rank 0 has spent ``budget`` seconds.
    """
    est = np.empty(len(calls))
    for j, call in enumerate(calls):
        for _ in range(warmup):
            call()
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
    batch = np.clip(np.ceil(sample_s / np.maximum(est, 1e-7)), 1, max(1, iterations)).astype(int)
    target = np.maximum(1, -(-iterations // batch))
    samples = np.zeros((int(target.max()), len(calls)))
    done = np.zeros(len(calls), dtype=int)
    stop = np.zeros(1, np.int32)
    # A fixed seed gives every rank the same orders.  A fixed cyclic order (rotating it keeps
    # the cycle) made each contender always follow the same one, whose cache footprint it paid.
    orders = np.random.default_rng(0)
    start = MPI.Wtime()
    while not stop[0]:
        for j in orders.permutation(len(calls)):
            if done[j] >= target[j]:
                continue
            call, k = calls[j], batch[j]
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(k):
                call()
            samples[done[j], j] = (MPI.Wtime() - t0) / k
            done[j] += 1
        stop[0] = np.all(done >= target) or (
            np.all(done >= np.minimum(min_reps, target)) and MPI.Wtime() - start >= budget)
        comm.Bcast(stop, root=0)
    comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
    return [samples[:done[j], j] for j in range(len(calls))], batch


def validate_and_measure(comm, calls, cases, iterations, warmup, budget, sample_s, min_reps, validate):
    """Check every call against its case, time the correct ones interleaved; (#wrong per call
    over all ranks, {call index: (samples, batch)}).  ``validate`` checks again after timing."""
    wrong = np.array([case.check(call) for call, case in zip(calls, cases)], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
    good = [j for j in range(len(calls)) if wrong[j] == 0]
    timed, batch = measure(comm, [calls[j] for j in good], budget, iterations, warmup, sample_s, min_reps)
    if validate:
        again = np.array([cases[j].check(calls[j]) for j in good], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, again, op=MPI.SUM)
        wrong[good] = again
    return wrong, dict(zip(good, zip(timed, batch)))


def binding(comm):
    """Core binding of every rank, e.g. ``0:{0,1} 1:{0,1}`` (os.sched_getaffinity per rank)."""
    cores = comm.allgather(sorted(os.sched_getaffinity(0)))
    return " ".join(f"{r}:{{{','.join(map(str, c))}}}" for r, c in enumerate(cores))


def result_row(case, name, place, samples, batch, wrong, factor):
    """One result row: times in us over samples (None when validation failed), bandwidths from
    the p50 time and ``case.moved`` bytes per call."""
    row = {"size": case.nbytes, "count": case.count, "type": TYPE_NAMES[case.dtype.name],
           "algorithm": name, "place": place, "#wrong": int(wrong), "batch": int(batch),
           "iters": int(len(samples) * batch) if samples is not None else 0}
    if samples is None:
        row.update({k: None for k in ("avg(us)", "min(us)", "p50(us)", "p99(us)", "max(us)",
                                      "algbw(GB/s)", "busbw(GB/s)")})
        return row
    st = stats(samples)
    algbw = case.moved / (st["median_us"] * 1e-6) / 1e9
    row.update({"avg(us)": st["avg_us"], "min(us)": st["min_us"], "p50(us)": st["median_us"],
                "p99(us)": st["p99_us"], "max(us)": st["max_us"], "algbw(GB/s)": algbw,
                "busbw(GB/s)": algbw * factor})
    return row


def sweep(comm, collective, size_list, *, algorithms=("all",), dtype="float32", op="sum", root=0,
          places=("out",), iterations=None, warmup=None, budget=2.0, sample_s=200e-6, min_reps=3,
          validate=False, emit=None, progress=None, compress=()):
    """Benchmark ``collective`` at ``size_list`` bytes on ``comm``; the result record.

    ``places``: "out" and/or "in" (in place).  ``compress``: compressor names whose
    ``compression.allreduce`` is timed beside the all-reduces (rows ``compress:<name>``).  ``emit`` receives lines of the table as sizes
    complete, ``progress`` one line per size before it is measured (rank 0 only prints them).
    ``validate`` checks every contender again after its timed loop.
    """
    if collective in NO_IN_PLACE:
        places = ("out",)
    p = comm.size
    factor = SPEC[collective][1](p)
    rows, skipped, summary = [], [], []
    emit = emit or (lambda line: None)
    emit("\n".join(table(COLUMNS, [])))
    redop = op if collective in REDUCING else "none"
    counts = counts_for(collective, size_list, p, np.dtype(dtype).itemsize)
    with handles(comm, collective) as handle:
        work, ours = handle["native"], handle[AUTO]
        for i, count in enumerate(counts):
            cases = {place: Case(collective, count, work, dtype, op, place == "in", root)
                     for place in places}
            nbytes = cases[places[0]].nbytes
            if progress:
                progress(f"{collective} np={p}: size {i + 1}/{len(counts)}, {human(nbytes)}")
            named = contenders(collective, comm, count, algorithms, np.dtype(dtype).itemsize,
                               ours._engine.segment.cap if ours._engine.segment is not None else 0)
            skipped += [{"size": nbytes, "algorithm": n, "reason": why}
                        for n, key, why in named if key is None]
            live = [(n, key, place) for n, key, _ in named if key is not None for place in places]
            calls = [cases[place].bound(handle[key]) if key in handle else cases[place].bound(ours, algorithm=key)
                     for _, key, place in live]
            checks = [cases[place] for _, _, place in live]
            packed = [Compressed(name, cases["out"], ours) for name in compress] if collective == "allreduce" else []
            live += [(COMPRESS_PREFIX + c.compressor.name, None, "out") for c in packed]
            calls += packed
            checks += packed
            its, skip = osu_counts(nbytes, iterations, warmup)
            wrong, samples = validate_and_measure(comm, calls, checks, its, skip, budget, sample_s,
                                                  min_reps, validate)
            block = []
            for j, (name, _, place) in enumerate(live):
                got, k = samples.get(j, (None, 1))
                ok = wrong[j] == 0
                block.append(result_row(cases[place], name, place, got if ok else None, k, wrong[j], factor))
                block[-1].update(redop=redop, root=root if collective in ROOTED else -1)
                if name in (DEFAULT, AUTO):
                    # The algorithm the call runs, so a launch can set it beside the same
                    # algorithm's row by name.
                    block[-1]["ran"] = cases[place].ran(handle[name])
                if isinstance(calls[j], Compressed):
                    block[-1].update(calls[j].columns(comm))
            add_ratios(block, NATIVE_LABEL)
            rows += block
            emit("\n".join(table(COLUMNS, block)[1:]))
            summary += _summary(block, places[0])
    return {"collective": collective, "np": p, "native": NATIVE_LABEL, "malloc": MALLOC,
            "dtype": dtype, "op": redop, "root": root, "places": list(places),
            "binding": binding(comm), "rows": rows, "skipped": skipped, "summary": summary}


def add_ratios(block, native_name, key="p50(us)"):
    """Set ``native/ours`` (native's time / the row's, ``key`` the time: the p50 by default) on
    every timed row of one size's ``block``."""
    for row in block:
        native = next(n for n in block if n["algorithm"] == native_name and n["place"] == row["place"])
        if row[key] is not None and native[key] is not None:
            row["native/ours"] = native[key] / row[key]


def _summary(block, place):
    """The best correct named algorithm of one size beside native, default and auto; [] if none."""
    block = [row for row in block if row["place"] == place]
    native = block[0]
    by_name = {row["algorithm"]: row for row in block if row["p50(us)"] is not None}
    mine = [row for row in block[1:] if row["algorithm"] not in (DEFAULT, AUTO) and row["p50(us)"] is not None
            and not row["algorithm"].startswith(COMPRESS_PREFIX)]
    if not mine or native["p50(us)"] is None:
        return []
    best = min(mine, key=lambda row: row["p50(us)"])
    return [{"size": native["size"], "best": best["algorithm"], "p50(us)": best["p50(us)"],
             "native(us)": native["p50(us)"], "speedup": best["native/ours"],
             "busbw": best["busbw(GB/s)"], "native busbw": native["busbw(GB/s)"],
             "default": by_name.get(DEFAULT, {}).get("native/ours", float("nan")),
             "auto": by_name.get(AUTO, {}).get("native/ours", float("nan"))}]


def header(comm, collective, dtype="float32", bound=None, method=None, path=None, timing=None):
    """Comment lines saying what was measured, how, and under which settings.  ``method`` (the
    native call), ``path`` (what native MPI runs for it) and ``timing`` (lines on how a call is
    timed and what the ratio compares) replace a blocking collective's, for a test timed
    otherwise (nonblocking.py)."""
    p = comm.size
    hosts = " ".join(sorted(set(comm.allgather(MPI.Get_processor_name()))))
    bound = bound or binding(comm)
    if comm.rank:
        return []
    env = environment()
    cores = env["cores"]
    device = os.environ.get("MPIR_CVAR_DEVICE_COLLECTIVES")
    method = method or (SPEC[collective][0] if collective in SPEC else "Send/Recv")
    factor = {"allreduce": "2(p-1)/p", "bcast": "1", "reduce": "1", "barrier": "0"}
    if path is None and env["mpi_library"].startswith("MPICH"):
        path = ("MPICH's collectives on point-to-point messages (at MPI_THREAD_MULTIPLE)"
                if MPI.Query_thread() == MPI.THREAD_MULTIPLE else
                "MPICH's shared-memory collectives (below MPI_THREAD_MULTIPLE, on one node, device collectives on)"
                if device != "none" else "MPICH's collectives on point-to-point messages (device collectives off)")
    path = path or env["mpi_library"].split(",")[0]
    timing = timing or [
        "# time: a sample is `batch` calls back to back after a Barrier, divided by batch, slowest rank;",
        "#   min/p50/p99/max over samples; iters = calls timed (OSU's counts unless -i, cut short by the",
        "#   time budget per size); contenders interleaved per repetition, in a random order",
        "# native/ours = native p50 / ours p50: > 1.00 means ours is faster",
        f"# algbw = size / p50 time; busbw = algbw x {factor.get(collective, '(p-1)/p')} (nccl-tests)"]
    return [
        f"# collectives benchmark: {collective}, {dtype}, np={p} on {cores} cores, {env['date_utc']}",
        f"# {env['mpi_library']}; mpi4py {env['mpi4py']}, thread level "
        f"{THREAD_LEVELS.get(MPI.Query_thread(), '?')}; numpy {env['numpy']}; git {env['git']}",
        f"# hosts: {hosts}; core binding (rank:cores): {bound}",
        f"# ours ({'Cython engine' if NATIVE else 'NumPy/mpi4py fallback executor'}): `default` is "
        "collectives.Comm(comm) with no options, as users get it",
        "#   (cross-rank argument check on); `auto` and the named algorithms run on Comm(comm, check=False)",
        f"# {NATIVE_LABEL}: mpi4py comm.{method} on the plain COMM_WORLD, malloc: "
        + ("MALLOC_MMAP_THRESHOLD_=%s MALLOC_TRIM_THRESHOLD_=%s (no fresh mappings per call)"
           % (os.environ.get("MALLOC_MMAP_THRESHOLD_"), os.environ.get("MALLOC_TRIM_THRESHOLD_"))
           if NO_MMAP else "glibc defaults (large temporaries are fresh mappings)"),
        f"# native's path: {path}",
        f"# MPIR_CVAR_DEVICE_COLLECTIVES={device or '<unset: MPICH default>'} "
        f"(np={p} {'>' if p > cores else '<='} {cores} cores).  make bench gives native MPICH's defaults,",
        "#   device collectives included, while the ranks fit on the cores, and sets none when oversubscribed,",
        "#   as make test does: MPICH's shared-memory collectives spin on flags and collapse when ranks share",
        "#   a core (below MPI_THREAD_MULTIPLE; at multiple we measured no difference).  Ours is point-to-point.",
        *timing,
        "# #wrong: elements differing from the exact result, over all ranks (native checked too);",
        "#   a row with #wrong > 0 is not timed and has no speed",
    ]


def summarize(collective, suffix, directory=RESULTS):
    """Lines comparing, per np and size, native with the default row, the auto row and the best
    named algorithm, in both malloc settings (ratios native / ours: of the p50 times, of the
    overall times for a nonblocking test)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, f"{collective}_np*_*{suffix}.json"))):
        with open(path) as f:
            data = json.load(f)
        if data.get("quick", False) == (suffix == "_quick"):
            runs.setdefault(data["np"], {})[data["malloc"]] = data
    lines = []
    for p, by_malloc in sorted(runs.items()):
        dates = ", ".join(f"{m} {d['env']['date_utc']}" for m, d in sorted(by_malloc.items()))
        stat = "overall" if collective in NONBLOCKING_TESTS else "median"
        lines += [f"# {collective} np={p}: native {stat} / ours, per malloc setting ({dates})",
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
