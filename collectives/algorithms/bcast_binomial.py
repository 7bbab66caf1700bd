"""Binomial-tree broadcast.

Steps: ranks are numbered relative to the root; each rank receives the whole message from
its parent in the binomial tree (collectives.algorithms._binomial), then sends it on to its
children, all at once.  After round k, 2^k ranks hold the data.

Restrictions: none; any root, any p.  Every rank moves the whole message each round, so
long messages prefer bcast_scatter_allgather.

Cost: ceil(lg p) (alpha + n beta).

Bytes sent per rank: at most ceil(lg p) n, by the root (a child per level); nothing by a
leaf.
"""
from ..schedule import ACC
from ._binomial import tree
from ._cost import lg


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * (alpha + n * beta)


def bcast_binomial(s, nbytes, root, at=(ACC, 0)):
    """Broadcast ``nbytes`` at ``at`` = (buf, offset) from ``root`` down the binomial tree."""
    p = s.size
    parent, children, _ = tree(p, (s.rank - root) % p)
    if parent is not None:
        s.recv((parent + root) % p, *at, nbytes)
    for child, _ in children:
        s.isend((child + root) % p, *at, nbytes)
    s.waitall()
