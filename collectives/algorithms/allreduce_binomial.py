"""Binomial all-reduce: binomial-tree reduce to rank 0, then binomial-tree broadcast.

Steps: reduce_binomial to rank 0, each rank combining in its own ACC (which the broadcast
overwrites anyway), then bcast_binomial of the result from rank 0.  Every rank receives
rank 0's bytes, so the result is identical everywhere.

Restrictions: commutative ops (all of collectives.ops).  Every rank moves the whole vector
each round, so long vectors prefer allreduce_ring or allreduce_rabenseifner.

Cost: 2 ceil(lg p) (alpha + n beta) + ceil(lg p) n gamma.

Bytes sent per rank: at most ceil(lg p) n, by rank 0 (a broadcast child per level); n by a
leaf.
"""
from ..schedule import ACC
from ._cost import lg
from .bcast_binomial import bcast_binomial
from .reduce_binomial import reduce_binomial


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * lg(p) * (alpha + n * beta) + lg(p) * n * gamma


def allreduce_binomial(s, count):
    """All-reduce ACC in place: reduce to rank 0 down the binomial tree, then broadcast back."""
    reduce_binomial(s, count, 0, src=ACC)
    bcast_binomial(s, count, 0)
