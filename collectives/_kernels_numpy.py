"""NumPy fallback for collectives._kernels, with identical signatures (COLLECTIVES_PUREPYTHON=1)."""
import numpy as np

from ._payload import check_blocks
from .ops import DTYPES, OP_NAMES, supports

_UFUNC = {
    "sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
    "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
}


def _ieee_minmax(name, d, s):
    """d[...] = IEEE 754-2019 minimum or maximum of d and s, as csrc/reduce.c computes it: NaN
    if either is NaN, always the canonical quiet NaN (np.nan's bits), and -0 < +0.
    np.minimum propagates NaN but returns whichever of two NaNs or two zeros its loop
    happens to pick, so pairs of zeros and NaNs are settled afterwards.  Only boolean
    temporaries, and values only where there are zeros: every fresh full-size temporary
    costs page faults."""
    zeros = d == 0
    np.logical_and(zeros, s == 0, out=zeros)
    both = zeros.any()
    if both:
        sign = np.logical_or if name == "min" else np.logical_and
        negative = sign(np.signbit(d[zeros]), np.signbit(s[zeros]))
    _UFUNC[name](d, s, out=d)
    if both:
        d[zeros] = np.where(negative, -0.0, 0.0)
    nan = np.isnan(d)
    if nan.any():
        d[nan] = np.nan


def _apply(name, d, s):
    """d[...] = name(d, s), silent on overflow and invalid operations (Inf - Inf gives NaN), as
    the C kernels are."""
    with np.errstate(all="ignore"):
        _combine(name, d, s)


def _combine(name, d, s):
    """Complex PROD goes by the textbook formula in real arithmetic, as csrc/reduce.c does:
    NumPy's complex multiply fuses multiply-adds in some of its loops, so its bits would
    depend on where the buffers start, and ranks would disagree."""
    if name == "prod" and d.dtype.kind == "c":
        re = d.real * s.real - d.imag * s.imag
        d.imag = d.real * s.imag + d.imag * s.real
        d.real = re
    elif name in ("min", "max") and d.dtype.kind == "f":
        _ieee_minmax(name, d, s)
    else:
        _UFUNC[name](d, s, out=d)


def _view(buf, dtype):
    return np.frombuffer(memoryview(buf).cast("B"), dtype=dtype)


def reduce_into(dst, src, dtype, op):
    """dst[:] = op(dst, src) elementwise; ``dtype`` and ``op`` are kernel codes (collectives.ops)."""
    t, name = np.dtype(DTYPES[dtype]), OP_NAMES[op]
    if not supports(name, t):
        raise TypeError(f"reduce_into: op code {op} not defined on dtype code {dtype}")
    d, s = _view(dst, t), _view(src, t)
    if not d.flags.writeable:
        raise ValueError("reduce_into: dst is read-only")
    if d.nbytes != s.nbytes:
        raise ValueError(f"reduce_into: dst has {d.nbytes} bytes, src {s.nbytes}")
    _apply(name, d, s)


def reduce_blocks(dst, src, dtype, op, nblocks, blocklen, dst_stride, src_stride):
    """dst[b*dst_stride:][:blocklen] = op(that, src[b*src_stride:][:blocklen]) for each block b."""
    t, name = np.dtype(DTYPES[dtype]), OP_NAMES[op]
    if not supports(name, t):
        raise TypeError(f"reduce_blocks: op code {op} not defined on dtype code {dtype}")
    d, s = _view(dst, t), _view(src, t)
    check_blocks("dst", len(d), nblocks, blocklen, dst_stride)
    check_blocks("src", len(s), nblocks, blocklen, src_stride)
    if nblocks and blocklen:
        shape = (nblocks, blocklen)
        dv = np.lib.stride_tricks.as_strided(d, shape, (dst_stride * t.itemsize, t.itemsize))
        sv = np.lib.stride_tricks.as_strided(s, shape, (src_stride * t.itemsize, t.itemsize))
        _apply(name, dv, sv)


def reduce_scaled(dst, src, dtype, scale):
    """dst[:] = (dst + src) * scale for a float16/32/64 dtype code (float16 computed in float)."""
    t = np.dtype(DTYPES[dtype])
    if t.kind != "f":
        raise TypeError(f"reduce_scaled: dtype code {dtype} is not a floating type")
    d, s = _view(dst, t), _view(src, t)
    if d.nbytes != s.nbytes:
        raise ValueError(f"reduce_scaled: dst has {d.nbytes} bytes, src {s.nbytes}")
    w = np.float32 if t == np.float16 else t.type
    d[...] = ((d.astype(w) + s.astype(w)) * w(scale)).astype(t)


def sum_f16_f32(acc, src):
    """acc += src, float16 values summed into a float32 accumulator without rounding to half."""
    s = _view(src, np.float16)
    if len(s) != len(acc):
        raise ValueError(f"sum_f16_f32: acc has {len(acc)} elements, src {len(s)}")
    acc += s
