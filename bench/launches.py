"""Modes of ``collectives-bench`` that launch MPI jobs themselves (run them without mpiexec).

* ``--launches N``: the same sweep in N separate launches; per size and contender, the median
  and the spread (min, max) of native p50 / ours p50 over the launches (of the overall times,
  and then of the overlap, for a nonblocking test).  Each ratio is taken within one launch,
  where native and ours ran interleaved.
* ``--mpich-algorithms``: one launch per MPICH algorithm choice of the collective
  (``MPIR_CVAR_<COLL>_INTRA_ALGORITHM``, with MPIR_CVAR_DEVICE_COLLECTIVES=none so the choice
  is what runs, and MPIR_CVAR_COLLECTIVE_FALLBACK=error so a choice that does not apply fails
  instead of silently measuring another), plus MPICH's own default (``auto``); per size, the
  best of MPICH against the best of ours.  Blocking collectives only.
* ``--wait-fast SECONDS`` (both modes, and ``collectives-bench tune``): before each launch, run
  the state probe (state.py, of the machine's slow state) until it reads the fast state, for
  at most SECONDS; a launch that starts in the slow state anyway says so on stderr and in the
  JSON file.  On the 2-core machine of docs/results/ one large launch puts the next ones
  into the slow state for a minute or two, so launches run back to back mix the two states.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from .common import NONBLOCKING_TESTS, P2P_TESTS, RESULTS, write_json

# MPICH 5.0.2's choices, from `mpivars` (MPIR_CVAR_<COLL>_INTRA_ALGORITHM); the CVAR per collective.
MPICH_ALGORITHMS = {
    "allreduce": ("ALLREDUCE", ["nb", "smp", "recursive_doubling", "recursive_multiplying",
                                "reduce_scatter_allgather", "tree", "recexch", "ring", "k_reduce_scatter_allgather"]),
    "bcast": ("BCAST", ["binomial", "nb", "smp", "scatter_recursive_doubling_allgather", "scatter_ring_allgather",
                        "pipelined_tree", "tree"]),
    "reduce": ("REDUCE", ["binomial", "nb", "smp", "reduce_scatter_gather"]),
    "allgather": ("ALLGATHER", ["brucks", "k_brucks", "nb", "recursive_doubling", "ring", "recexch_doubling",
                                "recexch_halving"]),
    "reduce_scatter": ("REDUCE_SCATTER_BLOCK", ["noncommutative", "recursive_doubling", "pairwise",
                                                "recursive_halving", "nb"]),
    "alltoall": ("ALLTOALL", ["brucks", "k_brucks", "nb", "pairwise", "pairwise_sendrecv_replace", "scattered"]),
    "alltoallv": ("ALLTOALLV", ["nb", "pairwise_sendrecv_replace", "scattered"]),
    "gather": ("GATHER", ["binomial", "nb"]),
    "scatter": ("SCATTER", ["binomial", "nb"]),
    "barrier": ("BARRIER", ["nb", "smp", "k_dissemination", "recexch"]),
    "scan": ("SCAN", ["nb", "smp", "recursive_doubling"]),
    "exscan": ("EXSCAN", ["nb", "recursive_doubling"]),
    "neighbor_allgather": ("NEIGHBOR_ALLGATHER", ["nb"]),
    "neighbor_alltoall": ("NEIGHBOR_ALLTOALL", ["nb"]),
}
# Set by the launcher of a job; a job started from inside one must not inherit them.
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "OMPI_", "PRTE_")
_USER_SETTINGS = ("OMPI_ALLOW_RUN_AS_ROOT",)
_PARENT_ONLY = {"--launches": 1, "-np": 1, "--mpich-algorithms": 0, "--json": 1, "--csv": 1, "--results": 1,
                "--wait-fast": 1, "--thread-level": 1}
# MPI's thread level of a launch (mpi4py's MPI4PY_RC_THREAD_LEVEL).  At "multiple", mpi4py's
# default, MPICH runs its collectives on point-to-point messages; below it, after a few calls,
# its shared-memory collectives (MPIR_CVAR_DEVICE_COLLECTIVES), which native at its best is.
THREAD_LEVELS = ("multiple", "single")
# Seconds between two probes while waiting for the fast state.
PROBE_EVERY = 20


def child_argv(argv):
    """``argv`` without the options only this launching process uses."""
    out, skip = [], 0
    for word in argv:
        if skip:
            skip -= 1
            continue
        key = word.split("=", 1)[0]
        if key in _PARENT_ONLY:
            skip = _PARENT_ONLY[key] if "=" not in word else 0
            continue
        out.append(word)
    return out


def mpiexec():
    """The mpiexec of this environment: MPIEXEC, beside the interpreter (the mpich wheel), or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = os.environ.get("MPIEXEC") or (here if os.path.exists(here) else shutil.which("mpiexec"))
    if not found:
        raise SystemExit("collectives-bench: no mpiexec (set MPIEXEC)")
    return found


def _clean_env():
    """This environment without what a launcher set for the job it started (a user's own
    OMPI_ALLOW_RUN_AS_ROOT settings stay)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(_LAUNCHER_PREFIXES) or k.startswith(_USER_SETTINGS)}


def levels(args):
    """The thread levels ``args.thread_level`` asks for, in launch order."""
    return THREAD_LEVELS if args.thread_level in (None, "both") else (args.thread_level,)


def level_env(level, np_):
    """The environment of a launch of ``np_`` ranks at thread ``level``: mpi4py asks for it, and
    MPICH's shared-memory collectives are on while the ranks fit on the cores (they spin on
    flags, and collapse when ranks share a core) and off when they do not, as in make test.
    A value of None removes the variable."""
    fits = np_ <= (os.cpu_count() or 1)
    return {"MPI4PY_RC_THREAD_LEVEL": level, "MPIR_CVAR_DEVICE_COLLECTIVES": None if fits else "none"}


def environ(changes):
    """This environment (without the launcher's variables) with ``changes``, None removing one."""
    env = _clean_env()
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def probe():
    """One state probe (state.py) on 2 ranks: (fast: bool, its line); a probe that fails to run
    raises SystemExit with its error."""
    done = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", f"{__package__}.state"], env=_clean_env(),
                          capture_output=True, text=True, timeout=300)
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode not in (0, 1) or not line:
        raise SystemExit(f"collectives-bench: the state probe failed (exit status {done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.returncode == 0, line


def wait_fast(limit, check=probe, sleep=time.sleep, clock=time.monotonic):
    """Probe until the fast state or ``limit`` seconds: (fast, the last probe's line, probes run).
    A probe runs at once, then every PROBE_EVERY seconds while time is left.  A negative limit
    is refused before any probe (every mode that waits, tune and model included, comes here
    before its first launch)."""
    if limit < 0:
        raise SystemExit("collectives-bench: --wait-fast must be 0 seconds or more")
    end, probes = clock() + limit, 0
    while True:
        fast, line = check()
        probes += 1
        print(f"[collectives-bench] {line}", file=sys.stderr, flush=True)
        if fast or clock() + PROBE_EVERY > end:
            if not fast:
                print(f"[collectives-bench] still the slow state after {limit:g} s: launching anyway",
                      file=sys.stderr, flush=True)
            return fast, line, probes
        sleep(PROBE_EVERY)


def command(np_, argv):
    """The command line of ``collectives-bench argv`` on ``np_`` ranks, bound to cores (Hydra's
    and Open MPI's -bind-to) where the cores allow it."""
    from mpi4py import MPI

    # Hydra (MPICH) spells it -bind-to; Open MPI's prterun takes only --bind-to.
    flag = "--bind-to" if MPI.Get_library_version().startswith("Open MPI") else "-bind-to"
    bind = [flag, "core"] if np_ <= (os.cpu_count() or 1) else []
    return [mpiexec(), *bind, "-n", str(np_), sys.executable, "-m", f"{__package__}.cli", *argv]


def run(np_, argv, levels=THREAD_LEVELS):
    """Run ``collectives-bench argv`` on ``np_`` ranks once per thread level of ``levels``, the
    output as it comes; the first non-zero exit status, else 0."""
    for level in levels:
        cmd = command(np_, argv)
        print(f"[collectives-bench] MPI4PY_RC_THREAD_LEVEL={level} {' '.join(cmd)}", file=sys.stderr, flush=True)
        status = subprocess.run(cmd, env=environ(level_env(level, np_))).returncode
        if status:
            return status
    return 0


def launch(np_, argv, env=None, timeout=3600, wait=None):
    """Run the benchmark once on ``np_`` ranks; (results list, None) or (None, error text).
    ``wait`` seconds (None: no probe): first wait for the fast state (``wait_fast``); the
    results then carry the probe's verdict as ``state`` ("fast" or "slow")."""
    state = None
    if wait is not None:
        state = "fast" if wait_fast(wait)[0] else "slow"
    clean = environ(env)
    with tempfile.TemporaryDirectory(prefix="collectives-bench-") as tmp:
        path = os.path.join(tmp, "out.json")
        done = subprocess.run(command(np_, [*argv, "-q", "--no-json", "--json", path]), env=clean,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode or not os.path.exists(path):
            # MPICH's error stack ends with the specific reason, after the last "...: ".
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = next((line.rsplit(":", 1)[-1].strip() for line in reversed(lines)
                        if line.rsplit(":", 1)[-1].strip()), "no output")
            return None, f"exit status {done.returncode}: {why[:200]}"
        with open(path) as f:
            results = json.load(f)["results"]
        if state:
            for result in results:
                result["state"] = state
        return results, None


def _spread(values):
    return statistics.median(values), min(values), max(values)


def _time(row):
    """A row's time: the p50 of a blocking or point-to-point test's, the overall time of a
    nonblocking test's (nonblocking.py)."""
    return row["p50(us)"] if "p50(us)" in row else row.get("overall(us)")


def auto_vs_best(results):
    """{(size, place): (median, min, max)} over launches of best named p50 / auto p50 within each
    launch (1.0: auto ran the fastest algorithm; 0.95: auto 5% slower), from one test's records
    (overall times for a nonblocking test)."""
    per = {}
    for result in results:
        by_cell = {}
        for row in result["rows"]:
            if _time(row) is not None and not row["algorithm"].startswith(("native", "default")):
                by_cell.setdefault((row["size"], row["place"]), {})[row["algorithm"]] = _time(row)
        for cell, times in by_cell.items():
            named = [t for name, t in times.items() if name != "auto"]
            if "auto" in times and named:
                per.setdefault(cell, []).append(min(named) / times["auto"])
    return {cell: _spread(got) for cell, got in per.items()}


def auto_vs_itself(results):
    """{(size, place): (median, min, max)} over launches of p50 of the algorithm ``auto`` ran, by
    name, / auto p50 within each launch: the same call timed as two contenders, so how far
    apart two identical calls read (the resolution of ``auto_vs_best``), from one test's records."""
    per = {}
    for result in results:
        rows = {(row["size"], row["place"], row["algorithm"]): row for row in result["rows"]}
        for (size, place, name), row in rows.items():
            same = rows.get((size, place, row.get("ran")))
            if name == "auto" and _time(row) is not None and same and _time(same) is not None:
                per.setdefault((size, place), []).append(_time(same) / _time(row))
    return {cell: _spread(got) for cell, got in per.items()}


def repeat(args, argv):
    """``--launches N``: lines with the median and spread of every ratio over N launches, at
    each thread level asked for (the levels alternate from one launch to the next)."""
    for level in levels(args):
        print(f"[collectives-bench] {args.launches} launches at thread level {level}", file=sys.stderr, flush=True)
    runs = {level: [] for level in levels(args)}
    for k in range(args.launches):
        for level in runs:
            print(f"[collectives-bench] launch {k + 1}/{args.launches} on {args.np} ranks, thread level {level}",
                  file=sys.stderr, flush=True)
            results, error = launch(args.np, child_argv(argv), level_env(level, args.np), wait=args.wait_fast)
            if error:
                raise SystemExit(f"collectives-bench: launch {k + 1} at thread level {level} failed: {error}")
            runs[level].append(results)
    for level, level_runs in runs.items():
        summarise(args, argv, level, level_runs)
    return 0


def summarise(args, argv, level, runs):
    """Print and write the ratios over the launches ``runs`` at thread ``level``."""
    lines, records = [f"# thread level {level} (MPI4PY_RC_THREAD_LEVEL={level})"], []
    states = [results[0].get("state") for results in runs]
    if any(states):
        lines.append(f"# the state probe before each launch read: {', '.join(states)}")
    for t, result in enumerate(runs[0]):
        test = result["collective"]
        stat = "overall" if test in NONBLOCKING_TESTS else "p50"
        ratios, overlaps = {}, {}
        for results in runs:
            for row in results[t]["rows"]:
                cell = (row["size"], row["algorithm"], row["place"])
                if row.get("native/ours") is not None:
                    ratios.setdefault(cell, []).append(row["native/ours"])
                if row.get("overlap(%)") is not None:
                    overlaps.setdefault(cell, []).append(row["overlap(%)"])
        lines += [f"# {test} np={args.np}, {args.launches} launches: native {stat} / ours {stat} within each launch "
                  "(> 1 means ours is faster); median, min and max over the launches",
                  f"#{'size':>11} {'algorithm':>34} {'place':>5} {'median':>7} {'min':>7} {'max':>7} {'n':>3}"]
        for cell, got in ratios.items():
            med, lo, hi = _spread(got)
            records.append({"collective": test, "np": args.np, "size": cell[0], "algorithm": cell[1], "place": cell[2],
                            "median": med, "min": lo, "max": hi, "ratios": got,
                            **({"overlaps": overlaps[cell]} if cell in overlaps else {})})
            lines.append(f"{cell[0]:>12} {cell[1]:>34} {cell[2]:>5} {med:>7.2f} {lo:>7.2f} {hi:>7.2f} {len(got):>3}")
        if overlaps:
            lines += [f"# {test} np={args.np}: overlap(%) of each launch (nonblocking.py); median, min and max over "
                      "the launches",
                      f"#{'size':>11} {'algorithm':>34} {'place':>5} {'median':>7} {'min':>7} {'max':>7} {'n':>3}"]
            for (size, name, place), got in overlaps.items():
                med, lo, hi = _spread(got)
                lines.append(f"{size:>12} {name:>34} {place:>5} {med:>7.1f} {lo:>7.1f} {hi:>7.1f} {len(got):>3}")
        lines += [f"# {test} np={args.np}: best named algorithm {stat} / auto {stat} within each launch "
                  "(1 = auto chose the fastest; >= 0.95 is within 5%); median, min and max over the launches; "
                  "then the same for auto's own choice by name / auto (one call timed twice: how far apart equal "
                  "calls read)",
                  f"#{'size':>11} {'place':>5} {'median':>7} {'min':>7} {'max':>7} {'itself':>7} {'min':>7} {'max':>7}"]
        mine = [results[t] for results in runs]
        itself = auto_vs_itself(mine)
        for cell, (med, lo, hi) in sorted(auto_vs_best(mine).items()):
            same = " ".join(f"{x:>7.2f}" for x in itself[cell]) if cell in itself else f"{'-':>7} {'-':>7} {'-':>7}"
            lines.append(f"{cell[0]:>12} {cell[1]:>5} {med:>7.2f} {lo:>7.2f} {hi:>7.2f} {same}")
        lines.append("")
    print("\n".join(lines), flush=True)
    path = write_json(f"launches_np{args.np}_x{args.launches}_{level}.json",
                      {"argv": child_argv(argv), "launches": args.launches, "thread_level": level, "states": states,
                       "ratios": records, "runs": runs},
                      args.results or RESULTS)
    print(f"# wrote {path}")


def mpich_sweep(args, argv):
    """``--mpich-algorithms``: per size, the best MPICH choice against the best of ours."""
    base = child_argv(argv)
    if set(args.tests) & set(NONBLOCKING_TESTS):
        raise SystemExit("collectives-bench: --mpich-algorithms chooses among MPICH's blocking collectives; "
                         "drop the nonblocking tests")
    tests = [t for t in args.tests if t not in P2P_TESTS]
    lines, records, states = [], [], {}
    for test in tests:
        cvar, names = MPICH_ALGORITHMS[test]
        test_argv = [test] + [w for w in base if w not in args.tests]
        per_choice, invalid = {}, {}
        for name in ["auto"] + names:
            env = {} if name == "auto" else {f"MPIR_CVAR_{cvar}_INTRA_ALGORITHM": name,
                                            "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                                            "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}
            print(f"[collectives-bench] {test}: MPICH {name}", file=sys.stderr, flush=True)
            results, error = launch(args.np, test_argv if name == "auto" else test_argv + ["-a", "native"], env,
                                    wait=args.wait_fast)
            if error:
                invalid[name] = error
            else:
                per_choice[name] = results[0]
                states[f"{test} {name}"] = results[0].get("state")
        if "auto" not in per_choice:
            raise SystemExit(f"collectives-bench: the launch with MPICH's defaults failed: {invalid['auto']}")
        lines += [f"# {test} np={args.np}: best MPICH choice (MPIR_CVAR_{cvar}_INTRA_ALGORITHM, one launch each; "
                  "'auto' = MPICH's defaults) against the best of ours (named algorithms, in the 'auto' launch)",
                  f"#   not valid here: {', '.join(f'{n} ({why})' for n, why in invalid.items()) or 'none'}",
                  "#   best-MPICH/best-ours compares two launches; auto-same-launch is native/auto within the "
                  "best MPICH choice's launch",
                  f"#{'size':>11} {'best MPICH':>28} {'p50(us)':>10} {'best ours':>34} {'p50(us)':>10} "
                  f"{'MPICH/ours':>10} {'auto-same-launch':>16}"]
        for size in dict.fromkeys(row["size"] for row in per_choice["auto"]["rows"]):
            native = {name: row for name, result in per_choice.items() for row in result["rows"]
                      if row["size"] == size and row["algorithm"].startswith("native") and row["place"] == "out"
                      and row["p50(us)"] is not None}
            ours = [row for row in per_choice["auto"]["rows"] if row["size"] == size and row["place"] == "out"
                    and not row["algorithm"].startswith("native") and row["algorithm"] not in ("default", "auto")
                    and row["p50(us)"] is not None]
            if not native or not ours:
                continue
            mpich_name, mpich = min(native.items(), key=lambda kv: kv[1]["p50(us)"])
            best = min(ours, key=lambda row: row["p50(us)"])
            auto = next((row for row in per_choice[mpich_name]["rows"] if row["size"] == size
                         and row["algorithm"] == "auto" and row["place"] == "out"), {})
            record = {"collective": test, "np": args.np, "size": size, "mpich": mpich_name,
                      "mpich_p50": mpich["p50(us)"], "ours": best["algorithm"], "ours_p50": best["p50(us)"],
                      "ratio": mpich["p50(us)"] / best["p50(us)"], "auto_same_launch": auto.get("native/ours"),
                      "mpich_p50_by_choice": {n: r["p50(us)"] for n, r in native.items()}}
            records.append(record)
            same = f"{record['auto_same_launch']:.2f}" if record["auto_same_launch"] else "-"
            lines.append(f"{size:>12} {mpich_name:>28} {record['mpich_p50']:>10.2f} {best['algorithm']:>34} "
                         f"{best['p50(us)']:>10.2f} {record['ratio']:>10.2f} {same:>16}")
        lines.append("")
    print("\n".join(lines), flush=True)
    path = write_json(f"mpich_algorithms_np{args.np}.json", {"argv": base, "states": states, "best": records},
                      args.results or RESULTS)
    print(f"# wrote {path}")
    return 0


def main(args, argv):
    """Run the mode ``args`` asks for."""
    if args.launches is not None and args.launches < 1:
        raise SystemExit("collectives-bench: --launches must be at least 1")
    return mpich_sweep(args, argv) if args.mpich_algorithms else repeat(args, argv)
