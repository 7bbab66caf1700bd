"""Leader-based (node-aware) all-reduce, for small messages: reduce to a leader in each
node, all-reduce among the leaders, broadcast in each node.

Steps: the ranks of a node reduce to its first rank (the leader); the leaders, one per node
and forming lane 0, all-reduce; each leader broadcasts the result in its node.

Composed from collectives' own Reduce, Allreduce and Bcast on the node's communicators
(collectives.node), each phase with its own ``auto`` choice: the single-schedule executor
runs on one communicator.  ``phases`` gives the calls as data (collectives.node.Phase): the
run makes exactly those, and bench/simulate.py's testbed model walks them.

Restrictions: none (nodes may hold different numbers of ranks).  Only one rank per node
talks between nodes, so for large n the hierarchical all-reduce, which spreads that traffic
over every rank, is the better choice.

Cost, with k ranks per node and m nodes, intra-node (a, b) and inter-node (A, B), binomial
trees in the node: 2 lg k (a + n b) + lg k n gamma, plus the leaders' all-reduce of n
elements, lg m (A + n B + n gamma) by recursive doubling.

Bytes sent per rank: within the node, n by every rank but the leader (to its parent in the
reduce) plus n to each of its broadcast children (ceil(lg k) n at most, the leader); between
nodes, a leader's share of the leaders' all-reduce (lg m n by recursive doubling when m is a
power of two).
"""
import functools

from mpi4py import MPI

from ..node import Phase, call
from ._cost import lg


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma, k=None, inter=None):
    """The header's Cost for p ranks (k per node, default all on one) and n bytes; ``inter``
    is (A, B) between nodes, default (alpha, beta)."""
    k = p if k is None else k
    m, (big_a, big_b) = p // k, inter or (alpha, beta)
    return 2 * lg(k) * (alpha + n * beta) + lg(k) * n * gamma + lg(m) * (big_a + n * big_b + n * gamma)


@functools.lru_cache(maxsize=64)
def phases(count, k, local, in_place=False):
    """The Phases (collectives.node) of local rank ``local`` of a node of ``k`` all-reducing
    ``count`` elements, ``in_place`` or not, in order: the leaders' all-reduce on lane 0 is the
    leader's alone; the same for any ``k``.  Cached: the run reads them on every call, the
    model (bench/simulate.py) walks them."""
    leader = local == 0
    reduce = Phase("Reduce", "intra", count, root=0, in_place=in_place and leader)
    bcast = Phase("Bcast", "intra", count, root=0)
    if not leader:
        return reduce, bcast
    return reduce, Phase("Allreduce", "lane", count, in_place=True), bcast


def allreduce_node_leader(nodes, send, recv, op):
    """All-reduce ``send`` (None: in place) into ``recv`` over the node structure ``nodes``."""
    reduce, *leaders, bcast = phases(recv.size, nodes.intra.size, nodes.local, send is None)
    leader = nodes.local == reduce.root
    call(nodes, reduce)(MPI.IN_PLACE if reduce.in_place else recv if send is None else send,
                        recv if leader else None, op=op, root=reduce.root)
    for allreduce in leaders:
        call(nodes, allreduce)(MPI.IN_PLACE, recv, op=op)
    call(nodes, bcast)(recv, root=bcast.root)
