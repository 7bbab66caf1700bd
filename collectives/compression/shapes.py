"""The shapes of the compressed all-reduce: requantize, sum and sparse, and the table of them.

A shape keeps the bytes each rank sends below about twice the payload of the whole vector
at any rank count p (``allreduce``'s ``Stats`` report them, with the time spent
compressing, communicating and decompressing):

* requantize: a reduce-scatter of compressed chunks, each owner decoding and summing its
  chunk and compressing the sum again (with its own error-feedback residual), then an
  all-gather of those; 2 (p - 1) / p of the payload per rank, as 1-bit Adam's all-reduce.
* sparse: an all-gather of (index, value) pairs while all ranks' pairs together take fewer
  bytes than a dense sum, otherwise a dense reduce-scatter/all-gather of the scattered pairs.
  A rank's pairs travel as one message whose size tells their count (values, then the gaps
  between indices: 6 bytes a float32 pair at 1% kept; collectives.compression.wire),
  decoded into the result in rank order.
* sum: a reduce-scatter/all-gather of the payload's values as they are (random-k's values at
  the shared positions; none's whole vector).

The reduce-scatter/all-gather is collectives.compression.pipeline's, the sparse all-gather
collectives.compression.pairs'; across nodes both run node-aware as
collectives.compression.node_policy describes.  A compressor names its shape
(``Compressor.shape``); ``SHAPES`` maps that name to the function that runs it.
"""
import warnings

import numpy as np

from ..comm import buffer, wrap
from .base import Compressor
from .pairs import gather_pairs
from .pipeline import reduce
from .wire import HEAD, decode, encode


def _quantized(comm, nodes, g, compressor, state, seed, stats, out):
    """The reduce-scatter/all-gather of ``g``; fp16 overflow makes every rank redo it exactly."""
    if state is not None:
        state.residual_for(g)
    reduce(comm, nodes, g, compressor, state, seed, stats, out)
    # An overflow anywhere (a rank's chunk or an owner's sum) reaches every rank as inf in the
    # same decoded bits, so all ranks take this branch together without a message.
    if compressor.overflows and not np.isfinite(out).all() and np.isfinite(g).all():
        warnings.warn(f"{compressor.name}: the sum overflowed float16 at scale {compressor.scale}; "
                      "this step is sent uncompressed", RuntimeWarning)
        reduce(comm, nodes, g, Compressor(), None, seed, stats, out)
        if state is not None:
            state.residual[...] = 0
            state.server[...] = 0


def _summed(comm, nodes, g, compressor, state, seed, stats, out):
    """Compress the whole vector (random-k: the values at the shared positions), sum the
    payload's values with the uncompressed reduce-scatter/all-gather, decode the sum once."""
    residual = state.residual_for(g) if state is not None else None
    with stats.timing("compress"):
        (vals,), ctx = compressor.compress(g, residual, seed)
    total = reduce(comm, nodes, vals, Compressor(), None, seed, stats, np.empty_like(vals))
    with stats.timing("decompress"):
        out[...] = 0
        compressor.decompress_add(out, (total,), ctx)


def _sparse(comm, nodes, g, compressor, state, seed, stats, out):
    """Sparse all-gather of (index, value) pairs into ``out``, or a dense reduce-scatter once
    they are dense.

    Receives are sized for the most pairs a rank can send, ``compressor.most(n)`` (top-k,
    DGC: k), so the count rides with the pairs (the message's size) and no message can
    overrun its buffer; when only the data tells (threshold), every rank learns all counts
    first (one Allgather).  If p times that most, an upper bound on the union of indices,
    would take more bytes than the dense reduce-scatter/all-gather of values
    (total * pair > 2 n itemsize), each rank scatters its pairs into a dense vector and that
    is summed instead; otherwise each rank sends its pairs to every other rank (one message,
    ``encode``; node-aware across nodes, ``gather_pairs``) and every rank adds them up in
    rank order.
    """
    p, n = comm.Get_size(), len(g)
    residual = state.residual_for(g) if state is not None else None
    with stats.timing("compress"):
        (idx, vals), ctx = compressor.compress(g, residual, seed)
    most = compressor.most(n)
    if most is None:
        counts = np.empty(p, np.int64)
        with stats.timing("communicate"):
            wrap(comm)._coll.Allgather(np.array([len(idx)], np.int64), counts)
        stats.wire_bytes += 8 * (p - 1)
        most, total = int(counts.max()), int(counts.sum())
    else:
        total = p * most
    index = np.dtype(np.uint32 if n <= 2**32 else np.int64)
    pair = index.itemsize + g.itemsize
    if total * pair > 2 * n * g.itemsize:
        stats.shape = "sparse->dense" + ("/node" if nodes is not None else "")
        dense = np.zeros_like(g)
        with stats.timing("decompress"):
            compressor.decompress_add(dense, (idx, vals), ctx)
        reduce(comm, nodes, dense, Compressor(), None, seed, stats, out)
        return
    if nodes is None:
        c = wrap(comm)
        grid, local, intra, lane = np.arange(p)[None], 0, None, c
    else:
        c, grid, local, intra, lane = nodes.lane, nodes.grid, nodes.local, nodes.intra, nodes.lane
    # One slot per rank in scratch, whole 8-byte words so that every slot's values are aligned.
    slot = -(-(HEAD + most * pair) // 8) * 8
    room = buffer(c, "pairs", p * slot)
    # Rank r's indices, decoded (this rank's: its gaps, encoded).
    work = buffer(c, "pair indices", p * most * 8).view(np.int64).reshape(p, most)
    mine = int(grid[local, lane.rank])
    with stats.timing("compress"):
        if np.any(idx[1:] < idx[:-1]):
            # The built-in sparsifiers select in index order; the gaps and the blocks need it.
            order = np.argsort(idx, kind="stable")
            idx, vals = idx[order], vals[order]
        size = encode(idx, vals, room[mine * slot:(mine + 1) * slot], index, work[mine])
    with stats.timing("communicate"):
        got = gather_pairs(grid, local, intra, lane, room, slot, size, stats)
    with stats.timing("decompress"):
        _scatter_blocks(out, [(idx, vals) if r == mine else decode(buf, g.dtype, work[r])
                              for r, buf in enumerate(got)], compressor, ctx)


# Bytes of the output zeroed and then summed into at a time, while in cache, rather than
# zeroing all of it first and scattering each rank's pairs over all of it (measured:
# docs/results/testbed.md).
BLOCK_BYTES = 1 << 20


def _scatter_blocks(out, payloads, compressor, ctx):
    """out = the sum of the pairs of ``payloads`` (indices ascending), added in their order,
    one block of ``out`` at a time."""
    step = max(1, BLOCK_BYTES // out.itemsize)
    bounds = np.append(np.arange(0, len(out), step), len(out))
    cuts = [np.searchsorted(idx, bounds) for idx, _ in payloads]
    for b in range(len(bounds) - 1):
        out[bounds[b]:bounds[b + 1]] = 0
        for (idx, vals), cut in zip(payloads, cuts):
            if cut[b + 1] > cut[b]:
                compressor.decompress_add(out, (idx[cut[b]:cut[b + 1]], vals[cut[b]:cut[b + 1]]), ctx)


SHAPES = {"requantize": _quantized, "sum": _summed, "sparse": _sparse}
