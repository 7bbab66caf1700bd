"""Recursive-doubling all-gather, for any p and uneven blocks.

Steps: fold p ranks onto pof2 = 2^floor(lg p) virtual ranks (collectives.algorithms._fold):
each even rank among the first 2 rem (rem = p - pof2) sends its block to rank+1, which puts
it in place.  Virtual rank v now holds the blocks of the real ranks it stands for.  For
k = 0 .. lg pof2 - 1, v swaps everything its group of 2^k virtual ranks holds with virtual
rank v ^ 2^k, which holds the neighbouring group's; both groups' blocks are contiguous in
ACC, so each swap is one message each way, received straight into place.  Finally each odd
rank among the first 2 rem sends the whole result to rank-1.

Restrictions: none; blocks may be uneven or empty.  Latency-optimal for p a power of two;
uneven blocks make the larger swaps uneven too.

Cost: (lg pof2) alpha + ((pof2-1)/pof2) n beta for p a power of two; otherwise two more
messages, a block in and the whole vector out: 2 more alpha and (1 + 1/p) n more beta.

Bytes sent per rank: ((p-1)/p) n by every rank for p a power of two; otherwise at most (2
(pof2-1)/p + 1) n: a virtual rank standing for two real ranks sends two blocks where the
others send one, and each odd rank among the first 2 rem sends the whole result to its
partner.
"""
from ..schedule import ACC, displacements
from ._cost import pof2, folded
from ._fold import Fold


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    q, e = pof2(p), folded(p)
    return (q.bit_length() - 1 + 2 * e) * alpha + ((q - 1) / q + e * (1 + 1 / p)) * n * beta


def allgather_recursive_doubling(s, counts, fold_in=True):
    """All-gather the blocks of ACC by recursive doubling.

    With ``fold_in=False`` the ranks that would sit out are taken to have handed their
    blocks over already: each virtual rank holds all the blocks it stands for (as after
    reduce_scatter_recursive_halving with fold_out=False).
    """
    r = s.rank
    f = Fold(r, s.size)
    displs = displacements(counts) + (sum(counts),)

    def span(vlo, vhi):
        a, b = displs[f.first(vlo)], displs[f.first(vhi)]
        return (ACC, a, b - a)

    if fold_in and f.partner is not None:
        q = f.partner
        f.fold_in(s, (ACC, displs[r], counts[r]), (ACC, displs[q], counts[q]))
    if f.vrank is not None:
        mask = 1
        while mask < f.pof2:
            mine = f.vrank & ~(mask - 1)
            theirs = mine ^ mask
            peer = f.real(f.vrank ^ mask)
            s.sendrecv(peer, span(mine, mine + mask), peer, span(theirs, theirs + mask))
            mask <<= 1
    f.fold_out(s, span(0, f.pof2), span(0, f.pof2))
