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
    """The node structure of a communicator: ``intra``, ``lane`` (collectives.Comm, or None
    when there is one node), ``counts`` (ranks per node) and ``local`` (index in the node)."""

    def __init__(self, comm):
        """Build from the collectives.Comm ``comm``; collective over it."""
        from .comm import Comm

        spec = comm._env.node
        if spec:
            counts = layout(spec, comm.size)
            node = np.repeat(np.arange(len(counts)), counts)[comm.rank]
        else:
            shared = comm._coll.Split_type(MPI.COMM_TYPE_SHARED)
            first = shared.allreduce(comm.rank, op=MPI.MIN)
            shared.Free()
            firsts = comm._coll.allgather(first)
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
        self.intra = _flat(Comm, comm._coll.Split(int(node), comm.rank), comm)
        self.local = self.intra.rank
        self.lane = _flat(Comm, comm._coll.Split(self.local, comm.rank), comm)
        # grid[l][m]: the rank (in ``comm``) that is the l-th of its node and the m-th of its lane
        # (uniform layouts only).
        self.grid = None
        if self.uniform:
            self.grid = np.zeros((counts[0], len(counts)), np.int64)
            for r, (l, m) in enumerate(comm._coll.allgather((self.local, self.lane.rank))):
                self.grid[l, m] = r

    def free(self):
        """Release the sub-communicators."""
        for sub in (self.intra, self.lane):
            if sub is not None:
                sub.Free()
        self.intra = self.lane = None


def _flat(Comm, made, parent):
    """A Comm over ``made`` that owns it and never looks for nodes itself.

    Unchecked: only the node-aware all-reduces call it, after the parent's agreement on the
    algorithm, count, dtype and op, from which every phase's arguments follow on every rank
    (a check per phase would add a round trip per phase, one of them between nodes)."""
    sub = Comm(made, algorithms={k: v for k, v in parent.algorithms.items() if k != "allreduce"},
               check=False, timeout=parent.timeout, on_timeout=parent.on_timeout, _nodes=FLAT, _env=parent._env)
    made.Free()
    return sub


class _Flat:
    """A communicator with no node-aware path: on one node (FLAT), or on several nodes of one
    rank each (SPREAD, whose flat calls choose for a network: ``spans``)."""

    multi = False

    def __init__(self, spans):
        self.spans = spans

    def free(self):
        """Nothing to release."""


FLAT = _Flat(False)
SPREAD = _Flat(True)


def allreduce(comm, sendbuf, recvbuf, op, algorithm):
    """Run Comm.Allreduce node-aware when the choice says so; False to leave it to the flat path.

    The choice: a per-call ``algorithm``, else the Comm's, else COLLECTIVES_ALLREDUCE, else
    auto, which goes node-aware only with more than one node and several ranks on some node.
    Arguments that do not pass the checks are left to the flat path, which reports them on
    every rank.
    """
    from .agreement import FINDS_NODES, agree
    from .buffers import Native, is_in_place, parse
    from .executor import run
    from .ops import check_op
    from .registry import decide_for, may_be_node_aware, resolve_name, select_node

    try:
        requested = resolve_name("allreduce", algorithm)
        if requested == "auto":
            requested = comm.algorithms.get("allreduce") or resolve_name("allreduce", comm._env.algorithms["allreduce"])
        if comm._nodes is not None and not may_be_node_aware(requested):
            return False
        recv, n, _ = parse(recvbuf, "recvbuf", writable=True)
        send = None if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")[0]
        opc, dt = check_op(op, recv.dtype)
    except (ValueError, TypeError, Native):
        return False
    if n == 0 or (send is not None and (send.size != n or send.dtype != recv.dtype)):
        return False
    if comm._nodes is None:
        # Every rank's first valid Allreduce on ``comm`` comes here, whatever its algorithm,
        # so every rank joins the discovery's MPI collectives.  With the check on, the ranks
        # first agree that they all are in this all-reduce, as the flat path would (with its
        # choice of algorithm; a node-aware one is compared once chosen, below), and that they
        # all find the nodes next (FINDS_NODES, 0 in a flat all-reduce's agreement): a rank
        # in another collective, or that left for the flat path (an Iallreduce, which never
        # comes here, with the same arguments too), meets this exchange and all raise, instead
        # of some waiting in the discovery.
        # Collective on the private communicator: queued behind pending nonblocking calls.
        def find():
            if comm.check:
                flat = decide_for("allreduce", algorithm, comm.algorithms.get("allreduce"),
                                  comm._env.algorithms["allreduce"], comm.size, n, recv.nbytes, checked=True,
                                  table=comm._env.tuning)[0]
                agree(comm, "allreduce", flat, count=n, dtype=dt, op=opc, **{FINDS_NODES: 1})
            comm._nodes = discover(comm)
        run(comm, find)
    nodes = comm._nodes
    if not nodes.multi or not may_be_node_aware(requested):
        return False
    algo = select_node("allreduce", requested, recv.nbytes, nodes.uniform)
    if algo is None:
        return False
    if send is not None and np.shares_memory(send, recv):
        send = send.copy()

    def job():
        if comm.check:
            # Ranks about to run different phases on different communicators would hang: the
            # algorithm is compared as well (against a flat one too, which another rank may
            # run on the fast path), with the fields the flat all-reduce compares.
            agree(comm, "allreduce", algo, count=n, dtype=dt, op=opc)
        algo.build(nodes, send, recv, op)
    comm.last_algorithm = algo.name
    run(comm, job)
    return True


def discover(comm):
    """The Nodes of ``comm``; FLAT when it spans one node, SPREAD when each node holds one
    rank (later calls skip the node-aware path).  Collective over ``comm``.

    On several nodes the flat calls choose for a network (registry.SPREAD_AUTO), so the fast
    path's plans, which a call before this one may have made for one node, are dropped.
    """
    nodes = Nodes(comm)
    if nodes.spans and comm._fast is not None:
        comm._fast.forget()
    return nodes if nodes.multi else (SPREAD if nodes.spans else FLAT)
