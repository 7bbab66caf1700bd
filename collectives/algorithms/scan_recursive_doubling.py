"""Recursive-doubling inclusive scan: rank i gets x0 op x1 op ... op xi.

Steps: for k = 0 .. ceil(lg p) - 1 rank r swaps its partial result (the combination of the
aligned group of 2^k ranks holding r) with rank r ^ 2^k when that rank exists, and combines
what it receives: from a lower rank on the left of its partial result and of its prefix,
from a higher rank on the right of its partial result only
(collectives.algorithms._prefix).  Rank 0's prefix is its input.

Restrictions: none; any p.  The order of every combine is rank order (lower ranks' data on
the left), as MPI defines Scan, whatever the op.  Scratch: up to 3 n.

Cost: ceil(lg p) (alpha + n beta) + (2 ceil(lg p) - 1) n gamma, at the rank with the most
combines (p a power of two, rank p - 1: two per step, one in the last).

Bytes sent per rank: at most ceil(lg p) n; exactly that by rank 0.
"""
from ._cost import lg
from ._prefix import prefix


STEPS = "exchange"  # every rank with a partner sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * (alpha + n * beta) + (2 * lg(p) - 1) * n * gamma


def scan_recursive_doubling(s, count, apart):
    """The inclusive prefix of IN over ranks 0 .. s.rank into ACC, by recursive doubling."""
    prefix(s, count, apart, exclusive=False)
