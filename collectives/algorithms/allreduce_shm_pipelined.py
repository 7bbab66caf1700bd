"""All-reduce in the node's shared segment: each rank combines its block, then all gather.

Steps (csrc/shm.c): the vector's p blocks go in R = ceil(n / c) rounds of one slice of
every block (c = constants.SHM_CHUNK, so a round stays in cache).  In each round, phase 1:
each rank copies the slices of the blocks other ranks combine into its region (beside the
fingerprint, the first round) and publishes it; each then combines the slice of its own block
from all p regions in rank order into its result, and copies that into its region of
phase 2; phase 2: once every rank has published it, each copies the other ranks' combined
slices into its result.  Each block is combined once, in rank order, so every rank gets the
same bits, the same as allreduce_shm_direct's.

Restrictions: the communicator's ranks share a segment (collectives.shm).  Any size.

Cost: 2 R alpha + 2 n beta + ((p-1)/p) n gamma, R = ceil(n / c).

Bytes sent per rank: none through MPI; each rank copies about 2 n bytes through its region
and reads about 2 ((p-1)/p) n from the others'.
"""
from ._cost import rounds


STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return 2 * rounds(n) * alpha + 2 * n * beta + (p - 1) / p * n * gamma
