"""When the compressed all-reduce runs node-aware, and the bandwidth ratio that decides it.

Across nodes (a communicator spanning several nodes of k > 1 ranks each, as
collectives.node finds them or COLLECTIVES_NODE lays them out) the sum shape, the sparse
shape's dense fallback and, when it pays (below), the requantize shape run node-aware
(``Stats.shape`` gains "/node"): with N nodes of k ranks and P the payload of the whole vector,

1. an intra-node reduce-scatter of the uncompressed vector (shared memory), leaving the
   j-th rank of each node with its node's sum of shard j (whole buckets, as ``chunks``);
2. the flat shape on shard j across lane j (the j-th rank of every node), error
   feedback on this rank's slice of the residual and on its server chunk;
3. an intra-node all-gather of the shards.

Each node link then carries 2 (N - 1) / N of P, where the flat shape over all p = N k ranks
sends k (p - k) / p of P per phase out of each node, 2 k (N - 1) / N in all: k times fewer
bytes between nodes, for 2 (k - 1) / k of the uncompressed vector per rank through shared
memory.  That pays when the bytes saved between nodes take longer than the extra intra-node
passes: k (N - 1) / N * (payload / vector) >= NODE_RATIO (or COLLECTIVES_NODE_RATIO), the
bandwidth between nodes over the intra-node reduce-scatter/all-gather's (1/8, from the
2 x 2 testbed at 1 Gbit/s: docs/results/testbed.md).
The sum shape and the dense fallback move the same vector within and between nodes, so
they always go node-aware.  The sparse all-gather goes node-aware too: each rank's pairs
cross to each other node once (to its lane), then travel within the node, so a node link
carries (N - 1) k pair payloads instead of k (p - k), the same pairs decoded in the same rank
order as the flat shape.  Uneven layouts (nodes of different sizes) keep the flat shape.
"""
import numpy as np

from ..comm import wrap

# Bandwidth between nodes over that of the intra-node phases: see the module docstring.
# COLLECTIVES_NODE_RATIO, read when a Comm is made, overrides it for that Comm (a fast network
# between nodes wants a larger value).
NODE_RATIO = 1 / 8


def node_ratio(comm):
    """The node ratio of the collectives.Comm ``comm``: its COLLECTIVES_NODE_RATIO, else NODE_RATIO."""
    ratio = wrap(comm)._env.node_ratio
    return NODE_RATIO if ratio is None else ratio


def node_aware_pays(comm, nodes, compressor, dtype):
    """Whether the node-aware requantize saves more time between nodes of ``comm`` than it
    adds within them, from ``compressor``'s payload bytes per input byte on one unit of zeros
    (once per compressor and dtype)."""
    dtype = np.dtype(dtype)
    if dtype not in compressor.ratios:
        x = np.zeros(compressor.unit, dtype)
        payload, _ = compressor.compress(x)
        compressor.ratios[dtype] = sum(a.nbytes for a in payload) / x.nbytes
    k, N = nodes.counts[0], len(nodes.counts)
    return k * (N - 1) / N * compressor.ratios[dtype] >= node_ratio(comm)


def across_nodes(comm):
    """The collectives.node.Nodes of ``comm`` (found when its Comm was made) when the
    node-aware shapes apply (several nodes, all of k > 1 ranks), else None."""
    nodes = wrap(comm)._nodes
    return nodes if nodes.multi and nodes.uniform else None
