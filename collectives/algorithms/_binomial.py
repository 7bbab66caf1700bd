"""The binomial tree shared by the rooted algorithms, and where its subtrees' blocks lie.

Ranks are renumbered relative to the root, v = (r - root) mod p, so every root uses the
tree of root 0.  Relative rank v != 0 has parent v - lowbit(v) and owns the subtree of
relative ranks v .. min(v + lowbit(v), p) - 1; its children are v + m for the powers of two
m < lowbit(v) (the root: m < p).  The tree has ceil(lg p) levels.

A subtree is a contiguous range of relative ranks, but its absolute ranks wrap past p - 1
when root != 0, so its blocks, laid out in rank order, form up to two runs.  Every message
carrying a subtree is therefore cut at that wrap point, on both sides alike, whatever
layout the sender or the receiver keeps its blocks in.
"""
from ..schedule import displacements


def tree(size, vrank):
    """(parent, children, end) of relative rank ``vrank``: parent is None at the root;
    children are (child, child_end) pairs, farthest first; the subtree is vrank .. end - 1."""
    mask = 1
    while mask < size and not vrank & mask:
        mask <<= 1
    parent = vrank - mask if vrank else None
    end = min(vrank + mask, size)
    children = []
    mask >>= 1
    while mask:
        if vrank + mask < size:
            children.append((vrank + mask, min(vrank + 2 * mask, size)))
        mask >>= 1
    return parent, children, end


class Blocks:
    """The per-rank blocks of a rooted collective as one rank keeps them in buffer ``buf``.

    Parameters
    ----------
    counts : tuple of int
        Block size of every rank, in rank order.
    root, vrank : int
        The root, and this rank relative to it.
    buf : int
        ACC, TMP or IN.
    absolute : bool
        True: every rank's block at its place in rank order (the root's user buffer).
        False: this rank's subtree only, packed in relative-rank order from offset 0
        (a staging buffer, or a leaf's own block).
    """

    def __init__(self, counts, root, vrank, buf, absolute):
        p = len(counts)
        self.buf = buf
        self.wrap = p - root
        self.rcounts = counts[root:] + counts[:root]
        if absolute:
            displs = displacements(counts)
            self.where = lambda v: displs[(v + root) % p]
        else:
            rdispls = displacements(self.rcounts)
            self.where = lambda v: rdispls[v] - rdispls[vrank]

    def pieces(self, lo, hi):
        """(buf, offset, count) of each message that carries the blocks of relative ranks lo .. hi - 1."""
        for a, b in ((lo, min(hi, self.wrap)), (max(lo, self.wrap), hi)):
            n = sum(self.rcounts[a:b])
            if n:
                yield self.buf, self.where(a), n
