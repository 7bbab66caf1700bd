"""Linear all-reduce: everything to rank 0, reduced there in rank order, then sent back.

Steps: every rank sends its vector to rank 0; rank 0 receives them one by one in rank
order and computes x0 op x1 op ... op x(p-1), then sends the result to every rank at once.

Restrictions: none.  Rank 0 handles all 2 (p-1) n of traffic and all the arithmetic:
a baseline, and the simplest correct schedule.

Cost: 2 (p-1) (alpha + n beta) + (p-1) n gamma, all at rank 0.

Bytes sent per rank: (p-1) n by rank 0, n by every other rank.
"""
from ..schedule import ACC, TMP


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * (p - 1) * (alpha + n * beta) + (p - 1) * n * gamma


def allreduce_reduce_bcast(s, count):
    """All-reduce ACC in place through rank 0, linearly."""
    p = s.size
    if s.rank:
        s.send(0, ACC, 0, count)
        s.recv(0, ACC, 0, count)
        return
    for i in range(1, p):
        s.recv(i, TMP, 0, count)
        s.reduce((ACC, 0, count), (TMP, 0, count))
    for i in range(1, p):
        s.isend(i, ACC, 0, count)
    s.waitall()
