"""Recursive-doubling exclusive scan: rank i > 0 gets x0 op x1 op ... op x(i-1).

Steps: those of scan_recursive_doubling (collectives.algorithms._prefix), but a rank's own
input stays out of its prefix: the first block it receives from a lower rank is its prefix
as it is, and later blocks from lower ranks go on its left.

Restrictions: none; any p.  The order of every combine is rank order (lower ranks' data on
the left), as MPI defines Exscan, whatever the op.  Rank 0's receive buffer is left
untouched, as MPICH leaves it (MPI leaves it undefined), in place too.  Scratch: up to 3 n.

Cost: ceil(lg p) (alpha + n beta) + 2 (ceil(lg p) - 1) n gamma, at the rank with the most
combines (p a power of two, rank p - 1: none in the first step, two in the middle ones, one
in the last).

Bytes sent per rank: at most ceil(lg p) n; exactly that by rank 0.
"""
from ._cost import lg
from ._prefix import prefix


STEPS = "exchange"  # every rank with a partner sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * (alpha + n * beta) + 2 * (lg(p) - 1) * n * gamma


def exscan_recursive_doubling(s, count, apart):
    """The exclusive prefix of IN over ranks 0 .. s.rank - 1 into ACC (rank 0's untouched)."""
    prefix(s, count, apart, exclusive=True)
