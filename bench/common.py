"""Small pieces every benchmark shares: test names, sizes and their parsing, statistics, tables,
the run's environment.

Nothing in this module talks to MPI; a benchmark measures, then hands its samples here.
"""
import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys

import numpy as np

# Where results go unless a command is told otherwise: under the current directory (the checkout's
# bench/results when run from there), never into the installed package.
RESULTS = os.path.join("bench", "results")
COLLECTIVE_TESTS = ("allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "alltoall", "alltoallv",
                    "gather", "scatter", "barrier", "scan", "exscan", "neighbor_allgather", "neighbor_alltoall")
# The nonblocking form of each, named as OSU names its tests (osu_iallreduce, ...): mpi4py's
# ``I`` method of the same collective, timed for overlap with computation (nonblocking.py).
NONBLOCKING_TESTS = tuple("i" + test for test in COLLECTIVE_TESTS)
P2P_TESTS = ("latency", "bw", "bibw", "exchange")

# Environment variables that change what a benchmark measures; recorded with every result.
ENV_KEYS = ("MPIR_CVAR_DEVICE_COLLECTIVES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
            "MPI4PY_RC_THREAD_LEVEL", "COLLECTIVES_PUREPYTHON", "OPENBLAS_NUM_THREADS",
            "OMP_NUM_THREADS")


def blocking(test):
    """The collective a test measures: ``allreduce`` for ``iallreduce``; any other test itself."""
    return test[1:] if test in NONBLOCKING_TESTS else test


def sizes(lo, hi, factor):
    """Message sizes in bytes: ``hi``, ``hi / factor``, ... while above ``lo``, then ``lo``; ascending."""
    out = []
    at = hi
    while at > lo:
        out.append(at)
        at //= factor
    out.append(lo)
    return sorted(set(out))


def parse_bytes(text):
    """Parse 8, 64K, 64Ki, 64KB, 64M, 64MiB as bytes (binary units)."""
    word = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(word[-1:], 1)
    try:
        value = int(word.rstrip("KMG")) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 8, 64K, 16M)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"negative size: {text!r}")
    return value


def parse_range(text):
    """OSU's ``-m``: ``MIN:MAX`` or ``MAX`` alone, as (min, max) bytes."""
    lo, _, hi = text.rpartition(":")
    lo, hi = parse_bytes(lo) if lo else None, parse_bytes(hi)
    if lo is not None and lo > hi:
        raise argparse.ArgumentTypeError(f"-m {text}: minimum above maximum")
    return lo, hi


def human(nbytes):
    """``nbytes`` as 8 B, 64 KiB, 16 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024


def stats(seconds):
    """Average, minimum, median, 99th percentile and maximum of ``seconds``, in microseconds."""
    us = np.asarray(seconds, dtype=float) * 1e6
    return {"avg_us": float(us.mean()), "min_us": float(us.min()), "median_us": float(np.median(us)),
            "p99_us": float(np.percentile(us, 99)), "max_us": float(us.max())}


def table(columns, rows):
    """Fixed-width text lines: a ``#`` header from ``columns`` [(title, width, format)], then rows.

    A row is a dict keyed by title; None prints as ``-``.  Lines starting with ``#`` are
    comments, so the output parses like OSU's and nccl-tests'.
    """
    head = "#" + " ".join(f"{t:>{w}}" for t, w, _ in columns)[1:]
    lines = [head]
    for row in rows:
        cells = []
        for title, width, fmt in columns:
            value = row.get(title)
            cells.append(f"{'-' if value is None else format(value, fmt):>{width}}")
        lines.append(" ".join(cells))
    return lines


def interleaved(cases, repeats, measure):
    """{case: [measure(case), one per round]}: every case once per round for ``repeats`` rounds,
    so a shared machine's load falls on all of them alike."""
    out = {case: [] for case in cases}
    for _ in range(repeats):
        for case in cases:
            out[case].append(measure(case))
    return out


def environment():
    """What a result depends on besides the code: versions, host, cores and relevant variables."""
    from mpi4py import MPI
    import mpi4py

    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": " ".join(MPI.Get_library_version().split("\n")[0].split()),
        "git": git_revision(),
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
    }


@functools.lru_cache(maxsize=None)
def git_revision():
    """``git describe``-like revision of the source tree this code runs from, or the package version."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        import collectives

        return f"collectives {collectives.__version__} (no git checkout)"


def write_json(name, data, directory=RESULTS):
    """Write ``data`` to ``directory/name`` (creating the directory); return the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    return path
