"""Neighbourhood all-to-all: every message to and from a neighbour in flight at once.

Steps: rank r posts a receive from each of its sources, in the order of its receive blocks,
then a send to each of its destinations, in the order of its send blocks, copies its
messages to itself while those are in flight, and waits for them all (MPICH's and Open MPI's
linear neighbourhood collectives, which send to themselves through MPI).  A neighbour that is
MPI.PROC_NULL has no message and its block is left untouched; a neighbour repeated (a
multigraph's edges, a periodic dimension of size 1 or 2, which has the same rank on both sides)
gets one message per edge, and MPI's order between two ranks matches the k-th message from i
to j with the k-th receive of j from i, the k-th copy to itself too.  The caller gives the
edges in the order that makes that the right block: on a Cartesian grid the sends of a
dimension go up then down and the receives come from below then above, so a message sent up
lands in the block from below.

Restrictions: none; blocks may differ in size (Neighbor_alltoallv).  Every receive is posted
before any send, and the whole exchange completes as one wait, so it cannot deadlock.  A
rank's sends to itself match its receives from itself one for one (the description checks).

Cost: alpha + n beta, for n bytes sent by each rank to all its destinations: the messages
overlap their latencies.

Bytes sent per rank: n less what it sends itself, each block once.
"""
from ..schedule import ACC, IN

STEPS = "exchange"  # every rank sends and receives at once


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return alpha + n * beta


def neighbor_alltoall_linear(s, sends, recvs):
    """``sends``: (destination, offset, count) of each block of IN, in message order;
    ``recvs``: (source, offset, count) of each block of ACC, in message order."""
    me = s.rank
    for source, off, cnt in recvs:
        if source != me:
            s.irecv(source, ACC, off, cnt)
    for dest, off, cnt in sends:
        if dest != me:
            s.isend(dest, IN, off, cnt)
    own = zip((block for source, *block in recvs if source == me), (block for dest, *block in sends if dest == me))
    for (into, n), (at, m) in own:
        s.copy((ACC, into, n), (IN, at, m))
    s.waitall()
