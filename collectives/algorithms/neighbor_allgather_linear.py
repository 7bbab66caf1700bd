"""Neighbourhood all-gather: the rank's one block to every destination, every source's block
in flight at once.

Steps: those of neighbor_alltoall_linear, every send block being the whole send buffer:
receives from the sources in the order of the receive blocks, then sends to the
destinations, then one wait.  MPI.PROC_NULL neighbours and repeated edges as there.

Restrictions: none; the blocks received may differ in size (Neighbor_allgatherv).

Cost: alpha + n beta, for n bytes sent by each rank to all its destinations.

Bytes sent per rank: n: its block once per destination.
"""
from .neighbor_alltoall_linear import STEPS, cost, neighbor_alltoall_linear

__all__ = ["STEPS", "cost", "neighbor_allgather_linear"]


def neighbor_allgather_linear(s, sends, recvs):
    """As neighbor_alltoall_linear, each of ``sends`` naming the whole send buffer."""
    neighbor_alltoall_linear(s, sends, recvs)
