"""Neighbourhood all-to-all: every message to and from a neighbour in flight at once.

Steps: rank r posts a receive from each of its sources, in the order of its receive blocks,
then a send to each of its destinations, in the order of its send blocks, and waits for them
all (MPICH's and Open MPI's linear neighbourhood collectives).  A neighbour that is
MPI.PROC_NULL has no message and its block is left untouched; a neighbour repeated (a
multigraph's edges, a periodic dimension of size 1 or 2, which has the same rank on both sides)
gets one message per edge, and MPI's order between two ranks matches the k-th message from i
to j with the k-th receive of j from i.  The caller gives the edges in the order that makes
that the right block: on a Cartesian grid the sends of a dimension go up then down and the
receives come from below then above, so a message sent up lands in the block from below.

Restrictions: none; blocks may differ in size (Neighbor_alltoallv).  Every receive is posted
before any send, and the whole exchange completes as one wait, so it cannot deadlock.

Cost: alpha + n beta, for n bytes sent by each rank to all its destinations: the messages
overlap their latencies.

Bytes sent per rank: n, each block once.
"""
from ..schedule import ACC, IN

STEPS = "exchange"  # every rank sends and receives at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return alpha + n * beta


def neighbor_alltoall_linear(s, sends, recvs):
    """``sends``: (destination, offset, count) of each block of IN, in message order;
    ``recvs``: (source, offset, count) of each block of ACC, in message order."""
    for source, off, cnt in recvs:
        s.irecv(source, ACC, off, cnt)
    for dest, off, cnt in sends:
        s.isend(dest, IN, off, cnt)
    s.waitall()
