"""Binomial-tree gather.

Steps: the mirror of scatter_binomial.  Ranks are numbered relative to the root.  Each rank
receives the blocks of every child's subtree of the binomial tree
(collectives.algorithms._binomial), all children at once, beside its own block, then sends
its whole subtree to its parent.  Leaves send their block as it is; inner ranks stage their
subtree in scratch packed in relative-rank order; the root receives straight into its buffer
in rank order, taking a subtree whose ranks wrap past p - 1 as two messages.

Restrictions: every rank must know every count (Gather, not Gatherv with unequal counts).

Cost: ceil(lg p) alpha + ((p-1)/p) n beta at the root, for n bytes in all.

Bytes sent per rank: its subtree's blocks, once, by every rank but the root: at most n/2
(the largest subtree under the root holds at most half the ranks), n/p by a leaf, nothing by
the root.
"""
from ..schedule import ACC, IN, TMP
from ._binomial import Blocks, tree
from ._cost import lg


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * alpha + (p - 1) / p * n * beta


def gather_binomial(s, counts, root):
    """Gather IN of every rank i (``counts[i]`` elements) into ACC of ``root``, in rank order."""
    p, r = s.size, s.rank
    vrank = (r - root) % p
    parent, children, end = tree(p, vrank)
    if vrank == 0:
        held = Blocks(counts, root, vrank, ACC, absolute=True)
    else:
        held = Blocks(counts, root, vrank, TMP if children else IN, absolute=False)
    s.copy((held.buf, held.where(vrank), counts[r]), (IN, 0, counts[r]))
    for child, child_end in children:
        for piece in held.pieces(child, child_end):
            s.irecv((child + root) % p, *piece)
    s.waitall()
    if parent is not None:
        for piece in held.pieces(vrank, end):
            s.send((parent + root) % p, *piece)
