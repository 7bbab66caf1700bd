"""Scattered all-to-all: every block in flight at once, a window of partners at a time.

Steps: for each window of ``WINDOW`` partners (k = 1 .. p-1 in order), rank r posts its
receives from ranks (r+k) mod p, then its sends to ranks (r-k) mod p, and waits for them all;
then the next window.  The own block is copied while the first window is in flight.  Starting
the partners at different offsets spreads the traffic, so no rank is the target of every
sender at once (MPICH's alltoall_intra_scattered, whose throttle is the window).

Restrictions: none; blocks may differ in size (Alltoallv).  The receives are posted before the
sends, and a window completes as a whole, so it cannot deadlock.

Cost: ceil((p-1)/w) alpha + ((p-1)/p) n beta, w = WINDOW: the messages of a window overlap their
latencies.

Bytes sent per rank: ((p-1)/p) n: every block but its own, once.
"""
from ..schedule import ACC, IN

# Partners in flight at once (MPICH's MPIR_CVAR_ALLTOALL_THROTTLE default).
WINDOW = 32
STEPS = "exchange"  # every rank sends and receives at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return -(-(p - 1) // WINDOW) * alpha + (p - 1) / p * n * beta


def alltoall_scattered(s, sends, recvs):
    """Block ``sends[j]`` (offset, count) of IN to rank j, block ``recvs[j]`` of ACC from rank j."""
    p, r = s.size, s.rank
    own = ((ACC, *recvs[r]), (IN, *sends[r]))
    if p == 1:
        s.copy(*own)
        return
    for first in range(1, p, WINDOW):
        window = range(first, min(first + WINDOW, p))
        for k in window:
            s.irecv((r + k) % p, ACC, *recvs[(r + k) % p])
        for k in window:
            s.isend((r - k) % p, IN, *sends[(r - k) % p])
        if first == 1:
            s.copy(*own)
        s.waitall()
