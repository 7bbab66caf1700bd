"""Reduce-scatter in the node's shared segment.

Steps (csrc/shm.c): in R = ceil(n / c) rounds of one phase (c = constants.SHM_CHUNK), each
rank copies the round's slice of every other rank's block into its region (beside the
fingerprint, the first round) and publishes the phase; once all have, each combines the
slice of its own block from all p regions in rank order into its result.  In place, the
input is copied aside first: the result's block overwrites the start of it.

Restrictions: the communicator's ranks share a segment (collectives.shm).  Any counts.

Cost: R alpha + n beta + ((p-1)/p) n gamma, R = ceil(n / c).

Bytes sent per rank: none through MPI; each rank copies ((p-1)/p) n bytes into its region
and reads (p - 1) n / p.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return rounds(n) * alpha + n * beta + (p - 1) / p * n * gamma
