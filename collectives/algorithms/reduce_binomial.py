"""Binomial-tree reduce.

Steps: ranks are numbered relative to the root.  Each rank receives the partial result of
each child's subtree in the binomial tree (collectives.algorithms._binomial), nearest child
first, and folds it into its own partial result; then it sends that to its parent.  Leaves
send their input as it is.  The first fold reads the input where it lies (a 3-operand
reduce), so no rank copies its input; a non-root keeps its partial result in scratch,
because its ACC is not there.

Restrictions: the op must be commutative (all of collectives.ops are): a subtree's partial
result is folded in after the parent's own.  The order is fixed by the tree, so the result
is deterministic.

Cost: ceil(lg p) (alpha + n beta + n gamma) at the root.

Bytes sent per rank: n by every rank but the root, once, to its parent; nothing by the root.
"""
from ..schedule import ACC, IN, TMP
from ._binomial import tree
from ._cost import lg


STEPS = "one-way"  # messages flow to or from a root, not every rank both ways at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * (alpha + n * beta + n * gamma)


def reduce_binomial(s, count, root, src=IN):
    """Reduce the vectors at ``src`` (IN, or ACC for an all-reduce) into ACC of ``root``."""
    p = s.size
    vrank = (s.rank - root) % p
    parent, children, _ = tree(p, vrank)
    dst = ACC if vrank == 0 or src == ACC else TMP
    scratch = count if dst == TMP else 0
    partial = src
    for child, _ in reversed(children):
        s.recv((child + root) % p, TMP, scratch, count)
        s.reduce((dst, 0, count), (TMP, scratch, count), left=partial)
        partial = dst
    if parent is not None:
        s.send((parent + root) % p, partial, 0, count)
    else:
        s.copy((ACC, 0, count), (partial, 0, count))
