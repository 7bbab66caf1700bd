"""Dissemination barrier (Hensgen, Finkel and Manber).

Steps: in round k = 0 .. ceil(lg p) - 1 rank r sends an empty message to (r + 2^k) mod p and
waits for one from (r - 2^k) mod p.  After round k every rank has heard, directly or not,
from the 2^(k+1) - 1 ranks before it, so after the last round from all of them.

Restrictions: none; any p.

Cost: ceil(lg p) alpha.

Bytes sent per rank: no bytes; ceil(lg p) empty messages by every rank.
"""
from ..schedule import ACC
from ._cost import lg


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * alpha


def barrier_dissemination(s):
    """Synchronise every rank in ceil(lg p) rounds of empty messages."""
    p, r = s.size, s.rank
    dist = 1
    while dist < p:
        s.sendrecv((r + dist) % p, (ACC, 0, 0), (r - dist) % p, (ACC, 0, 0))
        dist <<= 1
