"""Linear barrier (all to one, one to all).

Steps: every rank sends an empty message to rank 0 and waits for its reply; rank 0 replies
to everyone once it has heard from everyone.

Restrictions: none.  Rank 0 handles 2 (p-1) messages, so latency grows linearly with p.

Cost: 2 (p-1) alpha at rank 0.

Bytes sent per rank: no bytes; p-1 empty messages by rank 0, one by every other rank.
"""
from ..schedule import ACC


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * (p - 1) * alpha


def barrier_linear(s):
    """Synchronise every rank through rank 0."""
    p = s.size
    if s.rank:
        s.send(0, ACC, 0, 0)
        s.recv(0, ACC, 0, 0)
        return
    for i in range(1, p):
        s.irecv(i, ACC, 0, 0)
    s.waitall()
    for i in range(1, p):
        s.isend(i, ACC, 0, 0)
    s.waitall()
