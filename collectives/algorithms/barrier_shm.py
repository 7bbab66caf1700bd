"""Barrier in the node's shared segment.

Steps (csrc/shm.c, one phase): each rank publishes the phase, with the fingerprint, and
waits until every rank has.

Restrictions: the communicator's ranks share a segment (collectives.shm).

Cost: alpha.

Bytes sent per rank: none.
"""

STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks."""
    return alpha
