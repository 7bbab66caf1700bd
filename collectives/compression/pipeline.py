"""The sum of a vector over a communicator through a compressor, as one pipeline of
nonblocking messages, flat or node-aware.

The ranks form a grid of nodes by lanes (collectives.node: ``intra`` a node, ``lane`` the
ranks at the same place of every node); the flat layout is a single lane of nodes of one
rank, and node_policy says when the node-aware one runs.  Shard l of the vector belongs to the node's
l-th rank, cell j of a shard to the lane's j-th rank.  Each rank's cell is cut into S pieces
of whole buckets, one segment per SEGMENT_BYTES of the vector, and all messages are
nonblocking, so the intra-node phases and the (de)compression of one segment overlap the
exchange of the segments before it between nodes.  Cells, and so the error-feedback
residuals, are the same whatever S is.  With that overlap ``Stats`` time this rank's
compression and decompression kernels; communication is the rest of the call's wall time
(waiting for messages, the intra-node sums); only bytes sent to other nodes count.

Messages are raw Isend/Irecv of bytes on the communicators' private duplicates
(``Comm._coll``), under the tags below.
"""
import time

import numpy as np
from mpi4py import MPI

from ..comm import buffer, wrap
from ..constants import TAG_GATHER, TAG_SCATTER, TAG_SHARE, TAG_SUM
from .base import MASK, chunk_seed

# Bytes of the vector per pipeline segment: while one segment crosses between nodes, the
# intra-node phases and the (de)compression of its neighbours run.  Every segment adds
# handshakes that wait for the peer to be scheduled, so segments are few and large
# (measured: docs/results/testbed.md).
SEGMENT_BYTES = 8 << 20


def chunks(n, p, unit=1):
    """Bounds (p + 1 offsets) of p chunks of ``n`` elements, cut at multiples of ``unit``
    (a quantizer's bucket, so chunks hold whole buckets), the first ones one unit longer."""
    base, extra = divmod(-(-n // unit), p)
    units = np.full(p, base, np.int64)
    units[:extra] += 1
    return np.minimum(np.concatenate(([0], np.cumsum(units))) * unit, n)


def segments(n, itemsize, unit, cells):
    """Pipeline segments for ``n`` elements in ``cells`` cells of whole units: one per
    SEGMENT_BYTES of the vector, at most the units of a cell."""
    return max(1, min(-(-n * itemsize // SEGMENT_BYTES), -(-n // unit) // cells))


def pieces(n, k, N, S, unit):
    """Offsets (k, N, S + 1): piece s of cell j of shard l is [o[l, j, s], o[l, j, s + 1]).
    Shards (one per rank of a node) and their cells (one per rank of a lane) are cut as
    ``chunks`` cuts them whatever S is, so the error-feedback residuals keep their place."""
    o = np.empty((k, N, S + 1), np.int64)
    shards = chunks(n, k, unit)
    for l in range(k):
        cells = shards[l] + chunks(int(shards[l + 1] - shards[l]), N, unit)
        for j in range(N):
            o[l, j] = cells[j] + chunks(int(cells[j + 1] - cells[j]), S, unit)
    return o


def reduce(comm, nodes, v, compressor, state, seed, stats, out):
    """The sum of ``v`` over ``comm`` into ``out`` through the pipeline: all ranks as one lane
    when ``nodes`` is None, else node-aware (this rank's node and lane)."""
    if nodes is None:
        if state is not None:
            state.shard = None
        return _pipeline(None, wrap(comm), 0, v, compressor, state, seed, stats, out)
    at = chunks(len(v), nodes.intra.size, compressor.unit)
    shard = (int(at[nodes.local]), int(at[nodes.local + 1]))
    if state is not None and state.shard != shard:
        # The residual may be nonzero outside this rank's shard (left by the flat shape or a
        # checkpoint): fold all of it into this call's sum, which sends it once.
        v = v + state.residual
        state.residual[...] = 0
        state.shard = shard
    return _pipeline(nodes.intra, nodes.lane, nodes.local, v, compressor, state, seed, stats, out)


def _post(reqs, coll, arrays, peer, tag, recv=False):
    """Isend (or Irecv) each non-empty array of ``arrays`` as bytes to (from) ``peer``."""
    op = coll.Irecv if recv else coll.Isend
    reqs.extend(op([a.view(np.uint8), MPI.BYTE], peer, tag) for a in arrays if a.nbytes)


def _pipeline(intra, lane, local, v, compressor, state, seed, stats, out):
    """The sum of ``v`` over the ranks of every node (``intra``; None for one rank per node)
    and lane (``lane``, whose ranks are the ``local``-th of every node), in S segments, into
    ``out``.

    Shard l of ``v`` belongs to the node's l-th rank, cell j of a shard to the lane's j-th
    rank; each cell is cut into S pieces (whole units) and segment s is piece s of every cell.
    Per segment: (a) the node's ranks send each other the pieces of their shards, each sums its
    own in node-rank order; (b) phase 1: piece j of that sum, compressed with this rank's
    residual, goes to lane rank j, which decodes the N it gets in lane order, (c) phase 2:
    compresses that sum again (error feedback on ``state.server``, its cell) and sends it to
    the whole lane, where every rank decodes it into the result; (d) the node's ranks send each
    other the decoded pieces of their shards.  Every message is nonblocking, so (a) of segment
    s + 1 and (b)-(c) of segments s and s - 1 move while this rank sums and compresses segment
    s and decodes s - 2.  ``stats``: compress and decompress count this rank's (de)compression
    kernels, communicate the rest of the call's wall time (waiting for messages, node sums).
    """
    N, me = lane.size, lane.rank
    k = 1 if intra is None else intra.size
    unit = compressor.unit
    S = segments(len(v), v.itemsize, unit, k * N)
    o = pieces(len(v), k, N, S, unit)
    lens = np.diff(o, axis=2)
    shard, cell = int(lens[local].sum()), int(lens[local, me].sum())
    room = buffer(lane, "compression", ((k * shard if k > 1 else 0) + cell) * v.itemsize).view(v.dtype)
    taken = 0

    def take(m):
        nonlocal taken
        taken += m
        return room[taken - m:taken]

    def piece(a, l, j, s):
        return a[o[l, j, s]:o[l, j, s + 1]]

    # Per segment: every node rank's pieces of this rank's shard, their sum, the decoded sum of
    # this rank's cell; scratch reused across calls.
    parts = [[[piece(v, q, j, s) if q == local else take(lens[local, j, s]) for j in range(N)]
              for q in range(k)] if k > 1 else None for s in range(S)]
    total = [[take(lens[local, j, s]) if k > 1 else piece(v, local, j, s) for j in range(N)] for s in range(S)]
    acc = [take(lens[local, me, s]) for s in range(S)]
    residual = state.residual if state is not None else None
    server = state.server_for(int(o[local, me, 0]), int(o[local, me, S]), v.dtype) if state is not None else None
    peers = [q for q in range(k) if q != local]
    before, start = stats.compress_s + stats.decompress_s, time.perf_counter()
    summing, first, second, shared = {}, {}, {}, []

    def post_sum(s):                                    # (a)
        reqs = summing[s] = []
        for q in peers:
            _post(reqs, intra._coll, parts[s][q], q, TAG_SUM, recv=True)
            _post(reqs, intra._coll, [piece(v, q, j, s) for j in range(N)], q, TAG_SUM)

    def scatter(s):                                     # (b)
        MPI.Request.Waitall(summing.pop(s))
        if k > 1:
            for j in range(N):
                np.add(parts[s][0][j], parts[s][1][j], out=total[s][j])
                for q in range(2, k):
                    total[s][j] += parts[s][q][j]
        with stats.timing("compress"):
            sent = [compressor.compress(total[s][j], None if residual is None else piece(residual, local, j, s),
                                        chunk_seed(seed, s * N + j)) for j in range(N)]
        reqs, got = [], [[np.empty_like(a) for a in sent[me][0]] for _ in range(N)]
        for i in range(N):
            if i != me:
                _post(reqs, lane._coll, got[i], i, TAG_SCATTER, recv=True)
                _post(reqs, lane._coll, sent[i][0], i, TAG_SCATTER)
                stats.wire_bytes += sum(a.nbytes for a in sent[i][0])
        got[me] = sent[me][0]
        first[s] = reqs, sent, got

    def gather(s):                                      # (c)
        reqs, sent, got = first.pop(s)
        MPI.Request.Waitall(reqs)
        acc[s][...] = 0
        with stats.timing("decompress"):
            for payload in got:
                compressor.decompress_add(acc[s], payload, sent[me][1])
        at = o[local, me, s] - o[local, me, 0]
        with stats.timing("compress"):
            summed, _ = compressor.compress(acc[s], None if server is None else server[at:at + len(acc[s])],
                                            chunk_seed(~seed & MASK, s * N + me))
        reqs, got = [], [summed if i == me else [np.empty_like(a) for a in sent[i][0]] for i in range(N)]
        for i in range(N):
            if i != me:
                _post(reqs, lane._coll, got[i], i, TAG_GATHER, recv=True)
                _post(reqs, lane._coll, summed, i, TAG_GATHER)
                stats.wire_bytes += sum(a.nbytes for a in summed)
        second[s] = reqs, sent, got

    def share(s):                                       # (d)
        reqs, sent, got = second.pop(s)
        MPI.Request.Waitall(reqs)
        with stats.timing("decompress"):
            for j in range(N):
                dst = piece(out, local, j, s)
                dst[...] = 0
                compressor.decompress_add(dst, got[j], sent[j][1])
        for q in peers:
            _post(shared, intra._coll, [piece(out, q, j, s) for j in range(N)], q, TAG_SHARE, recv=True)
            _post(shared, intra._coll, [piece(out, local, j, s) for j in range(N)], q, TAG_SHARE)

    post_sum(0)
    for t in range(S + 2):
        if t + 1 < S:
            post_sum(t + 1)
        if t < S:
            scatter(t)
        if 0 <= t - 1 < S:
            gather(t - 1)
        if 0 <= t - 2 < S:
            share(t - 2)
    MPI.Request.Waitall(shared)
    stats.communicate_s += time.perf_counter() - start - (stats.compress_s + stats.decompress_s - before)
    return out
