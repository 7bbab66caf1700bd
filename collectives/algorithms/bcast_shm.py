"""Broadcast in the node's shared segment.

Steps (csrc/shm.c): in R = ceil(n / c) rounds of one phase (c = constants.SHM_CHUNK), the
root copies the round's slice into its region (beside the fingerprint, the first round) and
every rank publishes the phase; once all have, the others copy the slice out.  The root
copies round k + 1 while the others copy round k out.

Restrictions: the communicator's ranks share a segment (collectives.shm).  Any root, any size.

Cost: R alpha + 2 n beta, R = ceil(n / c).

Bytes sent per rank: none through MPI; the root copies n bytes into its region, each other
rank reads n.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return rounds(n) * alpha + 2 * n * beta
