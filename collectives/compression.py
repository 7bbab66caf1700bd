"""Gradient compressors for all-reduce, in the style of Horovod and PyTorch DDP comm hooks.

A compressor turns a flat float32/float64 gradient into a payload, a tuple of arrays, and
back: ``compress(x) -> (payload, ctx)``, ``decompress(payload, ctx)`` and
``decompress_add(dst, payload, ctx)`` (a receiver adds straight into its sum).  ``ctx``
describes the layout (length, dtype, seed, scale), is the same on every rank, and is not
sent.  ``allreduce(comm, grad, compressor, state)`` sums a gradient over the ranks through a
compressor.  Every kernel is from collectives.kernels (native C, or the NumPy twin).

=============  =================================================  ========  ==============
name           payload                                            unbiased  error feedback
=============  =================================================  ========  ==============
none           the values                                         yes       -
fp16           float16(x * scale); summed in float16 (Allreduce)  no [1]    off
int8           int8 per element + one scale per bucket            yes [2]   off
qsgd           s-level int8 per element + L2 norm per bucket      yes       off
sign           1 bit per element + mean |x| per bucket            no        on
topk           k (index, value) pairs of largest |x|              no        on
dgc            <= k pairs above a sampled threshold               no        on
threshold      (index, value) pairs with |x| >= t                 no        on
randk          ~k values at indices drawn from a shared seed;     no [3]    on
               summed with Allreduce, indices never sent
=============  =================================================  ========  ==============

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
"""
import warnings

import numpy as np
from mpi4py import MPI

from . import kernels
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
    summable = True         # payloads of all ranks may be summed elementwise (Allreduce)
    shared_seed = False     # every rank must draw the same random numbers

    def __init__(self, seed=0, error_feedback=None):
        self.seed = int(seed)
        self.error_feedback = self.feedback if error_feedback is None else bool(error_feedback)
        self.step = 0

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
    summable = True

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

    summable = False

    def __init__(self, bucket=512, **kw):
        super().__init__(**kw)
        if bucket < 1:
            raise ValueError(f"{self.name}: bucket must be >= 1, got {bucket}")
        self.bucket = int(bucket)

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

    Subclasses define ``_select(v, seed, zero) -> (idx, vals)``.
    """

    unbiased = False
    feedback = True
    summable = False

    def compress(self, x, residual=None, seed=0):
        """(payload = (idx, vals), ctx); the residual keeps what was not selected."""
        x = _flat(x)
        if residual is None:
            idx, vals = self._select(x.copy(), seed, False)
        else:
            residual += x
            idx, vals = self._select(residual, seed, True)
        return (idx, vals), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst[idx] += vals."""
        kernels.scatter_add(dst, payload[0], payload[1])


def _count(n, ratio):
    return min(n, max(1, int(round(ratio * n)))) if n else 0


class TopK(_Sparse):
    """The k = ratio * n largest magnitudes, exactly (ties to the lower index)."""

    name = "topk"

    def __init__(self, ratio=0.01, **kw):
        super().__init__(**kw)
        self.ratio = float(ratio)

    def _select(self, v, seed, zero):
        k = _count(len(v), self.ratio)
        idx, vals = np.empty(k, np.int64), np.empty(k, v.dtype)
        kernels.topk(v, k, idx, vals, zero)
        return idx, vals


class DGC(TopK):
    """Deep Gradient Compression's top-k: threshold from a sample, at most k kept."""

    name = "dgc"

    def __init__(self, ratio=0.01, sample=0.01, **kw):
        super().__init__(ratio, **kw)
        self.sample = float(sample)

    def _select(self, v, seed, zero):
        k = _count(len(v), self.ratio)
        idx, vals = np.empty(k, np.int64), np.empty(k, v.dtype)
        c = kernels.approx_topk(v, k, max(_count(len(v), self.sample), 64), seed, idx, vals, zero)
        return idx[:c], vals[:c]


class Threshold(_Sparse):
    """Every element with |x| >= threshold."""

    name = "threshold"

    def __init__(self, threshold=1e-3, **kw):
        super().__init__(**kw)
        self.threshold = float(threshold)

    def _select(self, v, seed, zero):
        c = kernels.threshold_count(v, self.threshold)
        idx, vals = np.empty(c, np.int64), np.empty(c, v.dtype)
        kernels.threshold(v, self.threshold, idx, vals, zero)
        return idx, vals


class RandK(Compressor):
    """About k = ratio * n values at positions drawn from a seed all ranks share (indices never sent)."""

    name = "randk"
    summable = True
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
    """Residual state of error feedback for one gradient: what compression has not yet sent."""

    def __init__(self):
        self.residual = None

    def residual_for(self, x):
        """The residual matching ``x`` (zeros on first use or when x's shape or dtype changed)."""
        if self.residual is None or self.residual.shape != x.shape or self.residual.dtype != x.dtype:
            self.residual = np.zeros_like(x)
        return self.residual


def allreduce(comm, grad, compressor, state=None, average=False):
    """Sum (or average) ``grad`` over ``comm`` through ``compressor``; returns (result, state).

    Parameters
    ----------
    comm : collectives.Comm
        The communicator; its Allgather(v) carry the payloads, its Allreduce the summable ones.
    grad : ndarray of float32 or float64
        This rank's gradient (any shape, contiguous).  Not modified.
    compressor : Compressor or str
        An instance, or a name from COMPRESSORS (constructed with its defaults).
    state : ErrorFeedback or None
        The error-feedback state from the previous call; created when the compressor uses
        error feedback and None is passed.  Pass back what this call returns.
    average : bool
        Divide the sum by the number of ranks.

    Every rank adds the payloads in rank order, so all ranks hold the same bits.
    """
    if isinstance(compressor, str):
        compressor = COMPRESSORS[compressor]()
    grad = np.asarray(grad)
    g = _flat(np.ascontiguousarray(grad))
    p, rank = comm.Get_size(), comm.Get_rank()
    if state is None and compressor.error_feedback:
        state = ErrorFeedback()
    residual = state.residual_for(g) if state is not None else None
    payload, ctx = compressor.compress(g, residual, compressor.next_seed(rank))
    out = np.zeros_like(g)
    if compressor.summable:
        if ctx.get("overflow") is not None and comm.allreduce(int(ctx["overflow"]), op=MPI.MAX):
            warnings.warn(f"{compressor.name}: gradient overflowed float16 at scale "
                          f"{ctx['scale']}; this step is sent uncompressed", RuntimeWarning)
            comm.Allreduce(g, out)
            if residual is not None:
                residual[...] = 0
        else:
            for part in payload:
                comm.Allreduce(MPI.IN_PLACE, part)
            compressor.decompress_add(out, payload, ctx)
    else:
        for part in _allgather_payloads(comm, payload):
            compressor.decompress_add(out, part, ctx)
    if average and p > 1:
        out /= out.dtype.type(p)
    return out.reshape(grad.shape), state


def _allgather_payloads(comm, payload):
    """Every rank's payload, in rank order, through one Allgatherv of bytes."""
    p = comm.Get_size()
    lengths = np.array([len(a) for a in payload], np.int64)
    table = np.empty((p, len(payload)), np.int64)
    comm.Allgather(lengths, table)
    sizes = [np.dtype(a.dtype).itemsize for a in payload]
    counts = [int(sum(l * s for l, s in zip(row, sizes))) for row in table]
    send = np.concatenate([a.view(np.uint8) for a in payload]) if payload else np.empty(0, np.uint8)
    recv = np.empty(sum(counts), np.uint8)
    displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(int).tolist()
    comm.Allgatherv(send, [recv, (counts, displs), MPI.BYTE])
    parts = []
    for r in range(p):
        at, arrays = displs[r], []
        for a, length, size in zip(payload, table[r], sizes):
            arr = recv[at:at + length * size].view(a.dtype)
            arrays.append(arr if arr.flags.aligned else arr.copy())
            at += length * size
        parts.append(tuple(arrays))
    return parts
