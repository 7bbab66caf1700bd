"""Pairwise (direct) reduce-scatter: every rank sends each owner its part directly.

Steps: rank r owns block r.  In round k = 1 .. p-1 rank r sends its block (r+k) mod p to
that block's owner, rank (r+k) mod p, while it receives its own block from rank (r-k) mod p
into scratch (one Sendrecv), and folds it into its block.  Each round pairs every rank with
a different sender and receiver, so after p-1 rounds every owner has every contribution.
The rounds depend on no earlier round's result: nothing is forwarded, unlike the ring.

Reduction order: the owner folds in round order, ((x_r op x_(r-1)) op x_(r-2)) ... op
x_(r+1) (indices mod p), the same for every element of its block.  Each block is reduced on
its owner only, so whoever reads it gets the same bits; the order differs from block to
block, which needs a commutative op (all of collectives.ops are).

Restrictions: none; blocks may be uneven or empty (an empty block still goes as an empty
message, keeping the rounds in step).  Each round is one Sendrecv, so it cannot deadlock
even where MPI_Send waits for the matching receive.  Every rank talks to every other, so
on a real network it loads all links, where the ring uses neighbours only.

Input: IN, the caller's buffer, never written: the blocks sent are read from it, and the
first fold takes its left operand there, so neither the reduce-scatter nor the all-reduce
copies its input into ACC.  Output: with ``out``, the folds go straight into OUT, the
caller's receive buffer, and ACC is never touched.

Cost: (p-1) alpha + ((p-1)/p) n beta + ((p-1)/p) n gamma.

Bytes sent per rank: ((p-1)/p) n by every rank.
"""
from ..schedule import ACC, IN, OUT, TMP, displacements


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * (beta + gamma)


def reduce_scatter_pairwise(s, counts, out=False):
    """Reduce-scatter IN into ACC (OUT with ``out``): in round k, send block r+k to its owner,
    fold in block r from r-k."""
    p, r = s.size, s.rank
    displs = displacements(counts)
    mine = (OUT, 0, counts[r]) if out else (ACC, displs[r], counts[r])
    left = (IN, displs[r])
    for k in range(1, p):
        to, frm = (r + k) % p, (r - k) % p
        s.sendrecv(to, (IN, displs[to], counts[to]), frm, (TMP, 0, counts[r]))
        s.reduce(mine, (TMP, 0, counts[r]), left=left)
        left = mine[:2]
