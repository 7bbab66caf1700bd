"""Recursive-doubling (butterfly) all-reduce.

Steps: fold p ranks onto pof2 = 2^floor(lg p) virtual ranks (collectives.algorithms._fold):
each even rank among the first 2 rem (rem = p - pof2) sends its vector to rank+1, which
combines the two.  Then for k = 0 .. lg pof2 - 1 virtual rank v swaps its whole vector with
virtual rank v ^ 2^k and combines.  Finally each odd rank among the first 2 rem sends the
result back to rank-1.

Both partners of a swap must compute the same bits.  IEEE sum and product are commutative,
but min/max of -0.0 and +0.0, and a complex product whose multiply-adds the compiler fused,
are not, so every combine is op(lower virtual rank's data, higher's).  The result then
lands in scratch on the higher partner; the running result alternates between ACC and TMP
instead of being copied back at each level, and is copied to ACC once at the end.

Restrictions: none.  Latency-optimal for p a power of two; best for small messages.

Cost: lg pof2 steps, plus 2 when p is not a power of two:
(lg pof2 + 2) alpha + (lg pof2 + 2) n beta + (lg pof2 + 1) n gamma.

Bytes sent per rank: (lg p) n by every rank for p a power of two; otherwise at most (lg pof2
+ 1) n.
"""
from ..schedule import ACC, TMP
from ._cost import pof2, folded
from ._fold import Fold


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    steps, e = pof2(p).bit_length() - 1, folded(p)
    return (steps + 2 * e) * (alpha + n * beta) + (steps + e) * n * gamma


def allreduce_recursive_doubling(s, count):
    """All-reduce ACC in place by recursive doubling, folding in the ranks beyond a power of two."""
    f = Fold(s.rank, s.size)

    def whole(buf):
        return (buf, 0, count)

    cur, free = ACC, TMP
    f.fold_in(s, whole(ACC), whole(TMP))
    if f.vrank is not None:
        if f.partner is not None:
            s.reduce(whole(TMP), whole(ACC))  # the even rank's data comes first
            cur, free = TMP, ACC
        mask = 1
        while mask < f.pof2:
            vpeer = f.vrank ^ mask
            peer = f.real(vpeer)
            s.sendrecv(peer, whole(cur), peer, whole(free))
            if vpeer < f.vrank:
                s.reduce(whole(free), whole(cur))
                cur, free = free, cur
            else:
                s.reduce(whole(cur), whole(free))
            mask <<= 1
        s.copy(whole(ACC), whole(cur))
    f.fold_out(s, whole(ACC), whole(ACC))
