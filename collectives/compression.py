"""Gradient compressors for all-reduce, in the style of Horovod and PyTorch DDP comm hooks.

A compressor turns a flat float32/float64 gradient into a payload, a tuple of arrays, and
back: ``compress(x) -> (payload, ctx)``, ``decompress(payload, ctx)`` and
``decompress_add(dst, payload, ctx)`` (a receiver adds straight into its sum).  ``ctx``
describes the layout (length, dtype, seed, scale), is the same on every rank, and is not
sent.  ``allreduce(comm, grad, compressor, state)`` sums a gradient over the ranks through a
compressor.  Every kernel is from collectives.kernels (native C, or the NumPy twin).

=============  ===============================================  ========  ==============  ============
name           payload                                          unbiased  error feedback  shape
=============  ===============================================  ========  ==============  ============
none           the values                                       yes       -               sum
fp16           float16(x * scale)                               no [1]    off             requantize
int8           int8 per element + one scale per bucket          yes [2]   off             requantize
qsgd           s-level int8 per element + L2 norm per bucket    yes       off             requantize
sign           1 bit per element + mean |x| per bucket          no        on              requantize
topk           k (index, value) pairs of largest |x|            no        on              sparse
dgc            <= k pairs above a sampled threshold             no        on              sparse
threshold      (index, value) pairs with |x| >= t               no        on              sparse
randk          ~k values at indices drawn from a shared seed;   no [3]    on              sum
               indices never sent
=============  ===============================================  ========  ==============  ============

[1] round to nearest: error at most 2^-11 relative, not zero-mean in general.
[2] with ``stochastic=True`` (the default); round-to-nearest int8 is biased.
[3] with ``error_feedback=False`` values are scaled by 1/p, p the keep probability, which
    makes it unbiased but multiplies the variance by about 1/p (100x at 1%); by default it
    sends unscaled values and keeps the rest in the error-feedback residual.
Unbiased means E[decompress(compress(x))] = x over the seed, so the all-reduced sum is an
unbiased estimate of the true sum, with the variance the tests bound.

Error feedback (``ErrorFeedback``, on by default for the biased compressors) keeps the
residual e of what compression dropped and compresses g + e next time, leaving
e = g + e - decompress(compress(g + e)), fused into the compression kernel's pass.  What it
guarantees: nothing is lost, only delayed -- after T steps the sum of what was sent equals
the sum of the gradients minus the current residual, and the residual stays bounded
(by the compressor's per-call error: a bucket's step for int8/qsgd, |v| - mean|v| for sign,
the dropped entries for the sparsifiers), which is what lets EF-SGD converge like SGD.

The all-reduce's shape keeps the bytes each rank sends below about twice the payload of the
whole vector at any rank count p (``allreduce``'s ``Stats`` report them, with the time
spent compressing, communicating and decompressing):

* requantize: a reduce-scatter of compressed chunks, each owner decoding and summing its
  chunk and compressing the sum again (with its own error-feedback residual), then an
  all-gather of those; 2 (p - 1) / p of the payload per rank, as 1-bit Adam's all-reduce.
* sparse: an all-gather of (index, value) pairs while all ranks' pairs together take fewer
  bytes than a dense sum, otherwise a dense reduce-scatter/all-gather of the scattered pairs.
  A rank's pairs travel as one message whose size tells their count (values, then the gaps
  between indices: 6 bytes a float32 pair at 1% kept), decoded into the result in rank order.
* sum: a reduce-scatter/all-gather of the payload's values as they are (random-k's values at
  the shared positions; none's whole vector).

Across nodes (a communicator spanning several nodes of k > 1 ranks each, as
collectives.node finds them or COLLECTIVES_NODE lays them out) the sum shape, the sparse
shape's dense fallback and, when it pays (below), the requantize shape run node-aware
(``Stats.shape`` gains "/node"): with N nodes of k ranks and P the payload of the whole vector,

1. an intra-node reduce-scatter of the uncompressed vector (shared memory), leaving the
   j-th rank of each node with its node's sum of shard j (whole buckets, as ``chunks``);
2. the flat shape above on shard j across lane j (the j-th rank of every node), error
   feedback on this rank's slice of the residual and on its server chunk;
3. an intra-node all-gather of the shards.

Each node link then carries 2 (N - 1) / N of P, where the flat shape over all p = N k ranks
sends k (p - k) / p of P per phase out of each node, 2 k (N - 1) / N in all: k times fewer
bytes between nodes, for 2 (k - 1) / k of the uncompressed vector per rank through shared
memory.  That pays when the bytes saved between nodes take longer than the extra intra-node
passes: k (N - 1) / N * (payload / vector) >= NODE_RATIO (or COLLECTIVES_NODE_RATIO), the
bandwidth between nodes over the intra-node reduce-scatter/all-gather's (1/8: on a 2 x 2 testbed of 1 Gbit/s links,
16 MiB, int8 (0.25) ran node-aware in 63 ms against 87 flat, sign (0.03) in 38 against 21).
The sum shape and the dense fallback move the same vector within and between nodes, so
they always go node-aware.  The sparse all-gather goes node-aware too: each rank's pairs
cross to each other node once (to its lane), then travel within the node, so a node link
carries (N - 1) k pair payloads instead of k (p - k), the same pairs decoded in the same rank
order as the flat shape.  Uneven layouts (nodes of different sizes) keep the flat shape.

Both shapes (the flat one being a single lane of nodes of one rank) run as one pipeline
(``_pipeline``): each rank's cell (its lane chunk of its shard) is cut into S pieces of whole
buckets, one segment per SEGMENT_BYTES of the vector, and all messages are nonblocking, so the
intra-node phases and the (de)compression of one segment overlap the exchange of the
segments before it between nodes.  Cells, and so the error-feedback residuals, are the same
whatever S is.  With that overlap ``Stats`` time this rank's compression and decompression
kernels; communication is the rest of the call's wall time (waiting for messages, the
intra-node sums); only bytes sent to other nodes count.
"""
import contextlib
import time
import warnings
import zlib

import numpy as np
from mpi4py import MPI

from . import config, kernels, node
from .agreement import COMPRESSED as AGREEMENT, agree, joined
from .comm import wrap
from .executor import buffer, run
from ._payload import nbuckets, sign_nbytes

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def _mix64(z):
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


class Compressor:
    """Base class: identity compression, and the seed and error-feedback plumbing."""

    name = "none"
    unbiased = True
    feedback = False        # error feedback on by default
    shape = "sum"           # the all-reduce's shape: "requantize", "sum" or "sparse" (allreduce)
    unit = 1                # chunks of the reduce-scatter hold multiples of this many elements
    overflows = False       # a payload can overflow (fp16): the all-reduce checks and falls back
    shared_seed = False     # every rank must draw the same random numbers

    def __init__(self, seed=0, error_feedback=None):
        self.seed = int(seed)
        self.error_feedback = self.feedback if error_feedback is None else bool(error_feedback)
        self.step = 0
        self.ratios = {}        # dtype -> payload bytes per input byte (_node_aware_pays)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"

    def seed_for(self, step, rank):
        """Seed of call ``step`` on ``rank`` (rank ignored when ranks share the stream)."""
        return _mix64((self.seed * _GOLDEN + step + 1) & _MASK) ^ (0 if self.shared_seed else _mix64(rank + 1))

    def next_seed(self, rank):
        """Seed of the next call on ``rank``; every rank advances in step."""
        s = self.seed_for(self.step, rank)
        self.step += 1
        return s

    def compress(self, x, residual=None, seed=0):
        """(payload, ctx) for flat ``x``; with ``residual``, compress x + residual and update it."""
        x = _flat(x)
        if residual is not None:
            residual += x
            payload = (residual.copy(),)
            residual[...] = 0
        else:
            payload = (x.copy(),)
        return payload, self._ctx(x, seed)

    def decompress(self, payload, ctx):
        """The approximation of x that ``payload`` stands for."""
        out = np.zeros(ctx["n"], ctx["dtype"])
        self.decompress_add(out, payload, ctx)
        return out

    def decompress_add(self, dst, payload, ctx):
        """dst += decompress(payload, ctx), without a temporary."""
        dst += payload[0]

    def _ctx(self, x, seed, **extra):
        return dict(n=len(x), dtype=x.dtype, seed=seed, **extra)


def _flat(x):
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"compressors take float32 or float64 gradients, not {x.dtype}")
    if not x.flags.c_contiguous:
        raise ValueError("compressors take contiguous gradients")
    return x.reshape(-1)


class FP16(Compressor):
    """float16 of x * scale, summed in float16 across ranks; overflow is detected and reported."""

    name = "fp16"
    unbiased = False
    shape = "requantize"
    overflows = True

    def __init__(self, scale=1.0, **kw):
        super().__init__(**kw)
        self.scale = float(scale)

    def compress(self, x, residual=None, seed=0, scale=None):
        """(payload, ctx); ctx["overflow"] tells whether some value left float16's range."""
        x = _flat(x)
        scale = self.scale if scale is None else scale
        h = np.empty(len(x), np.float16)
        over = kernels.fp16_compress(x, scale, h, residual)
        return (h,), self._ctx(x, seed, scale=scale, overflow=over)

    def decompress_add(self, dst, payload, ctx):
        """dst += float(h) / scale."""
        kernels.fp16_decompress_add(payload[0], ctx["scale"], dst)


class _Bucketed(Compressor):
    """A quantizer with one scale per bucket of ``bucket`` elements."""

    shape = "requantize"

    def __init__(self, bucket=512, **kw):
        super().__init__(**kw)
        if bucket < 1:
            raise ValueError(f"{self.name}: bucket must be >= 1, got {bucket}")
        self.bucket = self.unit = int(bucket)

    def _scales(self, x):
        return np.empty(nbuckets(len(x), self.bucket), x.dtype)


class Int8(_Bucketed):
    """int8 per element, scale max|x|/127 per bucket; stochastic rounding makes it unbiased."""

    name = "int8"

    def __init__(self, bucket=512, stochastic=True, **kw):
        super().__init__(bucket, **kw)
        self.stochastic = bool(stochastic)
        self.unbiased = self.stochastic

    def compress(self, x, residual=None, seed=0):
        """(payload = (q, scales), ctx)."""
        x = _flat(x)
        q, s = np.empty(len(x), np.int8), self._scales(x)
        kernels.int8_compress(x, self.bucket, q, s, self.stochastic, seed, residual)
        return (q, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += q * scale."""
        kernels.int8_decompress_add(payload[0], payload[1], self.bucket, dst)


class QSGD(_Bucketed):
    """QSGD: |x| / ||bucket||_2 stochastically rounded to ``levels`` levels, sign kept."""

    name = "qsgd"

    def __init__(self, bucket=512, levels=15, **kw):
        super().__init__(bucket, **kw)
        if not 1 <= levels <= 127:
            raise ValueError(f"qsgd: levels must be in 1..127, got {levels}")
        self.levels = int(levels)

    def compress(self, x, residual=None, seed=0):
        """(payload = (q, norms), ctx)."""
        x = _flat(x)
        q, s = np.empty(len(x), np.int8), self._scales(x)
        kernels.qsgd_compress(x, self.bucket, self.levels, seed, q, s, residual)
        return (q, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += q * norm / levels."""
        kernels.qsgd_decompress_add(payload[0], payload[1], self.bucket, self.levels, dst)


class Sign(_Bucketed):
    """1-bit sign per element, packed 8 per byte, times the mean |x| of its bucket."""

    name = "sign"
    unbiased = False
    feedback = True

    def __init__(self, bucket=512, **kw):
        super().__init__(bucket, **kw)
        if self.bucket % 8:
            raise ValueError(f"sign: bucket must be a multiple of 8, got {bucket}")

    def compress(self, x, residual=None, seed=0):
        """(payload = (bits, mags), ctx)."""
        x = _flat(x)
        bits, s = np.empty(sign_nbytes(len(x)), np.uint8), self._scales(x)
        kernels.sign_compress(x, self.bucket, bits, s, residual)
        return (bits, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += +-mag."""
        kernels.sign_decompress_add(payload[0], payload[1], self.bucket, dst)


class _Sparse(Compressor):
    """A sparsifier: payload (indices, values), applied with a scatter-add.

    Subclasses define ``_select(v, add, seed, zero) -> (idx, vals)``, a selection from
    v + add (add None: from v) that leaves v holding that sum.
    """

    unbiased = False
    feedback = True
    shape = "sparse"

    def compress(self, x, residual=None, seed=0):
        """(payload = (idx, vals), ctx); the residual keeps what was not selected."""
        x = _flat(x)
        if residual is None:
            # With zero unset the kernels only read x; a read-only x still needs a copy for them.
            idx, vals = self._select(x if x.flags.writeable else x.copy(), None, seed, False)
        else:
            # The kernels add x into the residual in their first pass over it.
            idx, vals = self._select(residual, x, seed, True)
        return (idx, vals), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst[idx] += vals."""
        kernels.scatter_add(dst, payload[0], payload[1])

    def most(self, n):
        """The most pairs a selection from ``n`` elements can give, or None when only the data
        tells (then the all-reduce exchanges the counts first)."""
        return None


def _count(n, ratio):
    return min(n, max(1, int(round(ratio * n)))) if n else 0


class TopK(_Sparse):
    """The k = ratio * n largest magnitudes, exactly (ties to the lower index)."""

    name = "topk"

    def __init__(self, ratio=0.01, **kw):
        super().__init__(**kw)
        self.ratio = float(ratio)

    def _select(self, v, add, seed, zero):
        k = _count(len(v), self.ratio)
        idx, vals = np.empty(k, np.int64), np.empty(k, v.dtype)
        kernels.topk(v, k, idx, vals, zero, add)
        return idx, vals

    def most(self, n):
        """k: exactly that many (top-k), at most that many (DGC)."""
        return _count(n, self.ratio)


class DGC(TopK):
    """Deep Gradient Compression's top-k: threshold from a sample, at most k kept."""

    name = "dgc"

    def __init__(self, ratio=0.01, sample=0.01, **kw):
        super().__init__(ratio, **kw)
        self.sample = float(sample)

    def _select(self, v, add, seed, zero):
        k = _count(len(v), self.ratio)
        idx, vals = np.empty(k, np.int64), np.empty(k, v.dtype)
        c = kernels.approx_topk(v, k, max(_count(len(v), self.sample), 64), seed, idx, vals, zero,
                                add)
        return idx[:c], vals[:c]


class Threshold(_Sparse):
    """Every element with |x| >= threshold."""

    name = "threshold"

    def __init__(self, threshold=1e-3, **kw):
        super().__init__(**kw)
        self.threshold = float(threshold)

    def _select(self, v, add, seed, zero):
        c = kernels.threshold_count(v, self.threshold, add)
        idx, vals = np.empty(c, np.int64), np.empty(c, v.dtype)
        kernels.threshold(v, self.threshold, idx, vals, zero)
        return idx, vals


class RandK(Compressor):
    """About k = ratio * n values at positions drawn from a seed all ranks share (indices never sent)."""

    name = "randk"
    shared_seed = True
    feedback = True

    def __init__(self, ratio=0.01, **kw):
        super().__init__(**kw)
        self.ratio = float(ratio)
        self.unbiased = not self.error_feedback

    def compress(self, x, residual=None, seed=0):
        """(payload = (vals,), ctx); ctx["scale"] is 1/p for unbiasedness, 1 with error feedback."""
        x = _flat(x)
        n, k = len(x), _count(len(x), self.ratio)
        c = kernels.randk_indices(n, k, seed, np.empty(0, np.int64))
        vals = np.empty(c, x.dtype)
        if residual is None:
            kernels.randk(x, k, seed, vals)
        else:
            residual += x
            kernels.randk(residual, k, seed, vals, True)
        p = (min((k << 32) // n, 2**32 - 1) / 2**32) if n else 1.0
        scale = 1.0 if residual is not None or not p else 1.0 / p
        return (vals,), self._ctx(x, seed, k=k, scale=scale)

    def decompress_add(self, dst, payload, ctx):
        """dst[kept] += vals * scale."""
        kernels.randk_scatter_add(dst, ctx["k"], ctx["seed"], payload[0], ctx["scale"])


COMPRESSORS = {c.name: c for c in (Compressor, FP16, Int8, QSGD, Sign, TopK, DGC, Threshold, RandK)}


class ErrorFeedback:
    """Residual state of error feedback for one gradient: what compression has not yet sent.

    ``residual`` is this rank's, of the whole gradient; ``server`` is what the re-quantization
    of the chunk [``server_span``) this rank sums in the reduce-scatter has not yet sent.
    The node-aware shape keeps the residual of this rank's shard [``shard``) only, zero
    elsewhere; ``shard`` is None while all of it may be nonzero.
    """

    def __init__(self):
        self.residual = self.server = self.server_span = self.shard = None

    def residual_for(self, x):
        """The residual matching ``x`` (zeros on first use or when x's shape or dtype changed)."""
        if self.residual is None or self.residual.shape != x.shape or self.residual.dtype != x.dtype:
            self.residual = np.zeros_like(x)
        return self.residual

    def server_for(self, lo, hi, dtype):
        """The residual of this rank's re-quantization of the summed chunk [lo, hi)."""
        if self.server is None or self.server_span != (lo, hi) or self.server.dtype != dtype:
            self.server, self.server_span = np.zeros(hi - lo, dtype), (lo, hi)
        return self.server


class Stats:
    """What one compressed all-reduce did on this rank: its shape, the bytes it sent (to other
    ranks; to other nodes only in the "/node" shapes, whose intra-node traffic goes through
    shared memory), and seconds spent compressing, communicating and decompressing."""

    __slots__ = ("shape", "wire_bytes", "compress_s", "communicate_s", "decompress_s")

    def __init__(self, shape):
        self.shape, self.wire_bytes = shape, 0
        self.compress_s = self.communicate_s = self.decompress_s = 0.0

    def __repr__(self):
        return (f"<Stats {self.shape}: {self.wire_bytes} B sent, compress {self.compress_s * 1e3:.3f} ms, "
                f"communicate {self.communicate_s * 1e3:.3f} ms, decompress {self.decompress_s * 1e3:.3f} ms>")

    @contextlib.contextmanager
    def timing(self, phase):
        """Add the block's wall time to ``<phase>_s``."""
        t = time.perf_counter()
        yield
        setattr(self, f"{phase}_s", getattr(self, f"{phase}_s") + time.perf_counter() - t)


def allreduce(comm, grad, compressor, state=None, average=False, report=None, out=None):
    """Sum (or average) ``grad`` over ``comm`` through ``compressor``; returns (result, state).

    Parameters
    ----------
    comm : collectives.Comm or mpi4py.MPI.Intracomm
        The communicator.  Point-to-point messages on its private duplicates (and, for the
        threshold sparsifier, an Allgather of the counts) carry the payloads, so every byte
        sent is one this call counts.
    grad : ndarray of float32 or float64
        This rank's gradient (any shape, contiguous).  Not modified.
    compressor : Compressor or str
        An instance, or a name from COMPRESSORS (constructed with its defaults).
    state : ErrorFeedback or None
        The error-feedback state from the previous call; created when the compressor uses
        error feedback and None is passed.  Pass back what this call returns.
    average : bool
        Divide the sum by the number of ranks.
    report : callable, optional
        Called with this call's ``Stats``, which is also left in ``compressor.last``.
    out : ndarray, optional
        Where the result goes (contiguous, grad's dtype and size, apart from grad), returned
        as the result; by default a new array.  A reused ``out`` spares the call a fresh
        vector's page faults (and the caller a copy).

    The shape follows ``compressor.shape``, node-aware across nodes (see the module
    docstring).  Every rank decodes the same payloads in the same order, so all ranks hold
    the same bits.
    """
    c = wrap(comm)
    with joined(c, AGREEMENT):
        if isinstance(compressor, str):
            if compressor not in COMPRESSORS:
                raise ValueError(f"unknown compressor {compressor!r}; one of {', '.join(COMPRESSORS)}")
            compressor = COMPRESSORS[compressor]()
        grad = np.asarray(grad)
        g = _flat(np.ascontiguousarray(grad))
        result = np.empty_like(grad) if out is None else _out(out, grad)
    if c.check and c.size > 1:
        # Before any payload moves: a rank whose count (or compressor) differs would otherwise
        # truncate a receive on one rank and leave another waiting.  Behind the Comm's pending
        # nonblocking collectives (``run``), whose agreements use the same exchange and tag.
        settings = _fingerprint(compressor, average)
        run(c, lambda: agree(c, AGREEMENT, None, count=g.size, dtype=g.dtype.num,
                             compressor_settings=settings))
    p, rank = comm.Get_size(), comm.Get_rank()
    if state is None and compressor.error_feedback:
        state = ErrorFeedback()
    nodes = _across_nodes(comm)
    if nodes is not None and compressor.shape == "requantize" and not _node_aware_pays(nodes, compressor, g.dtype):
        nodes = None
    stats = Stats(compressor.shape + ("/node" if nodes is not None else ""))
    seed = compressor.next_seed(rank)
    flat = result.reshape(-1)
    _SHAPES[compressor.shape](comm, nodes, g, compressor, state, seed, stats, flat)
    if average and p > 1:
        flat /= flat.dtype.type(p)
    compressor.last = stats
    if report is not None:
        report(stats)
    return result, state


def _fingerprint(compressor, average):
    """What every rank's call must share besides count and dtype, as a 31-bit number: the
    compressor's class and settings, ``average``, and, when the ranks draw the same random
    numbers, its seed and step (a seed of its own per rank is fine otherwise)."""
    private = () if compressor.shared_seed else ("seed", "step")
    settings = sorted((k, v) for k, v in vars(compressor).items()
                      if isinstance(v, (bool, int, float, str)) and k not in private)
    return zlib.crc32(repr((type(compressor).__name__, settings, bool(average))).encode()) >> 1


def _out(out, grad):
    """``out`` if it can take the all-reduce of ``grad``, else a ValueError or TypeError naming
    what is wrong."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array, not {type(out).__name__}")
    if out.dtype != grad.dtype or out.size != grad.size:
        raise ValueError(f"out holds {out.size} {out.dtype}; the gradient {grad.size} {grad.dtype}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be contiguous and writeable")
    if np.shares_memory(out, grad):
        raise ValueError("out overlaps the gradient")
    return out


def chunks(n, p, unit=1):
    """Bounds (p + 1 offsets) of p chunks of ``n`` elements, cut at multiples of ``unit``
    (a quantizer's bucket, so chunks hold whole buckets), the first ones one unit longer."""
    base, extra = divmod(-(-n // unit), p)
    units = np.full(p, base, np.int64)
    units[:extra] += 1
    return np.minimum(np.concatenate(([0], np.cumsum(units))) * unit, n)


def _chunk_seed(seed, j):
    return _mix64((seed + (j + 1) * _GOLDEN) & _MASK)


# Bandwidth between nodes over that of the intra-node phases: see the module docstring.
# COLLECTIVES_NODE_RATIO overrides it (a fast network between nodes wants a larger value).
NODE_RATIO = 1 / 8


def node_ratio():
    """The COLLECTIVES_NODE_RATIO of the environment, else NODE_RATIO."""
    return config.get("COLLECTIVES_NODE_RATIO") if config.is_set("COLLECTIVES_NODE_RATIO") else NODE_RATIO


def _node_aware_pays(nodes, compressor, dtype):
    """Whether the node-aware requantize saves more time between nodes than it adds within
    them, from ``compressor``'s payload bytes per input byte on one unit of zeros (once per
    compressor and dtype)."""
    dtype = np.dtype(dtype)
    if dtype not in compressor.ratios:
        x = np.zeros(compressor.unit, dtype)
        payload, _ = compressor.compress(x)
        compressor.ratios[dtype] = sum(a.nbytes for a in payload) / x.nbytes
    k, N = nodes.counts[0], len(nodes.counts)
    return k * (N - 1) / N * compressor.ratios[dtype] >= node_ratio()


def _across_nodes(comm):
    """The collectives.node.Nodes of ``comm`` when the node-aware shapes apply (several nodes,
    all of k > 1 ranks), else None.  Collective over ``comm`` the first time."""
    c = wrap(comm)
    if c._nodes is None:
        c._nodes = node.discover(c)
    nodes = c._nodes
    return nodes if nodes.multi and nodes.uniform else None


def _reduce(comm, nodes, v, compressor, state, seed, stats, out):
    """The sum of ``v`` over ``comm`` into ``out`` through ``_pipeline``: all ranks as one lane
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


# Bytes of the vector per pipeline segment: while one segment crosses between nodes, the
# intra-node phases and the (de)compression of its neighbours run.  Every segment adds
# handshakes that wait for the peer to be scheduled: on the 2-core testbed (4 ranks, 2 x 2,
# int8, 16 MiB) segments of 8 MiB ran in 62 ms, of 2 MiB in 81, 512 KiB in 155, one in 69.
SEGMENT_BYTES = 8 << 20
# Tags on the private communicators: intra-node sum, lane phases 1 and 2, intra-node share,
# sparse pairs (_gather_pairs).
_TAG_SUM, _TAG_SCATTER, _TAG_GATHER, _TAG_SHARE, _TAG_PAIRS = 60, 61, 62, 63, 64


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
            _post(reqs, intra._coll, parts[s][q], q, _TAG_SUM, recv=True)
            _post(reqs, intra._coll, [piece(v, q, j, s) for j in range(N)], q, _TAG_SUM)

    def scatter(s):                                     # (b)
        MPI.Request.Waitall(summing.pop(s))
        if k > 1:
            for j in range(N):
                np.add(parts[s][0][j], parts[s][1][j], out=total[s][j])
                for q in range(2, k):
                    total[s][j] += parts[s][q][j]
        with stats.timing("compress"):
            sent = [compressor.compress(total[s][j], None if residual is None else piece(residual, local, j, s),
                                        _chunk_seed(seed, s * N + j)) for j in range(N)]
        reqs, got = [], [[np.empty_like(a) for a in sent[me][0]] for _ in range(N)]
        for i in range(N):
            if i != me:
                _post(reqs, lane._coll, got[i], i, _TAG_SCATTER, recv=True)
                _post(reqs, lane._coll, sent[i][0], i, _TAG_SCATTER)
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
                                            _chunk_seed(~seed & _MASK, s * N + me))
        reqs, got = [], [summed if i == me else [np.empty_like(a) for a in sent[i][0]] for i in range(N)]
        for i in range(N):
            if i != me:
                _post(reqs, lane._coll, got[i], i, _TAG_GATHER, recv=True)
                _post(reqs, lane._coll, summed, i, _TAG_GATHER)
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
            _post(shared, intra._coll, [piece(out, q, j, s) for j in range(N)], q, _TAG_SHARE, recv=True)
            _post(shared, intra._coll, [piece(out, local, j, s) for j in range(N)], q, _TAG_SHARE)

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


def _quantized(comm, nodes, g, compressor, state, seed, stats, out):
    """The reduce-scatter/all-gather of ``g``; fp16 overflow makes every rank redo it exactly."""
    if state is not None:
        state.residual_for(g)
    _reduce(comm, nodes, g, compressor, state, seed, stats, out)
    # An overflow anywhere (a rank's chunk or an owner's sum) reaches every rank as inf in the
    # same decoded bits, so all ranks take this branch together without a message.
    if compressor.overflows and not np.isfinite(out).all() and np.isfinite(g).all():
        warnings.warn(f"{compressor.name}: the sum overflowed float16 at scale {compressor.scale}; "
                      "this step is sent uncompressed", RuntimeWarning)
        _reduce(comm, nodes, g, Compressor(), None, seed, stats, out)
        if state is not None:
            state.residual[...] = 0
            state.server[...] = 0


def _summed(comm, nodes, g, compressor, state, seed, stats, out):
    """Compress the whole vector (random-k: the values at the shared positions), sum the
    payload's values with the uncompressed reduce-scatter/all-gather, decode the sum once."""
    residual = state.residual_for(g) if state is not None else None
    with stats.timing("compress"):
        (vals,), ctx = compressor.compress(g, residual, seed)
    total = _reduce(comm, nodes, vals, Compressor(), None, seed, stats, np.empty_like(vals))
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
    ``_encode``; node-aware across nodes, ``_gather_pairs``) and every rank adds them up in
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
        _reduce(comm, nodes, dense, Compressor(), None, seed, stats, out)
        return
    if nodes is None:
        c = wrap(comm)
        grid, local, intra, lane = np.arange(p)[None], 0, None, c
    else:
        c, grid, local, intra, lane = nodes.lane, nodes.grid, nodes.local, nodes.intra, nodes.lane
    # One slot per rank in scratch, whole 8-byte words so that every slot's values are aligned.
    slot = -(-(_HEAD + most * pair) // 8) * 8
    room = buffer(c, "pairs", p * slot)
    # Rank r's indices, decoded (this rank's: its gaps, encoded).
    work = buffer(c, "pair indices", p * most * 8).view(np.int64).reshape(p, most)
    mine = int(grid[local, lane.rank])
    with stats.timing("compress"):
        if np.any(idx[1:] < idx[:-1]):
            # The built-in sparsifiers select in index order; the gaps and the blocks need it.
            order = np.argsort(idx, kind="stable")
            idx, vals = idx[order], vals[order]
        size = _encode(idx, vals, room[mine * slot:(mine + 1) * slot], index, work[mine])
    with stats.timing("communicate"):
        got = _gather_pairs(grid, local, intra, lane, room, slot, size, stats)
    with stats.timing("decompress"):
        _scatter_blocks(out, [(idx, vals) if r == mine else _decode(buf, g.dtype, work[r])
                              for r, buf in enumerate(got)], compressor, ctx)


# Bytes of the output zeroed and then summed into at a time, while in cache: on a 16 MiB
# float32 vector and 4 ranks' pairs at 1%, blocks of 1 MiB took 1.0 ms against 1.5-5 ms for
# zeroing it all first and scattering each rank's pairs over all of it.
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


_HEAD = 16   # bytes before a message's pairs: the first index and the width of the gaps, int64


def _encode(idx, vals, buf, index, work):
    """Pack pairs (``idx`` in increasing order) into the bytes ``buf``;
    the bytes used, none for no pairs.  The first index and the gaps' width (int64 each), the
    values, then the gaps between consecutive indices: uint16 when they all fit (at 1% kept
    they are about 100 apart: 6 bytes a float32 pair instead of 8), else ``index``.  ``work``:
    int64 scratch of len(idx) (a fresh array would pay its page faults on every call)."""
    c = len(idx)
    if not c:
        return 0
    gaps = work[:c]
    gaps[0] = 0
    np.subtract(idx[1:], idx[:-1], out=gaps[1:])
    width = np.dtype(np.uint16 if gaps.max() < 2**16 else index)
    buf[:_HEAD].view(np.int64)[...] = idx[0], width.itemsize
    buf[_HEAD:_HEAD + vals.nbytes].view(vals.dtype)[...] = vals
    end = _HEAD + vals.nbytes + c * width.itemsize
    buf[_HEAD + vals.nbytes:end].view(width)[...] = gaps
    return end


def _decode(buf, dtype, work):
    """(int64 indices in ``work``, values) of the pairs ``_encode`` packed into ``buf``."""
    if not len(buf):
        return work[:0], buf.view(dtype)
    first, width = (int(v) for v in buf[:_HEAD].view(np.int64))
    split = _HEAD + (len(buf) - _HEAD) // (dtype.itemsize + width) * dtype.itemsize
    idx = work[:(split - _HEAD) // dtype.itemsize]
    np.cumsum(buf[split:].view(f"u{width}" if width < 8 else np.int64), dtype=np.int64, out=idx)
    idx += first
    return idx, buf[_HEAD:split].view(dtype)


def _gather_pairs(grid, local, intra, lane, room, slot, size, stats):
    """Every rank's packed pairs, in rank order (views of ``room``).

    ``grid[l, m]`` is the rank that is the l-th of its node (``intra``, None with one rank per
    node) and the m-th of its lane (``lane``); rank r's pairs arrive in ``room[r slot:]``, this
    rank's are there already (``size`` bytes).  This rank sends its pairs to the other ranks of
    its lane (one copy per other node) and of its node, and passes each lane arrival on to the
    other ranks of its node (shared memory) as it comes, in lane order, so one tag keeps them
    apart (MPI's messages from one sender do not overtake each other).  A node link carries
    each of its ranks' pairs N - 1 times instead of the flat all-gather's p - k: k times fewer
    bytes between nodes.  Receives take a whole slot: a message's size tells its count.
    """
    k, N = grid.shape
    me = lane.rank
    mine = int(grid[local, me])
    peers = [q for q in range(k) if q != local]
    others = [m for m in range(N) if m != me]

    def at(r, nbytes=slot):
        return room[r * slot:r * slot + nbytes]

    recv, sizes, status = {}, {mine: size}, MPI.Status()
    for m in others:
        recv[int(grid[local, m])] = lane._coll.Irecv([at(grid[local, m]), MPI.BYTE], m, _TAG_PAIRS)
    for q in peers:
        for m in [me] + others:
            recv[int(grid[q, m])] = intra._coll.Irecv([at(grid[q, m]), MPI.BYTE], q, _TAG_PAIRS)
    sends = [lane._coll.Isend([at(mine, size), MPI.BYTE], m, _TAG_PAIRS) for m in others]
    sends += [intra._coll.Isend([at(mine, size), MPI.BYTE], q, _TAG_PAIRS) for q in peers]
    stats.wire_bytes += len(others) * size
    for m in others:
        r = int(grid[local, m])
        recv.pop(r).Wait(status)
        sizes[r] = status.Get_count(MPI.BYTE)
        sends += [intra._coll.Isend([at(r, sizes[r]), MPI.BYTE], q, _TAG_PAIRS) for q in peers]
    for r, req in recv.items():
        req.Wait(status)
        sizes[r] = status.Get_count(MPI.BYTE)
    MPI.Request.Waitall(sends)
    return [at(r, sizes[r]) for r in range(grid.size)]


_SHAPES = {"requantize": _quantized, "sum": _summed, "sparse": _sparse}
