"""Ring all-reduce: ring reduce-scatter followed by ring all-gather.

Steps: split the vector into p near-equal blocks; reduce-scatter them around the ring so
rank r holds the reduced block r (reduce_scatter_ring), then circulate the reduced blocks
around the same ring (allgather_ring).

Out of place (``apart``) the reduce-scatter receives into ACC and needs no scratch.

Restrictions: none.  Bandwidth-optimal: every rank sends and receives 2 (p-1)/p n elements,
whatever p; the latency term grows with p, so small messages prefer recursive doubling.

Cost: 2 (p-1) alpha + 2 ((p-1)/p) n beta + ((p-1)/p) n gamma.

Bytes sent per rank: 2 ((p-1)/p) n by every rank.
"""
from ..schedule import blocks
from .allgather_ring import allgather_ring
from .reduce_scatter_ring import reduce_scatter_ring


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def allreduce_ring(s, count, apart=False):
    """All-reduce IN into ACC: ring reduce-scatter, then ring all-gather; ``apart``: IN and
    ACC do not overlap."""
    counts, _ = blocks(count, s.size)
    reduce_scatter_ring(s, counts, apart=apart)
    allgather_ring(s, counts)
