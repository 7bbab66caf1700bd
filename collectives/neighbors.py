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


def _numbered(edges):
    """(peer, block, k) for the (peer, block) pairs in order, PROC_NULL left out; k counts the
    earlier messages to the same peer."""
    seen, out = {}, []
    for peer, block in edges:
        if peer != MPI.PROC_NULL:
            out.append((peer, block, seen.get(peer, 0)))
            seen[peer] = seen.get(peer, 0) + 1
    return tuple(out)


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
        cart = comm
        shifts = [cart.Shift(d, 1) for d in range(cart.Get_dim())]
        sends = [edge for d, (below, above) in enumerate(shifts) for edge in ((above, 2 * d + 1), (below, 2 * d))]
        recvs = [edge for d, (below, above) in enumerate(shifts) for edge in ((below, 2 * d), (above, 2 * d + 1))]
        return Neighbourhood(2 * len(shifts), 2 * len(shifts), _numbered(sends), _numbered(recvs))
    if kind == MPI.GRAPH:
        peers = comm.Get_neighbors(comm.Get_rank())
        edges = [(peer, k) for k, peer in enumerate(peers)]
        return Neighbourhood(len(peers), len(peers), _numbered(edges), _numbered(edges))
    sources, destinations, _ = comm.Get_dist_neighbors()
    return Neighbourhood(len(sources), len(destinations), _numbered((p, k) for k, p in enumerate(destinations)),
                         _numbered((p, k) for k, p in enumerate(sources)))
