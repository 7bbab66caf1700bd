"""``make test-large``: the collectives and the push/pull primitives just over 2^31 int8 elements.

Run under ``mpiexec -n 2``.  Every message here is over MPI's int count, so it goes through
the split rows of collectives/schedule.py (or, for push/pull, mpi4py's large-count calls).
Data follow a pattern of period 251, a prime, so a piece landing at a wrong offset (any shift
by a multiple of 2^31 or 2^32) shows; results are checked exactly, chunk by chunk, against
the formula.  Skips, with the reason printed, when MemAvailable is below what it needs.
"""
import gc
import resource
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

import collectives
from collectives import p2p

N = 2**31 + 2**20 + 3
PERIOD = 251
CHUNK = PERIOD << 18  # a whole number of periods, ~66 MB
ALLREDUCE = ["recursive_doubling", "ring", "rabenseifner", "reduce_bcast"]
OVERHEAD = 512 << 20  # per rank: interpreter, MPI, the pattern tile, comparison temporaries
WORLD = MPI.COMM_WORLD


def pattern(rank):
    """One period of rank ``rank``'s int8 data, as bytes."""
    return ((np.arange(PERIOD) * 7 + 13 * rank) % PERIOD).astype(np.uint8)


def fill(buf, period):
    """Repeat ``period`` over the uint8 array ``buf`` by doubling copies (no big temporaries)."""
    buf[:len(period)] = period[:len(buf)]
    at = len(period)
    while at < len(buf):
        m = min(at, len(buf) - at)
        buf[at:at + m] = buf[:m]
        at += m


def mismatch(buf, period):
    """None if ``buf`` repeats ``period`` throughout, else where and what first differs."""
    tile = np.empty(min(CHUNK, len(buf)), np.uint8)
    fill(tile, period)
    for at in range(0, len(buf), CHUNK):
        got = buf[at:at + CHUNK]
        if not np.array_equal(got, tile[:len(got)]):
            i = int(np.flatnonzero(got != tile[:len(got)])[0])
            return f"element {at + i}: {got[i]} != {tile[i]}"
    return None


def need_bytes(p):
    """Memory the launch needs: per rank, the all-gather's p x N result or the all-reduce's
    data plus N of scratch (recursive doubling, reduce_bcast's root), whichever is more."""
    return p * (max(p, 2) * N + OVERHEAD)


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class Report:
    """Timed, checked steps; a failure on any rank is reported by rank 0 and fails the launch."""

    def __init__(self):
        self.failed = []

    def step(self, what, run, buf, period):
        WORLD.Barrier()
        start = time.perf_counter()
        run()
        WORLD.Barrier()
        took = time.perf_counter() - start
        bad = WORLD.allgather(mismatch(buf, period))
        for rank, error in enumerate(bad):
            if error is not None:
                self.failed.append(f"{what}: rank {rank}: {error}")
        peak = sum(WORLD.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)) / 2**20
        if WORLD.rank == 0:
            verdict = "ok" if not any(bad) else "WRONG"
            print(f"  {what:<40} {took:7.2f} s  {verdict:5}  (peak so far {peak:.1f} GiB)", flush=True)


def main():
    p, r = WORLD.size, WORLD.rank
    if p != 2:
        if r == 0:
            print(f"tests/large_counts.py runs at np=2, not {p}")
        return 1
    need, have = need_bytes(p), available_bytes()
    if r == 0:
        print(f"== large counts: {N} int8 elements (2^31 + 2^20 + 3) at np={p}; needs "
              f"{need / 2**30:.1f} GiB, MemAvailable {have / 2**30:.1f} GiB", flush=True)
    if WORLD.allreduce(have < need, op=MPI.LOR):
        if r == 0:
            print(f"SKIPPED: test-large needs {need / 2**30:.1f} GiB of available memory, "
                  f"this machine has {have / 2**30:.1f} GiB")
        return 0
    began = time.perf_counter()
    report = Report()
    total = (pattern(0).astype(np.int64) + pattern(1)).astype(np.uint8)  # int8 sums wrap
    buf = np.empty(N, np.uint8)
    data = buf.view(np.int8)

    for name in ALLREDUCE:
        # recursive doubling through the unchecked fast path, the others through the default Comm.
        comm = collectives.Comm(WORLD, check=name != "recursive_doubling")
        fill(buf, pattern(r))
        report.step(f"Allreduce SUM {name}{'' if comm.check else ' (check=False)'}",
                    lambda: comm.Allreduce(MPI.IN_PLACE, data, algorithm=name), buf, total)
        comm.Free()
        # The Comm and its fast path refer to each other: collect them, and their N bytes of
        # scratch, now rather than when the collector next runs.
        del comm
        gc.collect()

    with collectives.Comm(WORLD) as comm:
        fill(buf, pattern(1) if r == 1 else np.zeros(1, np.uint8))
        report.step("Bcast from rank 1", lambda: comm.Bcast(data, root=1), buf, pattern(1))

        fill(buf, pattern(0) if r == 0 else np.zeros(1, np.uint8))
        report.step("push 0 -> 1 / receive", lambda: p2p.wait(
            [p2p.push(comm, buf, 1) if r == 0 else p2p.receive(comm, buf, 0)]), buf, pattern(0))

        fill(buf, pattern(1) if r == 1 else np.zeros(1, np.uint8))
        report.step("pull 0 <- 1 / serve", lambda: p2p.pull(comm, buf, 1).wait() if r == 0
                    else p2p.serve(comm, buf, 0), buf, pattern(1))
    del buf, data
    gc.collect()

    with collectives.Comm(WORLD) as comm:
        out = np.full(p * N, 255, np.uint8)  # a value the pattern never holds: a block not received shows
        fill(out[r * N:(r + 1) * N], pattern(r))
        report.step("Allgather in place, block of rank 0",
                    lambda: comm.Allgather(MPI.IN_PLACE, out.view(np.int8)), out[:N], pattern(0))
        report.step("  (the same call) block of rank 1", lambda: None, out[N:], pattern(1))
    del out
    gc.collect()

    # Each rank sends the other one block of N and itself nothing: the all-to-all's messages
    # over the int count, in the memory of one block each way.
    with collectives.Comm(WORLD) as comm:
        send, recv = np.empty(N, np.uint8), np.empty(N, np.uint8)
        fill(send, pattern(r))
        layout = ([0, N], [0, 0]) if r == 0 else ([N, 0], [0, 0])
        for name in ("alltoall_pairwise", "alltoall_scattered"):
            recv.fill(255)
            report.step(f"Alltoallv {name[len('alltoall_'):]}, N each way",
                        lambda name=name: comm.Alltoallv([send.view(np.int8), layout], [recv.view(np.int8), layout],
                                                         algorithm=name), recv, pattern(1 - r))
        del send, recv

    peak = WORLD.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    failed = report.failed
    if r == 0:
        print(f"== {'FAILED' if failed else 'passed'} in {time.perf_counter() - began:.1f} s; "
              f"peak resident memory {sum(peak) / 2**30:.1f} GiB over {p} ranks "
              f"({', '.join(f'{m / 2**30:.1f}' for m in peak)} GiB)")
        for line in failed:
            print("FAILED", line)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        WORLD.Abort(1)
    sys.exit(code)
