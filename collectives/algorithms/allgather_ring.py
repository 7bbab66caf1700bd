"""Ring all-gather.

Steps: ranks form a ring r -> r+1.  In step k = 0 .. p-2 rank r forwards block (r-k) mod p,
the one it received last (its own at first), to its right neighbour and receives block
(r-k-1) mod p from its left neighbour straight into its place in the result.

Restrictions: none; blocks may be uneven or empty.

Cost: (p-1) alpha + ((p-1)/p) n beta.

Bytes sent per rank: ((p-1)/p) n by every rank.
"""
from ..schedule import ACC, displacements


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def allgather_ring(s, counts):
    """All-gather the blocks of ACC around the ring."""
    p, r = s.size, s.rank
    displs = displacements(counts)
    right, left = (r + 1) % p, (r - 1) % p
    for k in range(p - 1):
        out, into = (r - k) % p, (r - k - 1) % p
        s.sendrecv(right, (ACC, displs[out], counts[out]), left, (ACC, displs[into], counts[into]))
