# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Thin wrappers over csrc/quantize.c and csrc/sparsify.c: gradient compression kernels.

Every function takes contiguous float32 or float64 arrays: a plain ``def`` picks the
float or double instance of one fused ``cdef`` wrapper from x's dtype (Cython's own
dispatch of fused ``def`` functions costs microseconds a call), checks sizes (in C on
the hot paths, with collectives._payload raising the error), and runs the C kernel without
the GIL.  The NumPy
twin, collectives._compress_numpy, has the same signatures and gives the same numbers.
"""
import numpy as np
from cython cimport floating
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from collectives._csrc cimport *
from collectives._payload import (MAX_COUNTER, check_add, check_bucketed, check_fp16,
                                  check_sparse, randk_threshold)


cdef int _double(x, str name) except -1:
    """0 for float32, 1 for float64 arrays; TypeError otherwise."""
    cdef str c = x.dtype.char if isinstance(x, np.ndarray) else ""
    if c == "f":
        return 0
    if c == "d":
        return 1
    raise TypeError(f"{name}: expected a float32 or float64 array, got {getattr(x, 'dtype', type(x))}")


cdef inline bint _bucketed_ok(Py_ssize_t n, Py_ssize_t bucket, Py_ssize_t nq, Py_ssize_t ns,
                              residual, bint sign):
    """The size checks of _payload.check_bucketed, in C; that function raises the error."""
    if bucket < 1 or (sign and bucket % 8) or ns != (n + bucket - 1) // bucket:
        return False
    if nq != ((n + 7) // 8 if sign else n):
        return False
    return residual is None or len(residual) == n


cdef uint16_t[::1] _half_bits(h):
    if not isinstance(h, np.ndarray) or h.dtype != np.float16:
        raise TypeError("h must be a float16 ndarray")
    return h.view(np.uint16)


cdef inline floating *_ptr(floating[::1] a):
    """Address of a's data, or NULL for None or an empty array."""
    return &a[0] if a is not None and a.shape[0] else NULL


# ---- float16 -------------------------------------------------------------------------------

cdef int _fp16_pack(const floating[::1] x, double scale, uint16_t[::1] h,
                    floating[::1] residual) except -1:
    cdef floating *res = _ptr(residual)
    cdef size_t n = x.shape[0]
    cdef int over = 0
    if n:
        with nogil:
            if floating is float:
                over = ck_fp16_pack_f32(&x[0], n, <float>scale, &h[0], res)
            else:
                over = ck_fp16_pack_f64(&x[0], n, scale, &h[0], res)
    return over


def fp16_compress(x, double scale, h, residual=None):
    """h = float16(v * scale) with v = x (+ residual); True when some h overflowed to inf/nan."""
    check_fp16(x, scale, h, residual)
    if _double(x, "fp16_compress"):
        return bool(_fp16_pack[double](x, scale, _half_bits(h), residual))
    return bool(_fp16_pack[float](x, scale, _half_bits(h), residual))


cdef _fp16_unpack(uint16_t[::1] h, double scale, floating[::1] out, int accumulate):
    cdef size_t n = out.shape[0]
    if h.shape[0] != out.shape[0]:
        raise ValueError(f"h has {h.shape[0]} elements, out {out.shape[0]}")
    if n:
        with nogil:
            if floating is float:
                ck_fp16_unpack_f32(&h[0], n, <float>scale, &out[0], accumulate)
            else:
                ck_fp16_unpack_f64(&h[0], n, scale, &out[0], accumulate)


def fp16_decompress(h, double scale, out):
    """out = float(h) * (1 / scale)."""
    if _double(out, "fp16_decompress"):
        _fp16_unpack[double](_half_bits(h), scale, out, 0)
    else:
        _fp16_unpack[float](_half_bits(h), scale, out, 0)


def fp16_decompress_add(h, double scale, dst):
    """dst += float(h) * (1 / scale)."""
    if _double(dst, "fp16_decompress_add"):
        _fp16_unpack[double](_half_bits(h), scale, dst, 1)
    else:
        _fp16_unpack[float](_half_bits(h), scale, dst, 1)


# ---- int8 and QSGD (one int8 per element, one scale per bucket) -----------------------------

cdef _q8_pack(const floating[::1] x, size_t bucket, int levels, bint stochastic, uint64_t seed,
              int8_t[::1] q, floating[::1] scales, floating[::1] residual):
    """levels == 0: int8 linear quantization; else QSGD with that many levels."""
    cdef floating *res = _ptr(residual)
    cdef size_t n = x.shape[0]
    if n == 0:
        return
    with nogil:
        if floating is float:
            if levels:
                ck_qsgd_pack_f32(&x[0], n, bucket, levels, seed, &q[0], &scales[0], res)
            else:
                ck_int8_pack_f32(&x[0], n, bucket, stochastic, seed, &q[0], &scales[0], res)
        else:
            if levels:
                ck_qsgd_pack_f64(&x[0], n, bucket, levels, seed, &q[0], &scales[0], res)
            else:
                ck_int8_pack_f64(&x[0], n, bucket, stochastic, seed, &q[0], &scales[0], res)


cdef _q8_unpack(const int8_t[::1] q, const floating[::1] scales, size_t bucket, int levels,
                floating[::1] out, int accumulate):
    cdef size_t n = out.shape[0]
    if n == 0:
        return
    with nogil:
        if floating is float:
            if levels:
                ck_qsgd_unpack_f32(&q[0], &scales[0], n, bucket, levels, &out[0], accumulate)
            else:
                ck_int8_unpack_f32(&q[0], &scales[0], n, bucket, &out[0], accumulate)
        else:
            if levels:
                ck_qsgd_unpack_f64(&q[0], &scales[0], n, bucket, levels, &out[0], accumulate)
            else:
                ck_int8_unpack_f64(&q[0], &scales[0], n, bucket, &out[0], accumulate)


def int8_compress(x, Py_ssize_t bucket, q, scales, bint stochastic=False, uint64_t seed=0,
                  residual=None):
    """Per bucket: scale = ``max|v| / 127``, q = round(v / scale), rounding to nearest or stochastic."""
    if not _bucketed_ok(len(x), bucket, len(q), len(scales), residual, False) or (
            stochastic and len(x) > MAX_COUNTER):
        check_bucketed("int8", len(x), bucket, q, scales, residual, seed_used=stochastic)
    if _double(x, "int8_compress"):
        _q8_pack[double](x, bucket, 0, stochastic, seed, q, scales, residual)
    else:
        _q8_pack[float](x, bucket, 0, stochastic, seed, q, scales, residual)


cdef _int8_decode(q, scales, Py_ssize_t bucket, out, int levels, int accumulate, str name):
    if not _bucketed_ok(len(out), bucket, len(q), len(scales), None, False) or levels < 0 or levels > 127:
        check_bucketed(name.split("_")[0], len(out), bucket, q, scales, levels=levels or None)
    if _double(out, name):
        _q8_unpack[double](q, scales, bucket, levels, out, accumulate)
    else:
        _q8_unpack[float](q, scales, bucket, levels, out, accumulate)


def int8_decompress(q, scales, Py_ssize_t bucket, out):
    """out = q * scale of its bucket."""
    _int8_decode(q, scales, bucket, out, 0, 0, "int8_decompress")


def int8_decompress_add(q, scales, Py_ssize_t bucket, dst):
    """dst += q * scale of its bucket."""
    _int8_decode(q, scales, bucket, dst, 0, 1, "int8_decompress_add")


def qsgd_compress(x, Py_ssize_t bucket, int levels, uint64_t seed, q, norms, residual=None):
    """Per bucket: norm = ``||v||_2``, q = sign(v) * stochastic round of ``|v| / norm`` * levels."""
    if not _bucketed_ok(len(x), bucket, len(q), len(norms), residual, False) or (
            levels < 1 or levels > 127 or len(x) > MAX_COUNTER):
        check_bucketed("qsgd", len(x), bucket, q, norms, residual, levels=levels, seed_used=True)
    if _double(x, "qsgd_compress"):
        _q8_pack[double](x, bucket, levels, True, seed, q, norms, residual)
    else:
        _q8_pack[float](x, bucket, levels, True, seed, q, norms, residual)


def qsgd_decompress(q, norms, Py_ssize_t bucket, int levels, out):
    """out = q * norm / levels."""
    _int8_decode(q, norms, bucket, out, levels, 0, "qsgd_decompress")


def qsgd_decompress_add(q, norms, Py_ssize_t bucket, int levels, dst):
    """dst += q * norm / levels."""
    _int8_decode(q, norms, bucket, dst, levels, 1, "qsgd_decompress_add")


# ---- 1-bit sign ------------------------------------------------------------------------------

cdef _sign_pack(const floating[::1] x, size_t bucket, uint8_t[::1] bits, floating[::1] mags,
                floating[::1] residual):
    cdef floating *res = _ptr(residual)
    cdef size_t n = x.shape[0]
    if n:
        with nogil:
            if floating is float:
                ck_sign_pack_f32(&x[0], n, bucket, &bits[0], &mags[0], res)
            else:
                ck_sign_pack_f64(&x[0], n, bucket, &bits[0], &mags[0], res)


cdef _sign_unpack(const uint8_t[::1] bits, const floating[::1] mags, size_t bucket,
                  floating[::1] out, int accumulate):
    cdef size_t n = out.shape[0]
    if n:
        with nogil:
            if floating is float:
                ck_sign_unpack_f32(&bits[0], &mags[0], n, bucket, &out[0], accumulate)
            else:
                ck_sign_unpack_f64(&bits[0], &mags[0], n, bucket, &out[0], accumulate)


def sign_compress(x, Py_ssize_t bucket, bits, mags, residual=None):
    """Per bucket: mag = mean ``|v|``; bit i = (v_i >= 0), 8 per byte, little-endian bit order."""
    if not _bucketed_ok(len(x), bucket, len(bits), len(mags), residual, True):
        check_bucketed("sign", len(x), bucket, bits, mags, residual)
    if _double(x, "sign_compress"):
        _sign_pack[double](x, bucket, bits, mags, residual)
    else:
        _sign_pack[float](x, bucket, bits, mags, residual)


cdef _sign_decode(bits, mags, Py_ssize_t bucket, out, int accumulate, str name):
    if not _bucketed_ok(len(out), bucket, len(bits), len(mags), None, True):
        check_bucketed("sign", len(out), bucket, bits, mags)
    if _double(out, name):
        _sign_unpack[double](bits, mags, bucket, out, accumulate)
    else:
        _sign_unpack[float](bits, mags, bucket, out, accumulate)


def sign_decompress(bits, mags, Py_ssize_t bucket, out):
    """out = +mag where the bit is set, else -mag."""
    _sign_decode(bits, mags, bucket, out, 0, "sign_decompress")


def sign_decompress_add(bits, mags, Py_ssize_t bucket, dst):
    """dst += +mag where the bit is set, else -mag."""
    _sign_decode(bits, mags, bucket, dst, 1, "sign_decompress_add")


# ---- sparsifiers -----------------------------------------------------------------------------

cdef int64_t _topk(floating[::1] x, const floating[::1] add, size_t k, size_t nsample,
                   uint64_t seed, bint approx, int64_t[::1] idx, floating[::1] vals,
                   bint zero) except -2:
    cdef size_t n = x.shape[0]
    cdef const floating *ap = &add[0] if add is not None and n else NULL
    cdef int64_t *ip = &idx[0] if idx.shape[0] else NULL
    cdef floating *vp = _ptr(vals)
    cdef int64_t c
    if n == 0:
        return 0
    with nogil:
        if floating is float:
            c = (ck_approx_topk_f32(&x[0], ap, n, k, nsample, seed, ip, vp, zero) if approx
                 else ck_topk_f32(&x[0], ap, n, k, ip, vp, zero))
        else:
            c = (ck_approx_topk_f64(&x[0], ap, n, k, nsample, seed, ip, vp, zero) if approx
                 else ck_topk_f64(&x[0], ap, n, k, ip, vp, zero))
    if c < 0:
        raise MemoryError("top-k: out of memory")
    return c


def topk(x, Py_ssize_t k, idx, vals, bint zero=False, add=None):
    """The min(k, n) largest ``|x|`` into (idx ascending, vals); ties to lower indices; zero them if asked.

    A given ``add`` is added into x first (in the same pass) and the selection is of the sum.
    """
    check_sparse(x, k, idx, vals, add=add)
    if _double(x, "topk"):
        _topk[double](x, add, k, 0, 0, False, idx, vals, zero)
    else:
        _topk[float](x, add, k, 0, 0, False, idx, vals, zero)


def approx_topk(x, Py_ssize_t k, Py_ssize_t nsample, uint64_t seed, idx, vals, bint zero=False,
                add=None):
    """At most k large ``|x|`` above a threshold sampled from nsample elements; returns the count."""
    check_sparse(x, k, idx, vals, exact=False, add=add)
    if nsample < 0:
        raise ValueError(f"approx_topk: nsample must be >= 0, got {nsample}")
    if _double(x, "approx_topk"):
        return _topk[double](x, add, k, nsample, seed, True, idx, vals, zero)
    return _topk[float](x, add, k, nsample, seed, True, idx, vals, zero)


cdef size_t _threshold(floating[::1] x, const floating[::1] add, double thr, int64_t[::1] idx,
                       floating[::1] vals, bint count_only, bint zero):
    cdef size_t n = x.shape[0], cap = idx.shape[0] if idx is not None else 0, c = 0
    cdef const floating *ap = &add[0] if add is not None and n else NULL
    cdef int64_t *ip = &idx[0] if cap else NULL
    cdef floating *vp = _ptr(vals)
    if n == 0:
        return 0
    with nogil:
        if floating is float:
            c = (ck_threshold_count_f32(&x[0], ap, n, <float>thr) if count_only
                 else ck_threshold_f32(&x[0], ap, n, <float>thr, ip, vp, cap, zero))
        else:
            c = (ck_threshold_count_f64(&x[0], ap, n, thr) if count_only
                 else ck_threshold_f64(&x[0], ap, n, thr, ip, vp, cap, zero))
    return c


def threshold_count(x, double thr, add=None):
    """Number of elements with ``|x| >= thr``; a given ``add`` is added into x first, in the same pass."""
    check_add(x, add)
    if _double(x, "threshold_count"):
        return _threshold[double](x, add, thr, None, None, True, False)
    return _threshold[float](x, add, thr, None, None, True, False)


def threshold(x, double thr, idx, vals, bint zero=False, add=None):
    """Elements with ``|x| >= thr`` into (idx, vals), up to their length; returns how many qualify.

    A given ``add`` is added into x first (in the same pass) and the selection is of the sum.
    """
    check_sparse(x, len(idx), idx, vals, exact=False, add=add)
    if _double(x, "threshold"):
        return _threshold[double](x, add, thr, idx, vals, False, zero)
    return _threshold[float](x, add, thr, idx, vals, False, zero)


def randk_indices(Py_ssize_t n, Py_ssize_t k, uint64_t seed, int64_t[::1] idx):
    """Indices random-k keeps (each with probability k/n, from seed), up to len(idx); returns the count."""
    cdef uint32_t thr = randk_threshold(n, k)
    cdef size_t cap = idx.shape[0], c
    cdef int64_t *ip = &idx[0] if cap else NULL
    with nogil:
        c = ck_randk_indices(n, thr, seed, ip, cap)
    return c


cdef size_t _randk(floating[::1] x, size_t k, uint64_t seed, floating[::1] vals, bint zero):
    cdef uint32_t thr = randk_threshold(x.shape[0], k)
    cdef size_t n = x.shape[0], c = 0
    cdef floating *vp = _ptr(vals)
    if n:
        with nogil:
            if floating is float:
                c = ck_randk_f32(&x[0], n, thr, seed, vp, vals.shape[0], zero)
            else:
                c = ck_randk_f64(&x[0], n, thr, seed, vp, vals.shape[0], zero)
    return c


def randk(x, Py_ssize_t k, uint64_t seed, vals, bint zero=False):
    """Values random-k keeps, in index order, up to len(vals); returns the count."""
    if _double(x, "randk"):
        return _randk[double](x, k, seed, vals, zero)
    return _randk[float](x, k, seed, vals, zero)


cdef _scatter(floating[::1] dst, const int64_t[::1] idx, const floating[::1] vals, size_t k,
              uint64_t seed, double scale, bint shared):
    cdef size_t n = dst.shape[0], m = vals.shape[0]
    cdef floating *d = _ptr(dst)
    cdef uint32_t thr = randk_threshold(n, k) if shared else 0
    cdef int rc = 0
    if m == 0:
        return
    with nogil:
        if floating is float:
            if shared:
                ck_randk_scatter_add_f32(d, n, thr, seed, &vals[0], m, <float>scale)
            else:
                rc = ck_scatter_add_f32(d, n, &idx[0], &vals[0], m, <float>scale)
        else:
            if shared:
                ck_randk_scatter_add_f64(d, n, thr, seed, &vals[0], m, scale)
            else:
                rc = ck_scatter_add_f64(d, n, &idx[0], &vals[0], m, scale)
    if rc:
        raise ValueError(f"scatter_add: an index is outside 0..{n - 1}")


def randk_scatter_add(dst, Py_ssize_t k, uint64_t seed, vals, double scale=1.0):
    """dst[i] += vals[j] * scale for the j-th index random-k keeps (no index array needed)."""
    if _double(dst, "randk_scatter_add"):
        _scatter[double](dst, None, vals, k, seed, scale, True)
    else:
        _scatter[float](dst, None, vals, k, seed, scale, True)


def scatter_add(dst, idx, vals, double scale=1.0):
    """dst[idx] += vals * scale (indices distinct); ValueError if an index is out of range."""
    if len(vals) != len(idx):
        raise ValueError(f"vals has {len(vals)} elements, idx {len(idx)}")
    if _double(dst, "scatter_add"):
        _scatter[double](dst, idx, vals, 0, 0, scale, False)
    else:
        _scatter[float](dst, idx, vals, 0, 0, scale, False)
