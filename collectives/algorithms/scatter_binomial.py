"""Binomial-tree scatter.

Steps: ranks are numbered relative to the root.  Each rank receives the blocks of its whole
subtree of the binomial tree (collectives.algorithms._binomial) from its parent, then sends
each child its child's subtree, farthest child first, and keeps its own block.  Inner ranks
stage their subtree in scratch packed in relative-rank order; the root sends straight from
its buffer in rank order, cutting a subtree whose ranks wrap past p - 1 in two messages.

Restrictions: every rank must know every count (Scatter, not Scatterv with unequal counts).

Cost: ceil(lg p) alpha + ((p-1)/p) n beta at the root, for n bytes in all.

Bytes sent per rank: ((p-1)/p) n by the root; an inner rank passes on its children's
subtrees, less than it received.
"""
from ..schedule import ACC, IN, TMP
from ._binomial import Blocks, tree
from ._cost import lg


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * alpha + (p - 1) / p * n * beta


def scatter_binomial(s, counts, root, whole=None):
    """Scatter the blocks of IN at ``root``, block i (``counts[i]`` elements) to ACC of rank i.

    With ``whole`` (a buffer, as bcast_scatter_allgather uses), every rank keeps the
    blocks in ``whole`` at their places in rank order instead: the root's are there to begin
    with, and each rank ends with its subtree's blocks in place.
    """
    p, r = s.size, s.rank
    vrank = (r - root) % p
    parent, children, end = tree(p, vrank)
    if whole is not None:
        held = Blocks(counts, root, vrank, whole, absolute=True)
    elif vrank == 0:
        held = Blocks(counts, root, vrank, IN, absolute=True)
    else:
        held = Blocks(counts, root, vrank, TMP if children else ACC, absolute=False)
    if parent is not None:
        for piece in held.pieces(vrank, end):
            s.recv((parent + root) % p, *piece)
    for child, child_end in children:
        for piece in held.pieces(child, child_end):
            s.isend((child + root) % p, *piece)
    s.waitall()
    if whole is None:
        s.copy((ACC, 0, counts[r]), (held.buf, held.where(vrank), counts[r]))
