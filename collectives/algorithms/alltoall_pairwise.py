"""Pairwise-exchange all-to-all: in each round every rank swaps one block with one partner.

Steps: in round k = 1 .. p-1 rank r sends its block for rank r ^ k to that rank and receives
that rank's block for r (one Sendrecv) when p is a power of two, so each round pairs the ranks
off; otherwise it sends to (r+k) mod p while receiving from (r-k) mod p.  The own block is
copied while the first round's messages are in flight.

Restrictions: none; blocks may differ in size (Alltoallv).  Each round's send and receive
complete together (a Sendrecv), so it cannot deadlock even where MPI_Send waits for the
matching receive; one message in flight per rank, which keeps a large exchange from flooding
the network (MPICH uses it for long messages).

Cost: (p-1) alpha + ((p-1)/p) n beta, for n bytes sent by each rank in all.

Bytes sent per rank: ((p-1)/p) n: every block but its own, once.
"""
from ..schedule import ACC, IN


STEPS = "exchange"  # every rank sends and receives at once in each round


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def alltoall_pairwise(s, sends, recvs):
    """Block ``sends[j]`` (offset, count) of IN to rank j, block ``recvs[j]`` of ACC from rank j."""
    p, r = s.size, s.rank
    paired = p & (p - 1) == 0
    own = ((ACC, *recvs[r]), (IN, *sends[r]))
    if p == 1:
        s.copy(*own)
        return
    for k in range(1, p):
        to, frm = (r ^ k, r ^ k) if paired else ((r + k) % p, (r - k) % p)
        if k == 1:
            # The first round as requests of its own, so that the own block is copied meanwhile.
            s.irecv(frm, ACC, *recvs[frm])
            s.isend(to, IN, *sends[to])
            s.copy(*own)
            s.waitall()
        else:
            s.sendrecv(to, (IN, *sends[to]), frm, (ACC, *recvs[frm]))
