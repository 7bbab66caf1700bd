# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Thin wrappers over csrc/quantize.c and csrc/sparsify.c: gradient compression kernels.

Every function takes contiguous float32 or float64 arrays (one fused wrapper serves both),
checks sizes with collectives._payload, and runs the C kernel without the GIL.  The NumPy
twin, collectives._compress_numpy, has the same signatures and gives the same numbers.
"""
import numpy as np
from cython cimport floating
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from collectives._csrc cimport *
from collectives._payload import check_bucketed, check_fp16, check_sparse, randk_threshold


cdef uint16_t[::1] _half_bits(h):
    if not isinstance(h, np.ndarray) or h.dtype != np.float16:
        raise TypeError("h must be a float16 ndarray")
    return h.view(np.uint16)


def fp16_compress(const floating[::1] x, double scale, h, floating[::1] residual=None):
    """h = float16(v * scale) with v = x (+ residual); True when some h overflowed to inf/nan."""
    check_fp16(x, scale, h, None if residual is None else np.asarray(residual))
    cdef uint16_t[::1] hb = _half_bits(h)
    cdef floating *res = &residual[0] if residual is not None and len(residual) else NULL
    cdef size_t n = len(x)
    cdef int overflow = 0
    if n == 0:
        return False
    with nogil:
        if floating is float:
            overflow = ck_fp16_pack_f32(&x[0], n, <float>scale, &hb[0], res)
        else:
            overflow = ck_fp16_pack_f64(&x[0], n, scale, &hb[0], res)
    return bool(overflow)


cdef _fp16_unpack(h, double scale, floating[::1] out, int accumulate):
    cdef uint16_t[::1] hb = _half_bits(h)
    cdef size_t n = len(out)
    if len(hb) != len(out):
        raise ValueError(f"h has {len(hb)} elements, out {len(out)}")
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_fp16_unpack_f32(&hb[0], n, <float>scale, &out[0], accumulate)
        else:
            ck_fp16_unpack_f64(&hb[0], n, scale, &out[0], accumulate)


def fp16_decompress(h, double scale, floating[::1] out):
    """out = float(h) * (1 / scale)."""
    _fp16_unpack(h, scale, out, 0)


def fp16_decompress_add(h, double scale, floating[::1] dst):
    """dst += float(h) * (1 / scale)."""
    _fp16_unpack(h, scale, dst, 1)


def int8_compress(const floating[::1] x, Py_ssize_t bucket, int8_t[::1] q, floating[::1] scales,
                  bint stochastic=False, uint64_t seed=0, floating[::1] residual=None):
    """Per bucket: scale = max|v| / 127, q = round(v / scale), rounding to nearest or stochastic."""
    check_bucketed("int8", len(x), bucket, q, scales, residual, seed_used=stochastic)
    cdef floating *res = &residual[0] if residual is not None and len(residual) else NULL
    cdef size_t n = len(x)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_int8_pack_f32(&x[0], n, bucket, stochastic, seed, &q[0], &scales[0], res)
        else:
            ck_int8_pack_f64(&x[0], n, bucket, stochastic, seed, &q[0], &scales[0], res)


cdef _int8_unpack(const int8_t[::1] q, const floating[::1] scales, Py_ssize_t bucket,
                  floating[::1] out, int accumulate):
    check_bucketed("int8", len(out), bucket, q, scales)
    cdef size_t n = len(out)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_int8_unpack_f32(&q[0], &scales[0], n, bucket, &out[0], accumulate)
        else:
            ck_int8_unpack_f64(&q[0], &scales[0], n, bucket, &out[0], accumulate)


def int8_decompress(const int8_t[::1] q, const floating[::1] scales, Py_ssize_t bucket,
                    floating[::1] out):
    """out = q * scale of its bucket."""
    _int8_unpack(q, scales, bucket, out, 0)


def int8_decompress_add(const int8_t[::1] q, const floating[::1] scales, Py_ssize_t bucket,
                        floating[::1] dst):
    """dst += q * scale of its bucket."""
    _int8_unpack(q, scales, bucket, dst, 1)


def qsgd_compress(const floating[::1] x, Py_ssize_t bucket, int levels, uint64_t seed,
                  int8_t[::1] q, floating[::1] norms, floating[::1] residual=None):
    """Per bucket: norm = ||v||_2, q = sign(v) * stochastic round of |v| / norm * levels."""
    check_bucketed("qsgd", len(x), bucket, q, norms, residual, levels=levels, seed_used=True)
    cdef floating *res = &residual[0] if residual is not None and len(residual) else NULL
    cdef size_t n = len(x)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_qsgd_pack_f32(&x[0], n, bucket, levels, seed, &q[0], &norms[0], res)
        else:
            ck_qsgd_pack_f64(&x[0], n, bucket, levels, seed, &q[0], &norms[0], res)


cdef _qsgd_unpack(const int8_t[::1] q, const floating[::1] norms, Py_ssize_t bucket, int levels,
                  floating[::1] out, int accumulate):
    check_bucketed("qsgd", len(out), bucket, q, norms, levels=levels)
    cdef size_t n = len(out)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_qsgd_unpack_f32(&q[0], &norms[0], n, bucket, levels, &out[0], accumulate)
        else:
            ck_qsgd_unpack_f64(&q[0], &norms[0], n, bucket, levels, &out[0], accumulate)


def qsgd_decompress(const int8_t[::1] q, const floating[::1] norms, Py_ssize_t bucket, int levels,
                    floating[::1] out):
    """out = q * norm / levels."""
    _qsgd_unpack(q, norms, bucket, levels, out, 0)


def qsgd_decompress_add(const int8_t[::1] q, const floating[::1] norms, Py_ssize_t bucket,
                        int levels, floating[::1] dst):
    """dst += q * norm / levels."""
    _qsgd_unpack(q, norms, bucket, levels, dst, 1)


def sign_compress(const floating[::1] x, Py_ssize_t bucket, uint8_t[::1] bits, floating[::1] mags,
                  floating[::1] residual=None):
    """Per bucket: mag = mean |v|; bit i = (v_i >= 0), 8 per byte, little-endian bit order."""
    check_bucketed("sign", len(x), bucket, bits, mags, residual)
    cdef floating *res = &residual[0] if residual is not None and len(residual) else NULL
    cdef size_t n = len(x)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_sign_pack_f32(&x[0], n, bucket, &bits[0], &mags[0], res)
        else:
            ck_sign_pack_f64(&x[0], n, bucket, &bits[0], &mags[0], res)


cdef _sign_unpack(const uint8_t[::1] bits, const floating[::1] mags, Py_ssize_t bucket,
                  floating[::1] out, int accumulate):
    check_bucketed("sign", len(out), bucket, bits, mags)
    cdef size_t n = len(out)
    if n == 0:
        return
    with nogil:
        if floating is float:
            ck_sign_unpack_f32(&bits[0], &mags[0], n, bucket, &out[0], accumulate)
        else:
            ck_sign_unpack_f64(&bits[0], &mags[0], n, bucket, &out[0], accumulate)


def sign_decompress(const uint8_t[::1] bits, const floating[::1] mags, Py_ssize_t bucket,
                    floating[::1] out):
    """out = +mag where the bit is set, else -mag."""
    _sign_unpack(bits, mags, bucket, out, 0)


def sign_decompress_add(const uint8_t[::1] bits, const floating[::1] mags, Py_ssize_t bucket,
                        floating[::1] dst):
    """dst += +mag where the bit is set, else -mag."""
    _sign_unpack(bits, mags, bucket, dst, 1)


def topk(floating[::1] x, Py_ssize_t k, int64_t[::1] idx, floating[::1] vals, bint zero=False):
    """The min(k, n) largest |x| into (idx ascending, vals); ties to lower indices; zero them if asked."""
    check_sparse(x, k, idx, vals)
    cdef size_t n = len(x)
    cdef int rc = 0
    if len(idx) == 0:
        return
    with nogil:
        if floating is float:
            rc = ck_topk_f32(&x[0], n, k, &idx[0], &vals[0], zero)
        else:
            rc = ck_topk_f64(&x[0], n, k, &idx[0], &vals[0], zero)
    if rc:
        raise MemoryError("topk: out of memory")


def approx_topk(floating[::1] x, Py_ssize_t k, Py_ssize_t nsample, uint64_t seed,
                int64_t[::1] idx, floating[::1] vals, bint zero=False):
    """At most k large |x| above a threshold sampled from nsample elements; returns the count."""
    check_sparse(x, k, idx, vals, exact=False)
    if nsample < 0:
        raise ValueError(f"approx_topk: nsample must be >= 0, got {nsample}")
    cdef size_t n = len(x)
    cdef int64_t c = 0
    if k == 0 or n == 0:
        return 0
    with nogil:
        if floating is float:
            c = ck_approx_topk_f32(&x[0], n, k, nsample, seed, &idx[0], &vals[0], zero)
        else:
            c = ck_approx_topk_f64(&x[0], n, k, nsample, seed, &idx[0], &vals[0], zero)
    if c < 0:
        raise MemoryError("approx_topk: out of memory")
    return c


def threshold_count(const floating[::1] x, double thr):
    """Number of elements with |x| >= thr."""
    cdef size_t n = len(x), c = 0
    if n == 0:
        return 0
    with nogil:
        if floating is float:
            c = ck_threshold_count_f32(&x[0], n, <float>thr)
        else:
            c = ck_threshold_count_f64(&x[0], n, thr)
    return c


def threshold(floating[::1] x, double thr, int64_t[::1] idx, floating[::1] vals, bint zero=False):
    """Elements with |x| >= thr into (idx, vals), up to their length; returns how many qualify."""
    check_sparse(x, len(idx), idx, vals, exact=False)
    cdef size_t n = len(x), c = 0
    cdef int64_t dummy_i
    cdef floating dummy_v
    cdef int64_t *ip = &idx[0] if len(idx) else &dummy_i
    cdef floating *vp = &vals[0] if len(vals) else &dummy_v
    if n == 0:
        return 0
    with nogil:
        if floating is float:
            c = ck_threshold_f32(&x[0], n, <float>thr, ip, vp, len(idx), zero)
        else:
            c = ck_threshold_f64(&x[0], n, thr, ip, vp, len(idx), zero)
    return c


def randk_indices(Py_ssize_t n, Py_ssize_t k, uint64_t seed, int64_t[::1] idx):
    """Indices random-k keeps (each with probability k/n, from seed), up to len(idx); returns the count."""
    cdef uint32_t thr = randk_threshold(n, k)
    cdef int64_t dummy
    cdef int64_t *ip = &idx[0] if len(idx) else &dummy
    cdef size_t c
    with nogil:
        c = ck_randk_indices(n, thr, seed, ip, len(idx))
    return c


def randk(floating[::1] x, Py_ssize_t k, uint64_t seed, floating[::1] vals, bint zero=False):
    """Values random-k keeps, in index order, up to len(vals); returns the count."""
    cdef uint32_t thr = randk_threshold(len(x), k)
    cdef floating dummy
    cdef floating *vp = &vals[0] if len(vals) else &dummy
    cdef size_t n = len(x), c = 0
    if n == 0:
        return 0
    with nogil:
        if floating is float:
            c = ck_randk_f32(&x[0], n, thr, seed, vp, len(vals), zero)
        else:
            c = ck_randk_f64(&x[0], n, thr, seed, vp, len(vals), zero)
    return c


def randk_scatter_add(floating[::1] dst, Py_ssize_t k, uint64_t seed, const floating[::1] vals,
                      double scale=1.0):
    """dst[i] += vals[j] * scale for the j-th index random-k keeps (no index array needed)."""
    cdef uint32_t thr = randk_threshold(len(dst), k)
    cdef size_t n = len(dst), m = len(vals)
    if n == 0 or m == 0:
        return
    with nogil:
        if floating is float:
            ck_randk_scatter_add_f32(&dst[0], n, thr, seed, &vals[0], m, <float>scale)
        else:
            ck_randk_scatter_add_f64(&dst[0], n, thr, seed, &vals[0], m, scale)


def scatter_add(floating[::1] dst, const int64_t[::1] idx, const floating[::1] vals,
                double scale=1.0):
    """dst[idx] += vals * scale (indices distinct); ValueError if an index is out of range."""
    cdef size_t m = len(idx), n = len(dst)
    cdef int rc = 0
    cdef floating dummy
    cdef floating *d = &dst[0] if n else &dummy
    if len(vals) != len(idx):
        raise ValueError(f"vals has {len(vals)} elements, idx {len(idx)}")
    if m == 0:
        return
    with nogil:
        if floating is float:
            rc = ck_scatter_add_f32(d, n, &idx[0], &vals[0], m, <float>scale)
        else:
            rc = ck_scatter_add_f64(d, n, &idx[0], &vals[0], m, scale)
    if rc:
        raise ValueError(f"scatter_add: an index is outside 0..{len(dst) - 1}")
