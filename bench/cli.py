"""``collectives-bench``: collectives and point-to-point beside native MPI, in OSU's and nccl-tests' terms.

    mpiexec -n 4 collectives-bench allreduce bcast -m 8:64M -i 1000 -x 200 --format osu
    mpiexec -n 2 collectives-bench latency bw bibw -b 1 -e 4M -f 2
    mpiexec -n 2 collectives-bench iallreduce ibcast -b 8 -e 1M       # OSU's overlap of nonblocking calls
    collectives-bench -np 2 allreduce                          # starts the 2 ranks itself (mpiexec -n 2)
    collectives-bench --launches 5 -np 2 allreduce --quick    # median and spread over 5 launches
    collectives-bench --mpich-algorithms -np 2 allreduce       # best of ours against best of MPICH
    collectives-bench plot bench/results/*.json                # PNG per collective and rank count
    collectives-bench tune --np 2:8                            # the auto decision table (tune.py)
    collectives-bench model                                    # cost model: fit, compare, project (model.py)
    mpiexec -n 2 collectives-bench forms                       # every call form of a collective at one cost
    mpiexec -n 2 collectives-bench eager                       # MPI's eager limit, and what cutting pays
    collectives-bench timeline trace.json -o timeline.png      # draw a timeline of every rank (timeline.py)
    collectives-bench --summary                                 # combine earlier JSON results

Sizes: ``-m MIN:MAX`` (OSU) or ``-b MIN -e MAX -f FACTOR`` (nccl-tests), units K, M, G (binary).
Iterations: ``-i/-n`` timed calls and ``-x/-w`` warm-up calls per contender and size; by default
OSU's: 1000 after 200 warm-up below 8 KiB and 100 after 10 from 8 KiB for collectives, 10000 /
1000 (warm-up 100 / 10) for latency and exchange, 100 / 20 windows of 64 messages (warm-up 10 / 2) for bw and
bibw; nonblocking tests (``iallreduce``, ...) the collectives' counts in each of their two phases.
``--budget`` seconds per size may end the timed loop earlier; the rows say how many ran.
"""
import argparse
import importlib
import json
import os
import sys

from .common import COLLECTIVE_TESTS, NONBLOCKING_TESTS, P2P_TESTS, RESULTS, blocking, parse_bytes, parse_range

TESTS = COLLECTIVE_TESTS + NONBLOCKING_TESTS + P2P_TESTS
# Names that stand for a group of tests: ``all`` is the blocking collectives.
GROUPS = {"all": COLLECTIVE_TESTS, "nonblocking": NONBLOCKING_TESTS, "p2p": P2P_TESTS}


def parser():
    """The argument parser of the measuring command."""
    ap = argparse.ArgumentParser(prog="collectives-bench", description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="*", metavar="TEST", default=["allreduce"],
                    help=f"one or more of {', '.join(TESTS)}, {', '.join(GROUPS)} (default allreduce)")
    ap.add_argument("--collective", dest="tests_opt", nargs="+", help=argparse.SUPPRESS)
    size = ap.add_argument_group("sizes")
    size.add_argument("-m", "--message-size", type=parse_range, metavar="[MIN:]MAX", help="OSU style size range")
    size.add_argument("-b", "--minbytes", type=parse_bytes, help="nccl-tests: smallest size (default 8)")
    size.add_argument("-e", "--maxbytes", type=parse_bytes, help="nccl-tests: largest size (default 64M)")
    size.add_argument("-f", "--stepfactor", type=int, default=2, help="ratio of consecutive sizes (default 2)")
    run = ap.add_argument_group("measuring")
    run.add_argument("-i", "-n", "--iterations", type=int, help="timed calls per size (default: OSU's)")
    run.add_argument("-x", "-w", "--warmup", type=int, help="untimed warm-up calls per size (default: OSU's)")
    run.add_argument("--budget", type=float, default=2.0, help="seconds of timed calls per size at most (default 2)")
    run.add_argument("-a", "--algorithm", nargs="+", default=["all"],
                     help="all (default), auto, native or algorithm names; native, default and auto always run")
    run.add_argument("-d", "--datatype", default="float32", choices=["float32", "float64", "int32", "int64"])
    run.add_argument("-o", "--op", default="sum", choices=["sum", "max", "min"])
    run.add_argument("-r", "--root", type=int, default=0,
                     help="root of bcast, reduce, gather, scatter and their nonblocking forms")
    run.add_argument("--in-place", action="store_true", help="also measure in place (nccl-tests' second half)")
    run.add_argument("--compress", nargs="+", default=[], metavar="NAME",
                     help="allreduce: also time compression.allreduce through these compressors (rows "
                          "compress:NAME, with bytes sent per rank and compress / comm / decompress times)")
    run.add_argument("-c", "--validate", action="store_true",
                     help="check results again after the timed loop (they are always checked before it)")
    run.add_argument("--quick", action="store_true", help="smoke run: 8 B .. 64 KiB, factor 64, tiny budget")
    out = ap.add_argument_group("output")
    out.add_argument("--format", default="auto", choices=["auto", "nccl", "osu", "table"],
                     help="auto: nccl-tests for collectives, OSU for point-to-point and nonblocking tests "
                          "(which have no nccl-tests format)")
    out.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    out.add_argument("--csv", metavar="PATH", help="write the results as CSV here")
    out.add_argument("--results", metavar="DIR",
                     help=f"directory of the default JSON files (default {RESULTS} under the current directory)")
    out.add_argument("--no-json", action="store_true", help="do not write the default JSON files")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    modes = ap.add_argument_group("modes that launch jobs themselves (run without mpiexec)")
    modes.add_argument("-np", type=int, metavar="N",
                       help="ranks: alone, outside mpiexec, this command starts N ranks of itself (mpiexec -n N "
                            "collectives-bench ...); ranks per launch in the two modes below (default 2)")
    modes.add_argument("--launches", type=int, metavar="N", help="run N launches; median and spread of each ratio")
    modes.add_argument("--mpich-algorithms", action="store_true",
                       help="one launch per MPICH algorithm choice; best of ours against best of MPICH")
    modes.add_argument("--wait-fast", type=float, metavar="SECONDS",
                       help="before each launch in those modes, wait up to SECONDS for the state probe "
                            "(state.py) to read the machine's fast state")
    modes.add_argument("--thread-level", choices=("multiple", "single", "both"), default="both",
                       help="MPI thread level of the launches those modes start (mpi4py's MPI4PY_RC_THREAD_LEVEL): "
                            "both (default: a launch at multiple, where MPICH's collectives are point-to-point, "
                            "then one at single, where they are its shared-memory ones), or one of them")
    modes.add_argument("--summary", action="store_true", help="no measuring: combine earlier JSON results")
    return ap


def tests_of(names, ap):
    """Expand ``all``, ``nonblocking`` and ``p2p``; error on unknown test names."""
    out = []
    for name in names:
        for test in GROUPS.get(name, (name,)):
            if test not in TESTS:
                ap.error(f"unknown test {test!r}; choose from {', '.join(TESTS)}, {', '.join(GROUPS)}")
            out.append(test)
    return list(dict.fromkeys(out))


def known_algorithm(name, tests):
    """Whether ``name`` is all/auto/native/default or an algorithm of one of ``tests`` (of its
    collective, for a nonblocking test)."""
    from collectives.registry import ALGORITHMS, SHM

    measured = [blocking(test) for test in tests]
    return name in ("all", "auto", "native", "default") or any(
        algo.name in (name, f"{coll}_{name}") for coll in measured
        for algo in ALGORITHMS.get(coll, []) + SHM.get(coll, []))


def size_range(args):
    """(min, max, factor) bytes from -m or -b/-e/-f, and --quick."""
    if args.message_size and (args.minbytes is not None or args.maxbytes is not None):
        raise SystemExit("collectives-bench: give -m or -b/-e, not both")
    lo, hi = args.message_size or (args.minbytes, args.maxbytes)
    lo = 8 if lo is None else lo
    hi = (64 << 10 if args.quick else 64 << 20) if hi is None else hi
    if lo > hi:
        raise SystemExit(f"collectives-bench: minimum size {lo} above maximum {hi}")
    if args.stepfactor < 2:
        raise SystemExit("collectives-bench: -f must be at least 2")
    return lo, hi, 64 if args.quick else args.stepfactor


def main(argv=None):
    """Command line entry point; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["plot"], ["tune"], ["model"], ["forms"], ["timeline"], ["eager"]):
        return importlib.import_module(f".{argv[0]}", __package__).main(argv[1:])
    ap = parser()
    args = ap.parse_args(argv)
    args.tests = tests_of(args.tests_opt or args.tests, ap)
    unknown = [a for a in args.algorithm if not known_algorithm(a, args.tests)]
    if unknown:
        ap.error(f"-a: {', '.join(unknown)} names no algorithm of {', '.join(args.tests)}; "
                 "give all, auto, native or names from collectives.names(<collective>)")
    from collectives.compression import COMPRESSORS
    if args.compress and (set(args.compress) - set(COMPRESSORS) or "allreduce" not in args.tests):
        ap.error(f"--compress: names from {', '.join(COMPRESSORS)}, with the allreduce test")
    if args.summary:
        from .harness import summarize
        for test in args.tests:
            print("\n".join(summarize(test, "_quick" if args.quick else "")))
        return 0
    if args.np is not None and args.np < 1:
        ap.error("-np: at least 1 rank")
    if args.launches or args.mpich_algorithms:
        from .launches import main as launches
        args.np = args.np or 2
        return launches(args, argv)
    if args.np is not None:
        return on_ranks(args, argv)
    return measure(args)


def on_ranks(args, argv):
    """``-np N`` without a mode of launches: measure in a launch of N ranks; started alone (one
    process, no mpiexec around it), launch N ranks of this command and wait for them."""
    from mpi4py import MPI

    size = MPI.COMM_WORLD.size
    if size == args.np:
        return measure(args)
    if size > 1:
        raise SystemExit(f"collectives-bench: -np {args.np}, but this launch has {size} ranks: "
                         f"drop -np, or run mpiexec -n {args.np} collectives-bench ...")
    from .launches import child_argv, levels, run

    return run(args.np, child_argv(argv), levels(args))


def _progress(line):
    print(f"[collectives-bench] {line}", file=sys.stderr, flush=True)


def measure(args):
    """Run the sweeps in this MPI launch and print / write the results (rank 0)."""
    from mpi4py import MPI

    from collectives.comm import NATIVE

    from . import cases, harness, nonblocking, p2p, report
    from .common import environment, sizes, table, write_json

    comm = MPI.COMM_WORLD
    lo, hi, factor = size_range(args)
    size_list = sizes(lo, hi, factor)
    if not 0 <= args.root < comm.size:
        raise SystemExit(f"collectives-bench: root {args.root} out of range for {comm.size} ranks")
    rank0 = comm.rank == 0
    budget, sample_s, min_reps = (0.05, 50e-6, 2) if args.quick else (args.budget, 200e-6, 3)
    options = dict(iterations=args.iterations, warmup=args.warmup, budget=budget, sample_s=sample_s,
                   min_reps=min_reps, validate=args.validate,
                   progress=_progress if rank0 and not args.quiet else None)
    hosts = " ".join(sorted(set(comm.allgather(MPI.Get_processor_name()))))
    results = []
    places = ("out", "in") if args.in_place else ("out",)
    for test in args.tests:
        overlap = test in NONBLOCKING_TESTS
        if test in P2P_TESTS:
            head = harness.header(comm, test, "uint8")
            result = p2p.sweep(comm, test, size_list, **options)
        elif overlap:
            head = nonblocking.header(comm, test, args.datatype)
            result = nonblocking.sweep(comm, test, size_list, algorithms=args.algorithm, dtype=args.datatype,
                                       op=args.op, root=args.root, places=places, **options)
        else:
            head = harness.header(comm, test, args.datatype)
            result = harness.sweep(comm, test, size_list, algorithms=args.algorithm, dtype=args.datatype, op=args.op,
                                   root=args.root, places=places, compress=args.compress, **options)
        result["hosts"] = hosts
        result["thread_level"] = harness.THREAD_LEVELS.get(MPI.Query_thread(), "?")
        results.append(result)
        if not rank0:
            continue
        fmt = args.format if args.format != "auto" else ("nccl" if test in COLLECTIVE_TESTS else "osu")
        lines = list(head)
        if overlap and fmt == "nccl":
            lines.append("# nccl-tests has no nonblocking tests: OSU's format")
            fmt = "osu"
        lines += ({"osu": report.osu, "nccl": report.nccl}[fmt](result) if fmt != "table"
                  else table(nonblocking.COLUMNS if overlap else harness.COLUMNS, result["rows"]))
        packed = [row for row in result["rows"] if row["algorithm"].startswith(cases.COMPRESS_PREFIX)]
        if packed:
            lines.append("# compressed all-reduces: median per call over the timed calls, the most of any rank; "
                         "rel.err = max|ours - exact| / max|exact|")
            lines += ["# " + line.lstrip("#") for line in table(harness.COMPRESSED, packed)]
        for s in result["skipped"]:
            lines.append(f"# not measured: {s['algorithm']} at {s['size']} B: {s['reason']}")
        if result["summary"] and overlap:
            lines.append(f"# summary, {test} np={comm.size}: overall time and overlap per size, native's beside "
                         f"default's, auto's and the named algorithm's of least overall time (best); default, auto, "
                         f"speedup = {result['native']} overall / theirs")
            lines += ["# " + line.lstrip("#") for line in table(nonblocking.SUMMARY, result["summary"])]
        elif result["summary"]:
            lines.append(f"# summary, {test} np={comm.size}: best correct named algorithm per size; speedup = "
                         f"{result['native']} p50 / best p50; default, auto: {result['native']} p50 / theirs")
            lines += ["# " + line.lstrip("#") for line in table(harness.SUMMARY, result["summary"])]
        print("\n".join(lines), flush=True)
        result.update(quick=args.quick, check=False, engine="cython" if NATIVE else "python",
                      env=environment(), header=head)
        if not args.no_json:
            suffix = "_quick" if args.quick else ""
            level = result["thread_level"]
            path = write_json(f"{test}_np{comm.size}_{result['malloc']}{suffix}"
                              f"{'' if level == 'multiple' else '_' + level}.json", result, args.results or RESULTS)
            print(f"# wrote {path}", flush=True)
    if rank0:
        env = environment()
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump({"env": env, "results": results}, f, indent=1)
        if args.csv:
            with open(args.csv, "w") as f:
                f.write(report.csv_text(results, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
