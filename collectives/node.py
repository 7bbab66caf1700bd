"""Which ranks share a node: the intra-node and lane communicators of a Comm, built once.

A node is the set of ranks ``Split_type(COMM_TYPE_SHARED)`` puts together.  For testing
on one host, COLLECTIVES_NODE overrides it with a layout of consecutive ranks:

* ``K`` -- nodes of K ranks (the last one holds what is left: 5 ranks at K=2 are 2, 2, 1);
* ``NxK`` -- N nodes of K ranks (``2x3``: two nodes of three; ``3x2``: three nodes of two);
* ``a,b,c`` -- nodes of a, b and c ranks (uneven layouts).

A layout whose ranks do not add up to the communicator's size is refused with a ValueError.
Lane j is the communicator of the j-th rank of every node (only nodes that have one).
"""
from typing import NamedTuple

import numpy as np
from mpi4py import MPI


class Phase(NamedTuple):
    """One collective of a node-aware algorithm, as one rank calls it (a rank's list leaves
    out the collectives it takes no part in: node_leader's all-reduce on lane 0, the leaders').

    ``method``: the Comm method ("Reduce_scatter", "Allreduce", "Allgatherv", "Reduce",
    "Bcast"); ``comm``: the communicator, "intra" (the rank's node) or "lane" (the ranks of
    the same index in every node); ``counts``: the elements every rank passes (an int), or
    each rank's block (a tuple: Reduce_scatter, Allgatherv); ``displs``: Allgatherv's block
    offsets; ``root``: Reduce's and Bcast's; ``in_place``: the call's sendbuf is MPI.IN_PLACE.
    """

    method: str
    comm: str
    counts: object
    displs: tuple = None
    root: int = None
    in_place: bool = False


def call(nodes, phase):
    """The bound method that runs ``phase`` on its communicator of ``nodes``."""
    return getattr(getattr(nodes, phase.comm), phase.method)


def layout(spec, size):
    """Ranks per node, in rank order, from a COLLECTIVES_NODE value ``spec`` at ``size`` ranks."""
    spec = spec.strip().lower()
    try:
        if "x" in spec:
            nodes, per = (int(v) for v in spec.split("x"))
            counts = [per] * nodes
        elif "," in spec:
            counts = [int(v) for v in spec.split(",")]
        else:
            per = int(spec)
            counts = [per] * (size // per) + ([size % per] if size % per else []) if per > 0 else [0]
    except ValueError:
        raise ValueError(f"COLLECTIVES_NODE={spec!r}: expected K, NxK or a,b,c (ranks per node)") from None
    if any(c <= 0 for c in counts) or sum(counts) != size:
        raise ValueError(f"COLLECTIVES_NODE={spec!r}: nodes of {counts} ranks do not make "
                         f"{size} ranks; each node needs at least one")
    return counts


class Nodes:
    """The node structure of a communicator: ``intra``, ``lane`` (the objects ``child``
    made, None when there is one node), ``counts`` (ranks per node) and ``local`` (index in
    the node)."""

    def __init__(self, coll, spec, child):
        """Build from mpi4py communicator ``coll``, collective over it; ``spec``: a
        COLLECTIVES_NODE layout, empty for the nodes MPI reports."""
        rank, size = coll.Get_rank(), coll.Get_size()
        if spec:
            counts = layout(spec, size)
            node = np.repeat(np.arange(len(counts)), counts)[rank]
        else:
            shared = coll.Split_type(MPI.COMM_TYPE_SHARED)
            first = shared.allreduce(rank, op=MPI.MIN)
            shared.Free()
            firsts = coll.allgather(first)
            ids = {f: i for i, f in enumerate(sorted(set(firsts)))}
            node = ids[first]
            counts = np.bincount([ids[f] for f in firsts]).tolist()
        self.counts = counts
        self.spans = len(counts) > 1
        self.multi = self.spans and max(counts) > 1
        self.uniform = len(set(counts)) == 1
        self.intra = self.lane = None
        if not self.multi:
            return
        self.intra = child(coll.Split(int(node), rank))
        self.local = self.intra.Get_rank()
        self.lane = child(coll.Split(self.local, rank), True)
        # grid[l][m]: the rank (in ``coll``) that is the l-th of its node and the m-th of its lane
        # (uniform layouts only).
        self.grid = None
        if self.uniform:
            self.grid = np.zeros((counts[0], len(counts)), np.int64)
            for r, (l, m) in enumerate(coll.allgather((self.local, self.lane.Get_rank()))):
                self.grid[l, m] = r

    def ranks_per_node(self, size):
        """Ranks per node, in node order."""
        return tuple(self.counts)

    def free(self):
        """Release the sub-communicators."""
        for sub in (self.intra, self.lane):
            if sub is not None:
                sub.Free()
        self.intra = self.lane = None


class _Flat:
    """A communicator with no node-aware path: on one node (FLAT), or on several nodes of one
    rank each (SPREAD, whose flat calls choose for a network: ``spans``)."""

    multi = False

    def __init__(self, spans):
        self.spans = spans

    def ranks_per_node(self, size):
        """Ranks per node of a communicator of ``size`` ranks."""
        return (1,) * size if self.spans else (size,)

    def free(self):
        """Nothing to release."""


FLAT = _Flat(False)
SPREAD = _Flat(True)


def discover(coll, spec, child):
    """The Nodes of mpi4py communicator ``coll``; FLAT when it spans one node, SPREAD when each
    node holds one rank.  Collective over ``coll``.  ``spec``: a COLLECTIVES_NODE layout, or
    empty; ``child(made, across=False)``: the object the node-aware algorithms call for a communicator
    split from ``coll`` (a collectives.Comm that owns it), ``across`` for a lane across nodes."""
    nodes = Nodes(coll, spec, child)
    return nodes if nodes.multi else (SPREAD if nodes.spans else FLAT)
