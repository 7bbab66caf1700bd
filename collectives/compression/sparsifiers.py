"""Sparsifiers: a few elements sent, the rest kept in the error-feedback residual: topk, dgc,
threshold and randk.

Their payloads, bias and error-feedback defaults are in the table of collectives.compression.
Top-k, DGC and threshold send (index, value) pairs and all-reduce in the sparse shape; random-k
draws its indices from a seed every rank shares, so it sends values only, in the sum shape
(collectives.compression.shapes).  With a residual, a selection adds the gradient into it in
its first pass and leaves in it what was not selected.
"""
import numpy as np

from .. import kernels
from .base import Compressor, flat


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
        x = flat(x)
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
    """Every element with ``|x| >= threshold``."""

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
        x = flat(x)
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

