"""Pairwise (direct) all-gather: every rank sends its block to each other rank directly.

Steps: in round k = 1 .. p-1 rank r sends its own block to rank (r+k) mod p while it
receives the block of rank (r-k) mod p straight into its place in the result (one
Sendrecv).  Nothing is forwarded: every block goes from its owner to each reader in one hop.

Restrictions: none; blocks may be uneven or empty.  One Sendrecv per round, so it cannot
deadlock even where MPI_Send waits for the matching receive.  Every rank talks to every
other, so on a real network it loads all links, where the ring uses neighbours only.

Cost: (p-1) alpha + ((p-1)/p) n beta.

Bytes sent per rank: ((p-1)/p) n by every rank: its own block to each other rank.
"""
from ..schedule import ACC, displacements


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def allgather_pairwise(s, counts):
    """All-gather the blocks of ACC: in round k, send the own block to r+k, receive r-k's."""
    p, r = s.size, s.rank
    displs = displacements(counts)
    for k in range(1, p):
        to, frm = (r + k) % p, (r - k) % p
        s.sendrecv(to, (ACC, displs[r], counts[r]), frm, (ACC, displs[frm], counts[frm]))
