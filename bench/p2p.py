"""Point-to-point latency, bandwidth and bidirectional bandwidth between ranks 0 and 1, and the
exchange of every rank with its ring neighbours.

The semantics of OSU's osu_latency, osu_bw and osu_bibw: ``latency`` is half a ping-pong
round trip; ``bw`` is a window of 64 nonblocking sends from rank 0 into 64 receives posted on
rank 1, closed by a 4-byte acknowledgement; ``bibw`` the same window in both directions at once.
As in OSU, every message of a window uses the same send buffer and the same receive buffer.
Each is measured with native mpi4py Isend/Irecv (Send/Recv for latency) and with collectives'
Push/Receive primitives (``collectives.p2p``), interleaved in one launch; ranks other than 0
and 1 only take part in the Barrier before each sample.

``exchange`` (no OSU counterpart) is one step of a ring or pairwise schedule: every rank sends
its message to rank + 1 and receives one from rank - 1 at once (Sendrecv; Push and Receive),
the time of the slowest rank.  On shared memory all ranks then move data through the one
memory system together, which a ping-pong between two ranks does not show.
"""
import numpy as np
from mpi4py import MPI

import collectives

from .harness import MALLOC, add_ratios, binding, osu_counts, result_row, validate_and_measure

WINDOW = 64
TAG = 1
# OSU's defaults: osu_latency 10000 iterations after 100 warm-up below 8 KiB, 1000 after 10
# from 8 KiB; osu_bw / osu_bibw 100 windows after 10, 20 after 2.
OSU_P2P = {"latency": {"small": (10000, 100), "large": (1000, 10)},
           "bw": {"small": (100, 10), "large": (20, 2)},
           "bibw": {"small": (100, 10), "large": (20, 2)}}
OSU_P2P["exchange"] = OSU_P2P["latency"]
NATIVE, OURS = "native", "ours"


def _pattern(nbytes, rank):
    return ((np.arange(nbytes, dtype=np.int64) * 7 + 13 * rank + 1) % 251).astype(np.uint8)


class P2PCase:
    """The native and ours calls of one point-to-point test at ``nbytes``, and their check."""

    def __init__(self, test, nbytes, comm, ours):
        if comm.size < 2:
            raise ValueError(f"{test}: point-to-point tests need at least 2 ranks, got {comm.size}")
        r = comm.rank
        self.test, self.nbytes, self.count, self.dtype = test, nbytes, nbytes, np.dtype(np.uint8)
        self.send = _pattern(nbytes, r)
        self.out = np.empty(nbytes, np.uint8)
        self.want = _pattern(nbytes, 1 - r) if r < 2 and (test != "bw" or r == 1) else None
        # Bytes one call moves, and the calls per reported time (a ping-pong is two latencies).
        self.moved = nbytes * {"latency": 1, "bw": WINDOW, "bibw": 2 * WINDOW, "exchange": 1}[test]
        self.per_call = 2 if test == "latency" else 1
        peer = 1 - r
        ack = np.zeros(4, np.uint8)
        if test == "exchange":
            right, left = (r + 1) % comm.size, (r - 1) % comm.size
            self.want = _pattern(nbytes, left)

            def native():
                comm.Sendrecv(self.send, right, TAG, self.out, left, TAG)

            def mine():
                ours.Wait([ours.Receive(self.out, left), ours.Push(self.send, right)])
            self.calls = {NATIVE: native, OURS: mine}
        elif r > 1:
            self.calls = {NATIVE: lambda: None, OURS: lambda: None}
        elif test == "latency":
            first = r == 0

            def native():
                if first:
                    comm.Send(self.send, peer, TAG)
                    comm.Recv(self.out, peer, TAG)
                else:
                    comm.Recv(self.out, peer, TAG)
                    comm.Send(self.send, peer, TAG)

            def mine():
                if first:
                    ours.Push(self.send, peer).wait()
                    ours.Receive(self.out, peer).wait()
                else:
                    ours.Receive(self.out, peer).wait()
                    ours.Push(self.send, peer).wait()
            self.calls = {NATIVE: native, OURS: mine}
        else:
            sends = r == 0 or test == "bibw"
            receives = r == 1 or test == "bibw"

            def native():
                reqs = [comm.Irecv(self.out, peer, TAG) for _ in range(WINDOW if receives else 0)]
                reqs += [comm.Isend(self.send, peer, TAG) for _ in range(WINDOW if sends else 0)]
                MPI.Request.Waitall(reqs)
                if test == "bw":
                    (comm.Recv if r == 0 else comm.Send)(ack, peer, TAG + 1)

            def mine():
                reqs = [ours.Receive(self.out, peer) for _ in range(WINDOW if receives else 0)]
                reqs += [ours.Push(self.send, peer) for _ in range(WINDOW if sends else 0)]
                ours.Wait(reqs)
                if test == "bw":
                    (ours.Receive if r == 0 else ours.Push)(ack, peer).wait()
            self.calls = {NATIVE: native, OURS: mine}

    def check(self, call):
        """Run ``call`` once into a poisoned receive buffer; the number of bytes that differ."""
        self.out.fill(255)  # the pattern stays below 251
        call()
        return 0 if self.want is None else int(np.count_nonzero(self.out != self.want))


def sweep(comm, test, size_list, *, iterations=None, warmup=None, budget=2.0, sample_s=200e-6,
          min_reps=3, validate=False, progress=None, **_):
    """Measure ``test`` (latency, bw, bibw, exchange) at ``size_list`` bytes, native beside ours;
    the record.

    Times are per one-way message for latency, per window for bw / bibw and per step for
    exchange; ``MB/s`` is OSU's bandwidth, bytes moved / average time (MB = 10**6 B), and for
    exchange each rank's bytes sent.
    """
    ours = collectives.Comm(comm, check=False)
    rows = []
    try:
        for i, nbytes in enumerate(size_list):
            if progress:
                progress(f"{test} np={comm.size}: size {i + 1}/{len(size_list)}, {nbytes} B")
            case = P2PCase(test, nbytes, comm, ours)
            calls = [case.calls[NATIVE], case.calls[OURS]]
            its, skip = osu_counts(nbytes, iterations, warmup, OSU_P2P[test])
            wrong, samples = validate_and_measure(comm, calls, [case, case], its, skip, budget, sample_s,
                                                  min_reps, validate)
            block = []
            for j, name in enumerate((NATIVE, OURS)):
                got, k = samples.get(j, (None, 1))
                row = result_row(case, name, "out", None if got is None else got / case.per_call, k,
                                 wrong[j], 1.0)
                row.update(redop="none", root=-1)
                row["MB/s"] = None if got is None or test == "latency" else case.moved / row["avg(us)"]
                block.append(row)
            add_ratios(block, NATIVE)
            rows += block
    finally:
        ours.Free()
    return {"collective": test, "np": comm.size, "native": NATIVE, "malloc": MALLOC, "dtype": "uint8",
            "op": "none", "root": -1, "places": ["out"], "binding": binding(comm), "rows": rows,
            "skipped": [], "summary": []}
