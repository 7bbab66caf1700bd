"""Quantizers: fewer bits per element, every element sent: fp16, int8, qsgd and sign.

Their payloads, bias and error-feedback defaults are in the table of collectives.compression.
They all-reduce in the requantize shape (collectives.compression.shapes): an owner decodes
the chunks it receives, sums them and quantizes the sum again.  The bucketed ones cut chunks
at whole buckets (``unit``), so a bucket's scale never straddles two owners.
"""
import numpy as np

from .. import kernels
from .._payload import nbuckets, sign_nbytes
from .base import Compressor, flat


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
        x = flat(x)
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
    """int8 per element, scale ``max|x|/127`` per bucket; stochastic rounding makes it unbiased."""

    name = "int8"

    def __init__(self, bucket=512, stochastic=True, **kw):
        super().__init__(bucket, **kw)
        self.stochastic = bool(stochastic)
        self.unbiased = self.stochastic

    def compress(self, x, residual=None, seed=0):
        """(payload = (q, scales), ctx)."""
        x = flat(x)
        q, s = np.empty(len(x), np.int8), self._scales(x)
        kernels.int8_compress(x, self.bucket, q, s, self.stochastic, seed, residual)
        return (q, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += q * scale."""
        kernels.int8_decompress_add(payload[0], payload[1], self.bucket, dst)


class QSGD(_Bucketed):
    """QSGD: ``|x| / ||bucket||_2`` stochastically rounded to ``levels`` levels, sign kept."""

    name = "qsgd"

    def __init__(self, bucket=512, levels=15, **kw):
        super().__init__(bucket, **kw)
        if not 1 <= levels <= 127:
            raise ValueError(f"qsgd: levels must be in 1..127, got {levels}")
        self.levels = int(levels)

    def compress(self, x, residual=None, seed=0):
        """(payload = (q, norms), ctx)."""
        x = flat(x)
        q, s = np.empty(len(x), np.int8), self._scales(x)
        kernels.qsgd_compress(x, self.bucket, self.levels, seed, q, s, residual)
        return (q, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += q * norm / levels."""
        kernels.qsgd_decompress_add(payload[0], payload[1], self.bucket, self.levels, dst)


class Sign(_Bucketed):
    """1-bit sign per element, packed 8 per byte, times the mean ``|x|`` of its bucket."""

    name = "sign"
    unbiased = False
    feedback = True

    def __init__(self, bucket=512, **kw):
        super().__init__(bucket, **kw)
        if self.bucket % 8:
            raise ValueError(f"sign: bucket must be a multiple of 8, got {bucket}")

    def compress(self, x, residual=None, seed=0):
        """(payload = (bits, mags), ctx)."""
        x = flat(x)
        bits, s = np.empty(sign_nbytes(len(x)), np.uint8), self._scales(x)
        kernels.sign_compress(x, self.bucket, bits, s, residual)
        return (bits, s), self._ctx(x, seed)

    def decompress_add(self, dst, payload, ctx):
        """dst += +-mag."""
        kernels.sign_decompress_add(payload[0], payload[1], self.bucket, dst)

