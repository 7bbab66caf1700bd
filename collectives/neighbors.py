"""A topology communicator's neighbourhood, as its neighbourhood collectives move blocks.

MPI numbers a rank's send blocks by its destinations and its receive blocks by its sources:
a graph's neighbours in the order MPI_Graph_neighbors gives them (both ways), a distributed
graph's sources and destinations as MPI_Dist_graph_neighbors gives them, and on a Cartesian
grid, dimension by dimension, the neighbour below (-1) then the one above (+1), each both a
source and a destination.  ``neighbourhood`` lists the messages in the order the schedule
posts them, so that MPI's order between two ranks (the k-th message from i to j meets the
k-th receive of j from i) matches each to its block:

* a graph's edges in their order: repeated edges pair up in order at both ends;
* on a grid, the sends of each dimension up first, then down, and the receives from below
  first, then from above.  Between two ranks that are each other's neighbour on both sides
  (a periodic dimension of size 2), and for a rank that is its own (size 1), the message sent
  up then lands in the block from below, and the one sent down in the block from above, which
  is where MPI puts them;
* MPI.PROC_NULL neighbours (the edges of a non-periodic grid) get no message, and their
  blocks are left untouched.
"""
from typing import NamedTuple

from mpi4py import MPI


class Neighbourhood(NamedTuple):
    """The blocks and messages of one rank's neighbourhood collectives."""

    indegree: int   # receive blocks (MPI.PROC_NULL neighbours included)
    outdegree: int  # send blocks
    sends: tuple    # (destination, send block, k): the k-th message to that destination, in posting order
    recvs: tuple    # (source, receive block, k): the k-th message from that source, in posting order
    own: tuple      # (k, send block, receive block) of the rank's k-th message to itself; None: no such end


def _numbered(edges):
    """(peer, block, k) for the (peer, block) pairs in order, PROC_NULL left out; k counts the
    earlier messages to the same peer."""
    seen, out = {}, []
    for peer, block in edges:
        if peer != MPI.PROC_NULL:
            out.append((peer, block, seen.get(peer, 0)))
            seen[peer] = seen.get(peer, 0) + 1
    return tuple(out)


def _own(rank, sends, recvs):
    """(k, send block, receive block) per message of ``rank`` to itself, k in order, None for
    an end the neighbourhood lacks."""
    out = {k: block for peer, block, k in sends if peer == rank}
    into = {k: block for peer, block, k in recvs if peer == rank}
    return tuple((k, out.get(k), into.get(k)) for k in sorted(out.keys() | into.keys()))


def typed(comm):
    """``comm`` as the mpi4py class of its topology (Cartcomm, Graphcomm, Distgraphcomm), whose
    neighbourhood methods are MPI's own; ValueError for one without."""
    kinds = {MPI.CART: MPI.Cartcomm, MPI.GRAPH: MPI.Graphcomm, MPI.DIST_GRAPH: MPI.Distgraphcomm}
    kind = comm.Get_topology()
    if kind not in kinds:
        raise ValueError("neighbourhood collectives need a communicator with a topology (Create_cart, "
                         "Create_graph, Create_dist_graph)")
    return kinds[kind](comm)


def neighbourhood(comm):
    """The Neighbourhood of ``comm``'s rank (an mpi4py communicator with a topology, of any
    mpi4py class); ValueError for one without."""
    comm = typed(comm)
    kind = comm.Get_topology()
    if kind == MPI.CART:
        shifts = [comm.Shift(d, 1) for d in range(comm.Get_dim())]
        indegree = outdegree = 2 * len(shifts)
        sends = [edge for d, (below, above) in enumerate(shifts) for edge in ((above, 2 * d + 1), (below, 2 * d))]
        recvs = [edge for d, (below, above) in enumerate(shifts) for edge in ((below, 2 * d), (above, 2 * d + 1))]
    elif kind == MPI.GRAPH:
        peers = comm.Get_neighbors(comm.Get_rank())
        indegree = outdegree = len(peers)
        sends = recvs = [(peer, k) for k, peer in enumerate(peers)]
    else:
        sources, destinations, _ = comm.Get_dist_neighbors()
        indegree, outdegree = len(sources), len(destinations)
        sends = [(p, k) for k, p in enumerate(destinations)]
        recvs = [(p, k) for k, p in enumerate(sources)]
    sends, recvs = _numbered(sends), _numbered(recvs)
    return Neighbourhood(indegree, outdegree, sends, recvs, _own(comm.Get_rank(), sends, recvs))
