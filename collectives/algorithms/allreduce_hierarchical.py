"""Hierarchical (node-aware) all-reduce: reduce-scatter in the node, all-reduce across nodes
by lanes, all-gather in the node.

Steps, with p ranks on m nodes of k ranks each:
1. intra-node reduce-scatter: local rank j gets the node's sum of block j (n / k elements);
2. inter-node all-reduce of block j over lane j (the j-th rank of every node), so the k
   lanes run at once and each rank carries 1/k of the traffic between nodes;
3. intra-node all-gather of the k reduced blocks.

Composed from collectives' own Reduce_scatter, Allreduce and Allgatherv on the node's
communicators (collectives.node) rather than written as one schedule: the single-schedule
executor runs on one communicator, and each phase is an existing collective whose own
``auto`` choice fits its size.  ``phases`` gives the calls as data (collectives.node.Phase):
the run makes exactly those, and bench/simulate.py's testbed model walks them.

Restrictions: the same number of ranks on every node (the lanes all-reduce equal blocks).

Cost, with intra-node (a, b) and inter-node (A, B) alpha-beta: ring reduce-scatter and
all-gather in the node, 2 (k-1) a + 2 (k-1)/k n b + (k-1)/k n gamma, plus the lane all-reduce
of n/k elements over m nodes by ring, 2 (m-1) A + 2 (m-1)/m (n/k) B + (m-1)/m (n/k) gamma.

Bytes sent per rank: with ring phases, 2 ((k-1)/k) n within the node and 2 ((m-1)/m) (n/k)
between nodes, by every rank.
"""
import functools

import numpy as np
from mpi4py import MPI

from ..node import Phase, call
from ..schedule import blocks


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma, k=None, inter=None):
    """The header's Cost for p ranks (k per node, default all on one) and n bytes; ``inter``
    is (A, B) between nodes, default (alpha, beta)."""
    k = p if k is None else k
    m, (big_a, big_b) = p // k, inter or (alpha, beta)
    return (2 * (k - 1) * alpha + 2 * (k - 1) / k * n * beta + (k - 1) / k * n * gamma
            + 2 * (m - 1) * big_a + 2 * (m - 1) / m * (n / k) * big_b + (m - 1) / m * (n / k) * gamma)


@functools.lru_cache(maxsize=64)
def phases(count, k, local, in_place=False):
    """The Phases (collectives.node) of local rank ``local`` of a node of ``k`` all-reducing
    ``count`` elements, in order; the same ``in_place`` or not (the reduce-scatter reads the
    input where it lies).  Cached: the run reads them on every call, the model
    (bench/simulate.py) walks them."""
    # blocks() splits as np.array_split would, without the index array (32 MiB of int64 at
    # 16 MiB of float32, 13-25 ms a call on the testbed's loaded cores).
    counts, displs = blocks(count, k)
    return (Phase("Reduce_scatter", "intra", counts),
            Phase("Allreduce", "lane", counts[local], in_place=True),
            Phase("Allgatherv", "intra", counts, displs))


def allreduce_hierarchical(nodes, send, recv, op):
    """All-reduce ``send`` (None: in place) into ``recv`` over the node structure ``nodes``."""
    scatter, lane, gather = phases(recv.size, nodes.intra.size, nodes.local)
    block = np.empty(lane.counts, recv.dtype)
    call(nodes, scatter)(recv if send is None else send, block, scatter.counts, op=op)
    call(nodes, lane)(MPI.IN_PLACE, block, op=op)
    call(nodes, gather)(block, [recv, (gather.counts, gather.displs)])
