"""Recursive-halving reduce-scatter, for any p and uneven blocks.

Steps: fold p ranks onto pof2 = 2^floor(lg p) virtual ranks (collectives.algorithms._fold):
each even rank among the first 2 rem (rem = p - pof2) sends its whole vector to rank+1,
which combines the two.  Virtual rank v starts responsible for all virtual ranks [0, pof2).
At each step the range splits into halves; v keeps the half holding itself, sends the other
half of its partial sums to the virtual rank at the same place in that half, receives that
rank's partial sums of the kept half into scratch and combines them.  A range of virtual
ranks is a contiguous run of blocks in ACC, so each step is one message each way.  After
lg pof2 steps v holds the reduced blocks of the real ranks it stands for.  Finally each odd
rank among the first 2 rem sends rank-1 its block.

Input: IN, the caller's buffer, never written: the fold-in and the first halving step read
it, and their combines take their left operand there, so no copy of it goes into ACC.
Output: with ``out``, the last step's combine writes this rank's block into OUT, the caller's
receive buffer, instead of ACC (a folded rank receives its block there), so nothing is
copied out either.

Restrictions: none; blocks may be uneven or empty (uneven blocks make the halves uneven).
Each block is reduced on one rank only, so combining in receive order needs no symmetry
between partners to give every reader the same bits.

Cost: (lg pof2) alpha + ((pof2-1)/pof2) n (beta + gamma) for p a power of two; otherwise
two more messages, the whole vector in (combined) and a block out: 2 more alpha,
(1 + 1/p) n more beta and n more gamma.

Bytes sent per rank: ((pof2-1)/pof2) n by every rank for p a power of two; otherwise at most
n, by the even ranks that fold in their whole vector.
"""
from ..schedule import ACC, IN, OUT, TMP, displacements
from ._cost import pof2, folded
from ._fold import Fold


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    q, e = pof2(p), folded(p)
    return ((q.bit_length() - 1 + 2 * e) * alpha + ((q - 1) / q + e * (1 + 1 / p)) * n * beta
            + ((q - 1) / q + e) * n * gamma)


def reduce_scatter_recursive_halving(s, counts, out=False, fold_out=True):
    """Reduce-scatter IN into ACC (this rank's block into OUT with ``out``) by recursive halving.

    With ``fold_out=False`` the final hand-back is left out: each virtual rank keeps the
    reduced blocks of every real rank it stands for (what allgather_recursive_doubling
    with fold_in=False expects).
    """
    r = s.rank
    f = Fold(r, s.size)
    total = sum(counts)
    displs = displacements(counts) + (total,)

    def span(vlo, vhi, buf=ACC):
        a, b = displs[f.first(vlo)], displs[f.first(vhi)]
        return (buf, a, b - a)

    def combine(kept, left, last):
        """kept = op(left, TMP) over ``kept``'s span; on the last step with ``out``, this
        rank's block (inside that span) goes to OUT instead of ACC."""
        _, a, n = kept
        b0, b1 = (displs[r], displs[r + 1]) if out and last else (a + n, a + n)
        for dst, at, end in (((ACC, a), a, b0), ((OUT, 0), b0, b1), ((ACC, b1), b1, a + n)):
            s.reduce((*dst, end - at), (TMP, at - a, end - at), left=(left, at))

    # Partial sums are read from IN until the first combine has written them to ACC.
    src = IN
    f.fold_in(s, (IN, 0, total), (TMP, 0, total))
    if f.vrank is not None:
        if f.partner is not None:
            s.reduce((ACC, 0, total), (TMP, 0, total), left=IN)
            src = ACC
        lo, hi = 0, f.pof2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if f.vrank < mid:
                keep, give, vpeer = (lo, mid), (mid, hi), f.vrank + (mid - lo)
            else:
                keep, give, vpeer = (mid, hi), (lo, mid), f.vrank - (mid - lo)
            kept = span(*keep)
            peer = f.real(vpeer)
            s.sendrecv(peer, span(*give, src), peer, (TMP, 0, kept[2]))
            combine(kept, src, hi - lo == 2)
            src = ACC
            lo, hi = keep
    if fold_out and f.partner is not None:
        q = f.partner
        mine = (OUT, 0, counts[r]) if out else (ACC, displs[r], counts[r])
        f.fold_out(s, (ACC, displs[q], counts[q]), mine)
