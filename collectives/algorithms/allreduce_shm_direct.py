"""All-reduce in the node's shared segment, every rank combining every rank's vector.

Steps (csrc/shm.c, one phase): each rank copies its vector into its region of the segment,
beside the call's fingerprint, and publishes the phase; once every rank has published it,
each folds the p fingerprints (the cross-rank check, at no extra phase) and combines the p
vectors in rank order, x0 op x1 op ... op x(p-1), into its result.  Every rank computes the
same bits.  In place, the rank's own vector is read back from its region.

Restrictions: the communicator's ranks share a segment (collectives.shm), and the vector
fits one region (half of COLLECTIVES_SHM_BYTES, less the header).  One phase, but each rank
combines all p vectors: best for small vectors.

Cost: alpha + 2 n beta + (p-1) n gamma.

Bytes sent per rank: none through MPI; each rank copies n bytes into its region and reads
(p - 1) n from the others'.
"""

STEPS = "shared"  # phases in the node's segment: alpha a phase, beta a byte copied, gamma a byte combined


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return alpha + 2 * n * beta + (p - 1) * n * gamma
