"""Scatter in the node's shared segment.

Steps (csrc/shm.c): in R = ceil(n / c) rounds of one phase (c = constants.SHM_CHUNK), the
root copies the round's slice of every block into its region (beside the fingerprint, the
first round) and every rank publishes the phase; once all have, each copies its slice out.

Restrictions: the communicator's ranks share a segment (collectives.shm); equal blocks
(Scatter, not Scatterv: only the root knows a Scatterv's counts).

Cost: R alpha + n beta, R = ceil(n / c).

Bytes sent per rank: none through MPI; the root copies n bytes into its region, each other
rank reads its block.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return rounds(n) * alpha + n * beta
