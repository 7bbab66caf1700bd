"""Round-robin all-reduce (Zhao and Canny): owners of 1/p each, direct exchange both ways.

Steps: split the vector into p near-equal blocks; rank r owns block r.  Reduce-scatter
phase (reduce_scatter_pairwise): in round k = 1 .. p-1 rank r sends its part of block
(r+k) mod p straight to that owner and receives its own block's part from rank (r-k) mod p,
folding it in.  All-gather phase (allgather_pairwise): in round k rank r sends its reduced
block to rank (r+k) mod p and receives the reduced block of rank (r-k) mod p into place.

Reduction order: owner r folds ((x_r op x_(r-1)) op x_(r-2)) ... op x_(r+1), indices mod
p.  Each block is reduced once, by its owner, and then only copied, so every rank ends with
the same bits.  The input is read where it lies (IN), never copied into ACC first.

Restrictions: none (commutative ops, as all of collectives.ops are); any p, any count.
Bandwidth-optimal like the ring, but each message goes from its sender to its final reader
in one hop: every pair of ranks exchanges a message in each phase, which a ring avoids.

Cost: 2 (p-1) alpha + 2 ((p-1)/p) n beta + ((p-1)/p) n gamma.

Bytes sent per rank: 2 ((p-1)/p) n by every rank.
"""
from ..schedule import blocks
from .allgather_pairwise import allgather_pairwise
from .reduce_scatter_pairwise import reduce_scatter_pairwise


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def allreduce_round_robin(s, count):
    """All-reduce IN into ACC: pairwise reduce-scatter to block owners, pairwise all-gather back."""
    counts, _ = blocks(count, s.size)
    reduce_scatter_pairwise(s, counts)
    allgather_pairwise(s, counts)
