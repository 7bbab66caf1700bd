"""NumPy twin of collectives._compress: same signatures, same numbers (COLLECTIVES_PUREPYTHON=1).

Each function is the vectorised NumPy statement of the definition in csrc/quantize.c and
csrc/sparsify.c, including the counter-based random stream of csrc/rng.h, so the stochastic
kernels draw the same uniforms and produce the same bits as the native ones.
"""
import numpy as np

from ._payload import check_add, check_bucketed, check_fp16, check_sparse, randk_threshold

_U24 = 2.0**-24
LANES = 32  # interleaved accumulators of the bucket sums (csrc/quantize.c)


def _mix32(x):
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def rng_bits(seed, first, m):
    """The 32 random bits of elements first .. first+m-1 of the stream ``seed`` (csrc/rng.h)."""
    seed = int(seed)
    x = (np.arange(first, first + m, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    x ^= np.uint32(seed & 0xFFFFFFFF)
    x = _mix32(x)
    x ^= np.uint32(seed >> 32)
    return _mix32(x)


def rng_uniform(seed, first, m, dtype):
    """Uniforms in [0, 1) on a 2^-24 grid for elements first .. first+m-1."""
    return (rng_bits(seed, first, m) >> np.uint32(8)).astype(dtype) * dtype.type(_U24)


def _buckets(n, bucket):
    starts = np.arange(0, n, bucket)
    return starts, np.minimum(bucket, n - starts)


def _source(x, residual):
    """v = x + residual, kept in residual when error feedback is on."""
    if residual is None:
        return np.asarray(x)
    residual += x
    return residual


def _lanesum(v, bucket, square):
    """Per-bucket sums in csrc/quantize.c's order (LANES lanes, then halves): v^2 in double
    (square), or |v| in v's own type."""
    n = len(v)
    starts, counts = _buckets(n, bucket)
    width = -(-bucket // LANES) * LANES
    w = v.astype(np.float64) if square else v
    w = w * w if square else np.abs(w)
    g = np.arange(n)
    padded = np.zeros(len(starts) * width, w.dtype)
    padded[(g // bucket) * width + g % bucket] = w
    lanes = np.cumsum(padded.reshape(len(starts), width // LANES, LANES), axis=1)[:, -1, :]
    while lanes.shape[1] > 1:
        half = lanes.shape[1] // 2
        lanes = lanes[:, :half] + lanes[:, half:]
    return lanes[:, 0], counts


def _store(dst, values, accumulate):
    if accumulate:
        dst += values
    else:
        dst[...] = values


def fp16_compress(x, scale, h, residual=None):
    """h = float16(v * scale) with v = x (+ residual); True when some h overflowed to inf/nan."""
    check_fp16(x, scale, h, residual)
    x = np.asarray(x)
    t = x.dtype.type
    v = _source(x, residual)
    with np.errstate(over="ignore", invalid="ignore"):
        h[...] = (v * t(scale)).astype(np.float16)
        if residual is not None:
            residual -= h.astype(t) * (t(1) / t(scale))
    return bool(len(h)) and not np.isfinite(h).all()


def fp16_decompress(h, scale, out):
    """out = float(h) * (1 / scale)."""
    _fp16_unpack(h, scale, out, False)


def fp16_decompress_add(h, scale, dst):
    """dst += float(h) * (1 / scale)."""
    _fp16_unpack(h, scale, dst, True)


def _fp16_unpack(h, scale, out, accumulate):
    if not isinstance(h, np.ndarray) or h.dtype != np.float16:
        raise TypeError("h must be a float16 ndarray")
    if len(h) != len(out):
        raise ValueError(f"h has {len(h)} elements, out {len(out)}")
    t = out.dtype.type
    _store(out, h.astype(t) * (t(1) / t(scale)), accumulate)


def _bucket_scale(amax, top, t):
    """inv = top / amax and the stored amax, both 0 where amax is 0 or the quotient overflows."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = t(top) / amax
    bad = (amax == 0) | np.isinf(inv)
    return np.where(bad, t(0), inv).astype(amax.dtype), np.where(bad, t(0), amax).astype(amax.dtype)


def int8_compress(x, bucket, q, scales, stochastic=False, seed=0, residual=None):
    """Per bucket: scale = max|v| / 127, q = round(v / scale), rounding to nearest or stochastic."""
    x = np.asarray(x)
    n = len(x)
    check_bucketed("int8", n, bucket, q, scales, residual, seed_used=stochastic)
    if n == 0:
        return
    t = x.dtype.type
    v = _source(x, residual)
    starts, counts = _buckets(n, bucket)
    inv, amax = _bucket_scale(np.maximum.reduceat(np.abs(v), starts), 127, t)
    scales[...] = amax / t(127)
    with np.errstate(invalid="ignore"):  # non-finite v, as in C: no warning
        y = v * np.repeat(inv, counts)
        if stochastic:
            y += rng_uniform(seed, 0, n, x.dtype)
            np.floor(y, out=y)
        else:
            np.rint(y, out=y)
        y[np.isnan(y)] = -127  # a non-finite v: x86's float-to-int conversion gives INT_MIN
        np.clip(y, -127, 127, out=y)
        q[...] = y.astype(np.int8)
        if residual is not None:
            residual -= q.astype(t) * np.repeat(scales, counts)


def _int8_unpack(q, scales, bucket, out, accumulate, kind="int8", levels=None):
    out = np.asarray(out)
    check_bucketed(kind, len(out), bucket, q, scales, levels=levels)
    if len(out) == 0:
        return
    _, counts = _buckets(len(out), bucket)
    t = out.dtype.type
    step = np.asarray(scales) if levels is None else np.asarray(scales) / t(levels)
    _store(out, np.asarray(q).astype(t) * np.repeat(step, counts), accumulate)


def int8_decompress(q, scales, bucket, out):
    """out = q * scale of its bucket."""
    _int8_unpack(q, scales, bucket, out, False)


def int8_decompress_add(q, scales, bucket, dst):
    """dst += q * scale of its bucket."""
    _int8_unpack(q, scales, bucket, dst, True)


def qsgd_compress(x, bucket, levels, seed, q, norms, residual=None):
    """Per bucket: norm = ||v||_2, q = sign(v) * stochastic round of |v| / norm * levels."""
    x = np.asarray(x)
    n = len(x)
    check_bucketed("qsgd", n, bucket, q, norms, residual, levels=levels, seed_used=True)
    if n == 0:
        return
    t = x.dtype.type
    v = _source(x, residual)
    total, counts = _lanesum(v, bucket, True)
    inv, norm = _bucket_scale(np.sqrt(total).astype(x.dtype), levels, t)
    norms[...] = norm
    y = np.abs(v) * np.repeat(inv, counts)
    y += rng_uniform(seed, 0, n, x.dtype)
    np.floor(y, out=y)
    np.minimum(y, t(levels), out=y)
    q[...] = np.where(v < 0, -y, y).astype(np.int8)
    if residual is not None:
        residual -= q.astype(t) * np.repeat(norm / t(levels), counts)


def qsgd_decompress(q, norms, bucket, levels, out):
    """out = q * norm / levels."""
    _int8_unpack(q, norms, bucket, out, False, "qsgd", levels)


def qsgd_decompress_add(q, norms, bucket, levels, dst):
    """dst += q * norm / levels."""
    _int8_unpack(q, norms, bucket, dst, True, "qsgd", levels)


def sign_compress(x, bucket, bits, mags, residual=None):
    """Per bucket: mag = mean |v|; bit i = (v_i >= 0), 8 per byte, little-endian bit order."""
    x = np.asarray(x)
    n = len(x)
    check_bucketed("sign", n, bucket, bits, mags, residual)
    if n == 0:
        return
    v = _source(x, residual)
    total, counts = _lanesum(v, bucket, False)
    mags[...] = (total.astype(np.float64) / counts).astype(x.dtype)
    bits[...] = np.packbits(v >= 0, bitorder="little")
    if residual is not None:
        residual -= _signs(bits, mags, bucket, n)


def _signs(bits, mags, bucket, n):
    _, counts = _buckets(n, bucket)
    m = np.repeat(np.asarray(mags), counts)
    return np.where(np.unpackbits(np.asarray(bits), count=n, bitorder="little").astype(bool), m, -m)


def sign_decompress(bits, mags, bucket, out):
    """out = +mag where the bit is set, else -mag."""
    check_bucketed("sign", len(out), bucket, bits, mags)
    if len(out):
        out[...] = _signs(bits, mags, bucket, len(out))


def sign_decompress_add(bits, mags, bucket, dst):
    """dst += +mag where the bit is set, else -mag."""
    check_bucketed("sign", len(dst), bucket, bits, mags)
    if len(dst):
        dst += _signs(bits, mags, bucket, len(dst))


def _topk_indices(x, k):
    n = len(x)
    if k >= n:
        return np.arange(n)
    a = np.abs(x)
    t = np.partition(a, n - k)[n - k]
    above = np.flatnonzero(a > t)
    ties = np.flatnonzero(a == t)[:k - len(above)]
    return np.union1d(above, ties)


def topk(x, k, idx, vals, zero=False, add=None):
    """The min(k, n) largest |x| into (idx ascending, vals); ties to lower indices; zero them if asked.

    A given ``add`` is added into x first (in the same pass) and the selection is of the sum.
    """
    check_sparse(x, k, idx, vals, add=add)
    if add is not None:
        x += add
    if len(idx) == 0:
        return
    sel = _topk_indices(x, k)
    idx[...] = sel
    vals[...] = x[sel]
    if zero:
        x[sel] = 0


def approx_topk(x, k, nsample, seed, idx, vals, zero=False, add=None):
    """At most k large |x| above a threshold sampled from nsample elements; returns the count."""
    check_sparse(x, k, idx, vals, exact=False, add=add)
    if nsample < 0:
        raise ValueError(f"approx_topk: nsample must be >= 0, got {nsample}")
    if add is not None:
        x += add
    n = len(x)
    if k == 0 or n == 0:
        return 0
    if nsample == 0 or k >= n:
        kk = min(k, n)
        topk(x, kk, idx[:kk], vals[:kk], zero)
        return kk
    pos = rng_bits(seed, 0, nsample).astype(np.int64) % n
    sample = np.abs(x[pos])
    r = -(-k * nsample // n)
    thr = np.partition(sample, nsample - r)[nsample - r]
    sel = np.flatnonzero(np.abs(x) >= thr)
    if len(sel) > k:
        sel = sel[_topk_indices(x[sel], k)]
    c = len(sel)
    idx[:c] = sel
    vals[:c] = x[sel]
    if zero:
        x[sel] = 0
    return c


def threshold_count(x, thr, add=None):
    """Number of elements with |x| >= thr; a given ``add`` is added into x first, in the same pass."""
    x = np.asarray(x)
    check_add(x, add)
    if add is not None:
        x += add
    return int(np.count_nonzero(np.abs(x) >= x.dtype.type(thr)))


def threshold(x, thr, idx, vals, zero=False, add=None):
    """Elements with |x| >= thr into (idx, vals), up to their length; returns how many qualify.

    A given ``add`` is added into x first (in the same pass) and the selection is of the sum.
    """
    check_sparse(x, len(idx), idx, vals, exact=False, add=add)
    if add is not None:
        x += add
    sel = np.flatnonzero(np.abs(x) >= x.dtype.type(thr))
    kept = sel[:len(idx)]
    idx[:len(kept)] = kept
    vals[:len(kept)] = x[kept]
    if zero:
        x[kept] = 0
    return len(sel)


def _randk_select(n, k, seed):
    return np.flatnonzero(rng_bits(seed, 0, n) < np.uint32(randk_threshold(n, k)))


def randk_indices(n, k, seed, idx):
    """Indices random-k keeps (each with probability k/n, from seed), up to len(idx); returns the count."""
    sel = _randk_select(n, k, seed)
    idx[:min(len(sel), len(idx))] = sel[:len(idx)]
    return len(sel)


def randk(x, k, seed, vals, zero=False):
    """Values random-k keeps, in index order, up to len(vals); returns the count."""
    sel = _randk_select(len(x), k, seed)
    kept = sel[:len(vals)]
    vals[:len(kept)] = x[kept]
    if zero:
        x[kept] = 0
    return len(sel)


def randk_scatter_add(dst, k, seed, vals, scale=1.0):
    """dst[i] += vals[j] * scale for the j-th index random-k keeps (no index array needed)."""
    sel = _randk_select(len(dst), k, seed)[:len(vals)]
    dst[sel] += np.asarray(vals)[:len(sel)] * dst.dtype.type(scale)


def scatter_add(dst, idx, vals, scale=1.0):
    """dst[idx] += vals * scale (indices distinct); ValueError if an index is out of range."""
    idx = np.asarray(idx)
    if len(vals) != len(idx):
        raise ValueError(f"vals has {len(vals)} elements, idx {len(idx)}")
    if len(idx) and (idx.min() < 0 or idx.max() >= len(dst)):
        raise ValueError(f"scatter_add: an index is outside 0..{len(dst) - 1}")
    np.add.at(dst, idx, np.asarray(vals) * dst.dtype.type(scale))
