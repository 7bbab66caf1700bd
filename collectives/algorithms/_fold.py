"""Folding any number of ranks onto a power of two, shared by the butterfly algorithms.

With pof2 the largest power of two <= p and rem = p - pof2, the first 2 rem ranks pair up
as (2i, 2i+1).  Fold-in: each even rank of a pair hands its data to the odd one and sits
out.  The pof2 remaining ranks are the virtual ranks of a butterfly: virtual rank v lives
on real rank 2v+1 when v < rem, else on v + rem.  Fold-out: each odd rank of a pair hands
the even one its share of the result.

Virtual rank v stands for real ranks {2v, 2v+1} (v < rem) or {v + rem}, so a contiguous
range of virtual ranks stands for a contiguous range of real ranks, hence for one
contiguous run of blocks in rank order: halving and doubling on virtual ranks move
contiguous regions of ACC whatever p is.

Cost of folding, when p is not a power of two: one extra message of up to n elements each
way (2 alpha + 2 n beta), plus the combine of the folded-in data where the caller reduces.
"""
from ..schedule import blocks


class Fold:
    """How rank ``rank`` of ``size`` takes part in a butterfly over pof2 virtual ranks."""

    def __init__(self, rank, size):
        self.size = size
        self.pof2 = 1 << (size.bit_length() - 1)
        self.rem = size - self.pof2
        if rank < 2 * self.rem:
            self.partner = rank ^ 1
            self.vrank = rank // 2 if rank % 2 else None
        else:
            self.partner = None
            self.vrank = rank - self.rem

    def real(self, v):
        """The real rank that acts as virtual rank ``v``."""
        return 2 * v + 1 if v < self.rem else v + self.rem

    def first(self, v):
        """The first real rank stood for by virtual rank ``v`` (``size`` for v = pof2)."""
        return 2 * v if v < self.rem else v + self.rem

    def fold_in(self, s, send, recv):
        """Even partner sends ``send`` = (buf, off, cnt); odd partner receives into ``recv``."""
        if self.partner is not None:
            if self.vrank is None:
                s.send(self.partner, *send)
            else:
                s.recv(self.partner, *recv)

    def fold_out(self, s, send, recv):
        """Odd partner sends ``send``; even partner receives into ``recv``."""
        if self.partner is not None:
            if self.vrank is None:
                s.recv(self.partner, *recv)
            else:
                s.send(self.partner, *send)

    def virtual_counts(self, count):
        """Near-equal blocks of ``count`` per virtual rank, as per-real-rank counts.

        Each virtual rank's block goes to the real rank acting as it; ranks that sit out
        get none, so a butterfly on these counts splits the work evenly over pof2 ranks.
        """
        vcounts, _ = blocks(count, self.pof2)
        return tuple(0 if i < 2 * self.rem and i % 2 == 0
                     else vcounts[i // 2 if i < 2 * self.rem else i - self.rem]
                     for i in range(self.size))
