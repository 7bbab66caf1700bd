"""Helpers of the algorithms' ``cost`` functions (the alpha-beta-gamma model of their headers).

Every algorithm module has ``cost(p, n, alpha, beta, gamma)``: the time its header's Cost line
gives for p ranks and an n-byte message, with alpha seconds per message, beta seconds per
byte on the wire and gamma seconds per byte combined.  ``collectives-bench model`` (bench/model.py) evaluates them.

Each also has ``STEPS``, the pattern of its messages, which says which measured beta the
model gives ``cost`` on shared memory: "exchange" when every rank sends and receives at once in
each step (ring, pairwise, recursive doubling and halving), whose bytes all cross the one
memory system together; "one-way" when messages flow to or from a root (trees, linear), as in
a ping-pong; "shared" for the algorithms that run in a node's shared segment
(collectives.shm), whose alpha is one phase (every rank's flag seen), beta a byte copied
through memory and gamma a byte combined.
"""
import math

from ..constants import SHM_CHUNK


def lg(p):
    """ceil(lg p): the rounds of a binomial tree or dissemination over p ranks."""
    return (p - 1).bit_length()


def pof2(p):
    """2^floor(lg p): the ranks left after folding p onto a power of two."""
    return 1 << (p.bit_length() - 1)


def folded(p):
    """1 when p is not a power of two (the fold costs two more messages), else 0."""
    return int(p != pof2(p))


def rounds(n):
    """The rounds of a shared-memory algorithm's pipelined form for n bytes (constants.SHM_CHUNK each)."""
    return max(1, math.ceil(n / SHM_CHUNK))
