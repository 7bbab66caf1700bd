"""Scatter-allgather broadcast (van de Geijn).

Steps: cut the message into p near-equal blocks, one per rank in rank order; scatter them
from the root down the binomial tree, each rank keeping its subtree's blocks in place
(scatter_binomial), then circulate them around the ring (allgather_ring).

Restrictions: none; any root, any size (blocks may be empty).  Two phases of latency, so
short messages prefer bcast_binomial.

Cost: (ceil(lg p) + p - 1) alpha + 2 ((p-1)/p) n beta.

Bytes sent per rank: at most 2 ((p-1)/p) n, by the root; ((p-1)/p) n plus the blocks it
passes down the tree by every other rank.
"""
from ..schedule import ACC, blocks
from ._cost import lg
from .allgather_ring import allgather_ring
from .scatter_binomial import scatter_binomial


STEPS = "one-way"  # the scatter leaves the root one way (the all-gather after it exchanges)


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (lg(p) + p - 1) * alpha + 2 * (p - 1) / p * n * beta


def bcast_scatter_allgather(s, nbytes, root):
    """Broadcast ``nbytes`` of ACC from ``root``: binomial scatter, then ring all-gather."""
    counts, _ = blocks(nbytes, s.size)
    scatter_binomial(s, counts, root, whole=ACC)
    allgather_ring(s, counts)
