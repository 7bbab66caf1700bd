"""Reduce in the node's shared segment: each rank combines its block, the root gathers them.

Steps (csrc/shm.c): as allreduce_shm_pipelined, in R = ceil(n / c) rounds of two phases,
except that a rank other than the root combines its block's slice straight into its region
of the second phase, and only the root copies the combined slices out.

Restrictions: the communicator's ranks share a segment (collectives.shm).  Any root, any size.

Cost: 2 R alpha + (2 - 1/p) n beta + ((p-1)/p) n gamma, R = ceil(n / c).

Bytes sent per rank: none through MPI; each rank copies about n bytes into its region, the
root reads about (p - 1) n / p of results.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * rounds(n) * alpha + (2 - 1 / p) * n * beta + (p - 1) / p * n * gamma
