"""Rabenseifner's all-reduce: recursive-halving reduce-scatter, then recursive-doubling all-gather.

Steps: fold p ranks onto pof2 = 2^floor(lg p) virtual ranks (collectives.algorithms._fold);
split the vector into pof2 near-equal blocks, one per virtual rank (the ranks that sit out
own none); reduce-scatter them by recursive halving (reduce_scatter_recursive_halving) and
gather them back by recursive doubling (allgather_recursive_doubling).  The two phases run
without the fold-out and fold-in between them, so folding costs one whole-vector message
in and one out.

Restrictions: none.  Bandwidth-optimal for p a power of two, with lg p instead of p - 1
latency terms: the choice for large messages on many ranks.

Cost: 2 lg pof2 alpha + 2 ((pof2-1)/pof2) n beta + ((pof2-1)/pof2) n gamma for p a power of
two; otherwise 2 more alpha, 2 n more beta and n more gamma.

Bytes sent per rank: 2 ((pof2-1)/pof2) n by every rank for p a power of two; otherwise at
most n more, by the ranks that fold in.
"""
from ._cost import pof2, folded
from ._fold import Fold
from .allgather_recursive_doubling import allgather_recursive_doubling
from .reduce_scatter_recursive_halving import reduce_scatter_recursive_halving


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    q, e = pof2(p), folded(p)
    f = (q - 1) / q
    return (2 * (q.bit_length() - 1) + 2 * e) * alpha + (2 * f + 2 * e) * n * beta + (f + e) * n * gamma


def allreduce_rabenseifner(s, count):
    """All-reduce IN into ACC: recursive-halving reduce-scatter, recursive-doubling all-gather."""
    counts = Fold(s.rank, s.size).virtual_counts(count)
    reduce_scatter_recursive_halving(s, counts, fold_out=False)
    allgather_recursive_doubling(s, counts, fold_in=False)
