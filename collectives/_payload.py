"""Payload layouts and argument checks shared by the native and NumPy compression kernels.

Both implementations call these before touching memory, so they fail the same way.
"""
import numpy as np

MAX_COUNTER = 2**32  # rng.h counters are 32-bit


def nbuckets(n, bucket):
    """Number of buckets of ``bucket`` elements covering ``n`` (the last may be short)."""
    return -(-n // bucket)


def sign_nbytes(n):
    """Bytes holding ``n`` packed sign bits."""
    return -(-n // 8)


def randk_threshold(n, k):
    """The 32-bit threshold under which random-k keeps an element: probability min(k/n, 1 - 2^-32)."""
    if k < 0:
        raise ValueError(f"randk: k must be >= 0, got {k}")
    return 0 if n == 0 else min((int(k) << 32) // n, 2**32 - 1)


def _len(name, arr, want):
    if len(arr) != want:
        raise ValueError(f"{name} has {len(arr)} elements, expected {want}")


def _same(x, *arrays):
    for name, a in arrays:
        if a is not None and np.asarray(a).dtype != np.asarray(x).dtype:
            raise TypeError(f"{name} has dtype {np.asarray(a).dtype}, expected {np.asarray(x).dtype} like x")


def check_fp16(x, scale, h, residual=None):
    """Validate float16 compression arguments."""
    _len("h", h, len(x))
    if residual is not None:
        _same(x, ("residual", residual))
        _len("residual", residual, len(x))
    if not np.isfinite(scale) or scale == 0:
        raise ValueError(f"fp16: scale must be finite and non-zero, got {scale}")


def check_bucketed(kind, n, bucket, q, scales, residual=None, levels=None, seed_used=False):
    """Validate a bucketed quantizer's sizes: q per element (or packed bits), one scale per bucket."""
    if bucket < 1:
        raise ValueError(f"{kind}: bucket must be >= 1, got {bucket}")
    if kind == "sign":
        if bucket % 8:
            raise ValueError(f"sign: bucket must be a multiple of 8, got {bucket}")
        _len("bits", q, sign_nbytes(n))
    else:
        _len("q", q, n)
    _len("scales", scales, nbuckets(n, bucket))
    if residual is not None:
        _len("residual", residual, n)
    if levels is not None and not 1 <= levels <= 127:
        raise ValueError(f"qsgd: levels must be in 1..127, got {levels}")
    if seed_used and n > MAX_COUNTER:
        raise ValueError(f"{kind}: stochastic rounding covers at most 2^32 elements, got {n}")


def check_add(x, add):
    """Validate a sparsifier's ``add`` (the gradient it adds into x): None or like x."""
    if add is not None and (getattr(add, "dtype", None) != x.dtype or add.shape != x.shape):
        raise ValueError(f"add must match x ({x.dtype}, {x.shape}), got "
                         f"{getattr(add, 'dtype', type(add))}, {getattr(add, 'shape', '')}")


def check_sparse(x, k, idx, vals, exact=True, add=None):
    """Validate a sparsifier's outputs: ``idx`` and ``vals`` of equal length (k for exact top-k)."""
    check_add(x, add)
    if k < 0:
        raise ValueError(f"top-k: k must be >= 0, got {k}")
    _len("vals", vals, len(idx))
    if exact:
        _len("idx", idx, min(k, len(x)))
    elif len(idx) < min(k, len(x)):
        raise ValueError(f"idx has {len(idx)} elements, need at least {min(k, len(x))}")


def check_blocks(name, buf_elems, nblocks, blocklen, stride):
    """Validate that ``nblocks`` blocks of ``blocklen`` at ``stride`` fit in ``buf_elems`` elements."""
    if min(nblocks, blocklen, stride) < 0:
        raise ValueError(f"reduce_blocks: negative block geometry ({nblocks}, {blocklen}, {stride})")
    if nblocks > 1 and blocklen > stride:
        raise ValueError(f"reduce_blocks: blocks of {blocklen} at stride {stride} overlap")
    if nblocks and blocklen and (nblocks - 1) * stride + blocklen > buf_elems:
        raise ValueError(f"reduce_blocks: {nblocks} blocks of {blocklen} at stride {stride} "
                         f"overrun {name} of {buf_elems} elements")
