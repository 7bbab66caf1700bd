"""Linear gather.

Steps: every rank sends its block straight to the root; the root receives all of them at
once into their places.

Restrictions: none; counts may differ and each rank needs only its own (Gatherv).  The root
takes p - 1 messages in turn, so latency grows linearly with p.

Cost: (p-1) alpha + ((p-1)/p) n beta at the root, for n bytes in all.

Bytes sent per rank: its own block, n/p, by every rank but the root; nothing by the root.
"""
from ..schedule import ACC, IN
from ._linear import star


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def gather_linear(s, counts, root):
    """Gather IN of every rank i (``counts[i]`` elements) into ACC of ``root``, in rank order."""
    star(s, counts, root, whole=ACC, own=IN, to_root=True)
