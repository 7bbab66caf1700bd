"""Fault injection: each case is a real mpiexec launch that must end in a clear, rank-attributed
error and a non-zero exit, never a hang.  Prints the markdown table of docs/results/failures.md
(``python -m tests.faults`` from the repository; ``--repeat K`` runs each case K times and gives the range).

Programs run under ``python -m collectives.run`` (abort on an uncaught exception and the
supervisor), or as a plain ``python -c`` program (the ``plain-*`` cases: what a Comm arms by
itself), with the stall watchdog at ``TIMEOUT`` seconds where a case needs it.  tests/test_faults.py runs the
same cases and checks their outcome; the checkpoint cases (a write interrupted by SIGKILL,
SIGTERM then resume) are tests/test_checkpoint.py's, not repeated here.
"""
import argparse
import re
import time

from tests.launch import OPEN_MPI, mpiexec

TIMEOUT = 2.0  # COLLECTIVES_TIMEOUT of the cases that need the watchdog
BOUND_S = 60  # every case must end within this (a loaded CI machine included)
RANKS = 3

# {calls} collectives; {fault} runs on rank 2 just before the second one.
PROGRAM = """
import os, signal, threading, time
import numpy as np
from mpi4py import MPI
import collectives
comm = collectives.Comm(MPI.COMM_WORLD)
x = np.ones({count}, np.float32)
for call in range({calls}):
    if comm.rank == 2 and call == 1:
        print("fault at", time.time(), flush=True)
        {fault}
    {call}
"""

# Rank 1 raises in its gradient computation at its 20th minibatch of `train`.
TRAINING = """
import sys, time
from collectives.__main__ import main
from collectives.train import trainer
from mpi4py import MPI
calls = [0]
gradient = trainer.Trainer.local_gradient
def failing(self, w, index):
    calls[0] += 1
    if MPI.COMM_WORLD.rank == 1 and calls[0] == 20:
        print("fault at", time.time(), flush=True)
        raise RuntimeError("injected failure in the gradient of rank 1")
    return gradient(self, w, index)
trainer.Trainer.local_gradient = failing
sys.exit(main(["train", "--optimizer", "sgd", "--epochs", "3", "--no-progress"]))
"""


def program(fault, count=4, calls=3, call="comm.Allreduce(MPI.IN_PLACE, x)"):
    """``python -m collectives.run -c PROGRAM`` with ``fault`` injected on rank 2."""
    return ["-m", "collectives.run", *plain(fault, count, calls, call)]


def plain(fault, count=4, calls=3, call="comm.Allreduce(MPI.IN_PLACE, x)"):
    """``python -c PROGRAM``, no runner, with ``fault`` injected on rank 2: as a user runs
    ``mpiexec python prog.py``."""
    return ["-c", PROGRAM.format(fault=fault, count=count, calls=calls, call=call)]


KILL = ("threading.Timer(0.2, lambda: (print('fault at', time.time(), flush=True), "
        "os.kill(os.getpid(), signal.SIGKILL))).start()")

# What python -m collectives.run's supervisor (collectives.supervise) prints for rank 2.
KILLED = r"collectives: rank 2 on \S+ \(pid \d+\) was killed by signal 9 \(SIGKILL\); exit status 137"

# name -> (what is injected, python arguments, environment, what the message must match[,
# mpiexec's own options])
CASES = {
    "count": ("rank 2 passes 5 elements, the others 4",
              program("x = np.ones(5, np.float32)"), {},
              r"allreduce: arguments differ across ranks: count ranges 4\.\.5"),
    "dtype": ("rank 2 passes float64, the others float32",
              program("x = np.ones(4, np.float64)"), {},
              r"allreduce: arguments differ across ranks: dtype ranges"),
    "root": ("rank 2 broadcasts from root 1, the others from 0",
             program("comm.Bcast(x, root=1); continue", call="comm.Bcast(x, root=0)"), {},
             r"bcast: arguments differ across ranks: root ranges 0\.\.1"),
    "skip": ("rank 2 skips the second all-reduce (and runs the third)",
             program("continue"), {"COLLECTIVES_TIMEOUT": str(TIMEOUT)},
             r"allreduce \(allreduce_fused\), call 3 on this communicator: rank [01] has waited "
             r"\d+\.\d s at step \d+ for rank\(s\) 2 \(receive from 2\)"),
    "skip-abort": ("the same, COLLECTIVES_TIMEOUT_MODE=abort",
                   program("continue"), {"COLLECTIVES_TIMEOUT": str(TIMEOUT),
                                         "COLLECTIVES_TIMEOUT_MODE": "abort"},
                   r"collectives: allreduce \(allreduce_fused\), call 3 on this communicator: rank "
                   r"[01] has waited \d+\.\d s at step \d+ for rank\(s\) 2 .*aborting the job"),
    "other-collective": ("rank 2 calls Bcast where the others call Allreduce",
                         program("comm.Bcast(x); continue"), {},
                         r"arguments differ across ranks: collective ranges allreduce\.\.bcast \(ranks called different collectives\)"),
    "sigkill": ("rank 2 SIGKILLed 0.2 s into a stream of 16 MiB all-reduces (no watchdog)",
                program(KILL, count=1 << 22, calls=10**6), {}, KILLED),
    "sigkill-no-cleanup": ("the same under `mpiexec -disable-auto-cleanup` (the others run on "
                           "until the watchdog or an MPI error stops them), with the watchdog",
                           program(KILL, count=1 << 22, calls=10**6),
                           {"COLLECTIVES_TIMEOUT": str(TIMEOUT)}, KILLED, ["-disable-auto-cleanup"]),
    "plain-raise": ("`mpiexec python prog.py`, nothing set: rank 2 raises ValueError",
                    plain("raise ValueError('injected on rank 2')"), {},
                    r"collectives: rank 2 on \S+: uncaught ValueError; aborting the job \(MPI_Abort, exit status 1\)"),
    "plain-exit": ("`mpiexec python prog.py`, nothing set: rank 2 calls sys.exit(3)",
                   plain("import sys; sys.exit(3)"), {},
                   r"collectives: rank 2 on \S+: sys\.exit\(3\); aborting the job \(MPI_Abort, exit status 1\)"),
    "plain-skip": ("`mpiexec python prog.py`, COLLECTIVES_TIMEOUT=2: rank 2 skips the second all-reduce",
                   plain("continue"), {"COLLECTIVES_TIMEOUT": str(TIMEOUT)},
                   r"StallError: allreduce \(allreduce_fused\), call 3 on this communicator: rank [01] has waited "
                   r"\d+\.\d s at step \d+ for rank\(s\) 2 \(receive from 2\)"),
    "plain-no-abort": ("`mpiexec python prog.py`, COLLECTIVES_ABORT_ON_ERROR=0 and COLLECTIVES_TIMEOUT=2: "
                       "rank 2 raises ValueError",
                       plain("raise ValueError('injected on rank 2')"),
                       {"COLLECTIVES_ABORT_ON_ERROR": "0", "COLLECTIVES_TIMEOUT": str(TIMEOUT)},
                       r"ValueError: injected on rank 2"),
    "train-raise": ("`python -m collectives train`: rank 1 raises in its 20th gradient",
                    ["-c", TRAINING], {},
                    r"internal error on rank 1: RuntimeError: injected failure in the gradient of rank 1"),
}


# Cases that take options of MPICH's Hydra.
HYDRA_ONLY = ("sigkill-no-cleanup",)
# mpiexec's exit statuses where the case decides them: a SIGKILLed rank's supervisor reports,
# then dies of the same signal, and the job ends with SIGKILL's 9 (Hydra, which kills the other
# ranks) or 137 (Open MPI); under -disable-auto-cleanup the others run on until a survivor's
# StallError (or the MPI error of a transfer the death cut short) stops them, and Hydra still
# reports the killed rank's 9 (docs/results/failures.md), or, when a survivor's exit races
# its handling of the killed one, 255 with its own "process manager error waiting for
# completion", or -13 when mpiexec itself dies of SIGPIPE writing to the killed rank's side of
# that race (seen with both cores busy).  The supervisor leaves SIGKILL's handler alone: no
# process may set it.
STATUS = {"sigkill": (9, 137), "sigkill-no-cleanup": (9, 255, -13), "plain-raise": (1,), "plain-exit": (1,),
          "plain-skip": (124,)}

# What the job leaves to resume from, by case (the last column of docs/failures.md).
NOTHING = "nothing to recover: no rank has state beyond the failed call"
RECOVERED = dict.fromkeys(CASES, NOTHING)
RECOVERED["train-raise"] = ("with `--checkpoint`, the last checkpoint (tests/test_checkpoint.py: "
                            "a resumed run is bit-identical)")


def run(name):
    """Launch case ``name`` on RANKS ranks: (seconds from the fault to the end of mpiexec (from
    the launch if the fault's time stamp was lost), exit status, combined output)."""
    _, args, env, _, *launcher = CASES[name]
    start = time.monotonic()
    done = mpiexec(RANKS, args, timeout=2 * BOUND_S, env=env, options=launcher[0] if launcher else ())
    end, seconds = time.time(), time.monotonic() - start
    # the last stamp: a case that kills a rank prints one more when the kill comes
    stamps = re.findall(r"^fault at ([0-9.]+)$", done.stdout, re.M)
    return end - float(stamps[-1]) if stamps else seconds, done.returncode, done.stdout + done.stderr


def message(name, output):
    """The line of ``output`` that matches the case's expected message ('' if none does)."""
    pattern = re.compile(CASES[name][3])
    return next((line.strip() for line in output.splitlines() if pattern.search(line)), "")


def main(argv=None):
    """Run every case (``--repeat`` times) and print the markdown table."""
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("cases", nargs="*", default=[c for c in CASES if not (OPEN_MPI and c in HYDRA_ONLY)])
    args = parser.parse_args(argv)
    print(f"{RANKS} ranks, watchdog at {TIMEOUT} s where set; seconds from the fault (a time "
          "stamp the faulty rank prints) to the end of mpiexec, on a shared 2-core machine\n")
    print("| case | time to the end (s) | what it says | exit status | what was recovered |")
    print("|---|---|---|---|---|")
    for name in args.cases:
        runs = [run(name) for _ in range(args.repeat)]
        times = sorted(r[0] for r in runs)
        statuses = sorted({r[1] for r in runs})
        said = message(name, runs[-1][2]).replace("|", "\\|") or "(nothing matched; see the output)"
        print(f"| {name}: {CASES[name][0]} | {spread(times)} | `{said}` | "
              f"{', '.join(map(str, statuses))} | {RECOVERED[name]} |")


def spread(times):
    """'1.23' or '1.23-4.56' for sorted ``times``."""
    return f"{times[0]:.2f}" if len(times) == 1 else f"{times[0]:.2f}-{times[-1]:.2f}"


if __name__ == "__main__":
    main()
