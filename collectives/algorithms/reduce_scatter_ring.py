"""Ring reduce-scatter.

Steps: ranks form a ring r -> r+1.  In step k = 0 .. p-2 rank r sends block (r-k-1) mod p
of its partial sums to its right neighbour and receives block (r-k-2) mod p from its left
neighbour into scratch, then combines it into its own copy.  After p-1 steps block r has
passed through every rank and holds the full reduction at rank r.

Restrictions: none; blocks may be uneven or empty.  Each block's reduction order is fixed
by the ring, so results do not depend on which rank reads them.

Cost: (p-1) alpha + ((p-1)/p) n beta + ((p-1)/p) n gamma.
"""
from ..schedule import ACC, TMP, displacements


def reduce_scatter_ring(s, counts):
    """Reduce-scatter ACC in place around the ring."""
    p, r = s.size, s.rank
    displs = displacements(counts)
    right, left = (r + 1) % p, (r - 1) % p
    for k in range(p - 1):
        out, into = (r - k - 1) % p, (r - k - 2) % p
        s.sendrecv(right, (ACC, displs[out], counts[out]), left, (TMP, 0, counts[into]))
        s.reduce((ACC, displs[into], counts[into]), (TMP, 0, counts[into]))
