"""All-gather in the node's shared segment.

Steps (csrc/shm.c): in R = ceil(b / c) rounds of one phase (b: the largest block, c =
constants.SHM_CHUNK), each rank copies the round's slice of its block into its region
(beside the fingerprint, the first round) and publishes the phase; once all have, each
copies the other ranks' slices into its result.  Blocks may differ (Allgatherv).

Restrictions: the communicator's ranks share a segment (collectives.shm).

Cost: R alpha + (1 + 1/p) n beta, R = ceil(n / (p c)) for equal blocks.

Bytes sent per rank: none through MPI; each rank copies its block into its region and reads
the others', ((p-1)/p) n.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return rounds(n / p) * alpha + (1 + 1 / p) * n * beta
