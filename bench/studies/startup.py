"""End-to-end time of a short training job, launch included, beside a launch that does nothing.

Run in one process (``make bench-startup``); it starts the launches itself, interleaved so
both see the same machine load.  Contenders, each launched ``--runs`` times on ``--np``
processes:

  baseline   each process imports mpi4py and NumPy and meets the others at a barrier
  train      python -m collectives train --optimizer lbfgs --test-fraction 0 --tol 1e-9
             (L-BFGS to the optimum on the bundled digits), output checked complete
  import     one process: seconds spent in ``import collectives.train.job`` (not launched
             under mpiexec; a breakdown comes from ``python -X importtime``)

Columns: contender, min and median wall seconds, median over the baseline's median, and the
median CPU seconds of all the launch's processes together (less sensitive to other load than
wall time, though MPI's polling while ranks wait counts too).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

TRAIN = ["-m", "collectives", "train", "--optimizer", "lbfgs", "--test-fraction", "0", "--tol", "1e-9",
         "--no-progress"]
BASELINE = ["-c", "import numpy; from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
IMPORT = ["-c", "import time; t = time.perf_counter(); import collectives.train.job; "
                "print(time.perf_counter() - t)"]


def timed(cmd):
    """(wall seconds, CPU seconds of every process it started, stdout) of ``cmd``; RuntimeError
    if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {result.returncode}:\n{result.stderr}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, result.stdout


def main(argv=None):
    """Run the launches and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=4, help="processes per launch")
    ap.add_argument("--runs", type=int, default=7, help="launches per contender")
    ap.add_argument("--mpiexec", default=os.path.join(os.path.dirname(sys.executable), "mpiexec"))
    args = ap.parse_args(argv)
    launch = [args.mpiexec, "-n", str(args.np), sys.executable]
    times = {"baseline": [], "train": [], "import": []}
    cpu = {"baseline": [], "train": []}
    for _ in range(args.runs):
        seconds, used, _ = timed(launch + BASELINE)
        times["baseline"].append(seconds)
        cpu["baseline"].append(used)
        seconds, used, out = timed(launch + TRAIN)
        lines = out.splitlines()
        # nothing lost: the header line, the table and the summary
        summary = [line for line in lines if line.startswith("objective ")]
        if not (lines[0].startswith("digits.svm:") and len(lines) > 3 and summary):
            raise RuntimeError(f"incomplete output:\n{out}")
        times["train"].append(seconds)
        cpu["train"].append(used)
        times["import"].append(float(timed([sys.executable] + IMPORT)[2]))
    base = statistics.median(times["baseline"])
    print(f"# {args.runs} launches each, np={args.np}, interleaved; final objective: {summary[0].split()[1]}")
    print(f"{'contender':>10} {'min s':>8} {'median s':>9} {'/baseline':>10} {'median cpu s':>13}")
    for name, ts in times.items():
        ratio = f"{statistics.median(ts) / base:>10.2f}" if name in cpu else ""
        used = f"{statistics.median(cpu[name]):>13.3f}" if name in cpu else ""
        print(f"{name:>10} {min(ts):>8.3f} {statistics.median(ts):>9.3f} {ratio:>10} {used}".rstrip())


if __name__ == "__main__":
    main()
