"""Gather in the node's shared segment.

Steps (csrc/shm.c): in R = ceil(b / c) rounds of one phase (b: a block, c =
constants.SHM_CHUNK), each rank but the root copies the round's slice of its block into its
region (beside the fingerprint, the first round) and publishes the phase; once all have, the
root copies the slices into its result.

Restrictions: the communicator's ranks share a segment (collectives.shm); equal blocks
(Gather, not Gatherv: only the root knows a Gatherv's counts).

Cost: R alpha + n beta, R = ceil(n / (p c)).

Bytes sent per rank: none through MPI; each rank copies its block into its region, the root
reads ((p-1)/p) n.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return rounds(n / p) * alpha + n * beta
