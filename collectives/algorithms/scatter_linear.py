"""Linear scatter.

Steps: the root sends every rank its block straight from its buffer, all at once.

Restrictions: none; counts may differ and each rank needs only its own (Scatterv).  The root
sends p - 1 messages in turn, so latency grows linearly with p.

Cost: (p-1) alpha + ((p-1)/p) n beta at the root, for n bytes in all.

Bytes sent per rank: ((p-1)/p) n by the root; nothing by any other rank.
"""
from ..schedule import ACC, IN
from ._linear import star


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def scatter_linear(s, counts, root):
    """Scatter the blocks of IN at ``root``, block i (``counts[i]`` elements) to ACC of rank i."""
    star(s, counts, root, whole=IN, own=ACC, to_root=False)
