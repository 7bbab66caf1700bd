"""Reduce in the node's shared segment, the root combining every rank's vector.

Steps (csrc/shm.c, one phase): each rank copies its vector into its region, beside the
fingerprint, and publishes the phase; once every rank has, the root combines the p vectors
in rank order into its result, and the others return.

Restrictions: the communicator's ranks share a segment (collectives.shm), and the vector
fits one region (half of COLLECTIVES_SHM_BYTES, less the header).  The root does all the
combining: best for small vectors.

Cost: alpha + 2 n beta + (p-1) n gamma.

Bytes sent per rank: none through MPI; each rank copies n bytes into its region, the root
reads (p - 1) n.
"""

STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return alpha + 2 * n * beta + (p - 1) * n * gamma
