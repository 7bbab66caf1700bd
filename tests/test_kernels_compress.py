"""Compression kernels: native against the NumPy twin (bit for bit), and both against the definitions.

Serial (tests/conftest.py): a test runs once, on one rank of the launch.
Tolerances of the statistical checks are derived in their docstrings.
"""
import numpy as np
import pytest

from collectives import kernels
from collectives._compress_numpy import rng_bits, rng_uniform

pytestmark = pytest.mark.serial

NATIVE = kernels.native
IMPLS = [kernels.numpy] + ([NATIVE] if NATIVE is not None else [])
FLOATS = [np.float32, np.float64]
BUCKET = 64
LENGTHS = [0, 1, 7, BUCKET - 1, BUCKET, BUCKET + 1, 1001, 20_011]


def data(n, dtype, seed=0):
    """Gradient-like values: mostly small, some large, with exact zeros and repeated values."""
    rng = np.random.default_rng([seed, n])
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))).astype(dtype)
    x[rng.random(n) < 0.05] = 0
    return x


def nb(n, bucket=BUCKET):
    return -(-n // bucket)


def run_both(fn_name, make_args):
    """Call fn in every implementation on fresh copies of the arguments; return their arguments."""
    outs = []
    for impl in IMPLS:
        args = make_args()
        ret = getattr(impl, fn_name)(*args)
        outs.append((ret, args))
    return outs


def assert_same(outs):
    """Native and NumPy outputs are bit-identical (returns and every mutated argument)."""
    (r0, a0), *rest = outs
    for r, a in rest:
        assert r == r0
        for u, v in zip(a0, a):
            if isinstance(u, np.ndarray):
                np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8))


def bits_equal(a, b):
    """a and b hold the same bits (so NaNs, -0.0 and subnormals count too)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]
    bad = np.flatnonzero(a.view(u) != b.view(u))
    assert not len(bad), f"{len(bad)} differ, first at {bad[0]}: {a[bad[0]]!r} != {b[bad[0]]!r}"


def check_fp16_exact(x, scale, res0=None):
    """Every implementation gives NumPy's casts bit for bit: h = float16(v * scale) with
    v = x (+ res0), rounded once; the overflow flag; the residual v - h / scale; and
    decompress (and add) of h.  Returns h."""
    t, n = x.dtype.type, len(x)
    v = x if res0 is None else x + res0
    with np.errstate(over="ignore", invalid="ignore"):
        want = (v * t(scale)).astype(np.float16)
        back = want.astype(t) * (t(1) / t(scale))
        left = v - back
    for impl in IMPLS:
        h, res = np.empty(n, np.float16), None if res0 is None else res0.copy()
        assert impl.fp16_compress(x, scale, h, res) == (not np.isfinite(want).all())
        bits_equal(h, want)
        if res0 is not None:
            bits_equal(res, left)
        out = np.full(n, 3, t)
        impl.fp16_decompress(want, scale, out)
        bits_equal(out, back)
        acc = np.ones(n, t)
        impl.fp16_decompress_add(want, scale, acc)
        bits_equal(acc, 1 + back)
    return want


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("ef", [False, True])
def test_fp16(dtype, n, ef):
    x = data(n, dtype)
    scale = 0.5
    res0 = data(n, dtype, 1) * 1e-3 if ef else None
    h = check_fp16_exact(x, scale, res0)
    v = x if res0 is None else x + res0
    fin = np.isfinite(h)
    err = np.abs(h[fin].astype(np.float64) / scale - v[fin])
    # Round to nearest half: relative error 2^-11 for normals, absolute 2^-25 / scale below.
    assert np.all(err <= np.abs(v[fin]) * 2.0**-11 + 2.0**-25 / scale)


# Products v * scale where rounding twice, through float to nearest, would give another half
# than rounding once (marked *), next to the ties and limits they sit beside.
_E = 2.0**-40
FP16_HARD = [
    1 + 2**-11 + _E,  # * 1 + 2^-10 (twice: 1)
    1 + 2**-11, 1 + 2**-11 - _E,
    1 + 3 * 2**-11 - _E,  # * 1 + 2^-10 (twice: 1 + 2^-9)
    1 + 3 * 2**-11,
    65504.0, 65519.99,
    65520 - 2**-37,  # * 65504 (twice: inf)
    65520.0, 65536.0, 3.5e38, 1e300, np.inf, np.nan, 0.0,
    2.0**-25 * (1 + _E),  # * 2^-24, the least subnormal half (twice: 0)
    2.0**-25, 2.0**-25 * (1 - _E),
    2.0**-24 * (3.5 + _E), 2.0**-24 * 3.5, 2.0**-24 * (2.5 + _E),  # * subnormals
    2.0**-24 * (1023.5 + _E), 2.0**-14 - 2.0**-25, 2.0**-14 * (1 + 2**-11 + _E),
    1e-300, 5e-324, 2.0**-149 * 1.5, 2.0**-126,
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale", [1.0, 2.0**-7, 3.0])
@pytest.mark.parametrize("ef", [False, True])
def test_fp16_hard_values(dtype, scale, ef):
    """The hard products and their negatives, each at every lane of an 8-wide group (nine in a
    row), filling one group by itself and alone (the scalar tail), are rounded once, as NumPy
    rounds, and raise the overflow flag exactly when the half is inf or NaN."""
    with np.errstate(over="ignore"):
        vals = (np.array(FP16_HARD + [-v for v in FP16_HARD]) / scale).astype(dtype)
    # -0.0 added to x leaves it as it is, bit for bit, so the products stay the hard ones.
    for x in [np.repeat(vals, 9)] + [np.full(m, v) for v in vals for m in (8, 1)]:
        check_fp16_exact(x, scale, np.full(len(x), -0.0, dtype) if ef else None)


def split(t):
    """x, r with x + r == t exactly: x is t with the low half of its significand cleared."""
    u = np.uint32 if t.dtype == np.float32 else np.uint64
    x = (t.view(u) & ~u((1 << (np.finfo(t.dtype).nmant // 2)) - 1)).view(t.dtype)
    return x, t - x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [8, 9, 15, 1003, 100_003])
@pytest.mark.parametrize("scale", [2.0**-7, 3.0])
@pytest.mark.parametrize("ef", [False, True])
def test_fp16_near_ties(dtype, n, scale, ef):
    """Random products on, or a hair (2^-14 to 2^-44 relative) off, the midpoint between two
    adjacent finite halves, normal and subnormal, are rounded once, as NumPy rounds; under
    error feedback x + residual gives the same values exactly."""
    rng = np.random.default_rng([n, int(ef)])
    lo = rng.integers(0, 0x7BFF, n).astype(np.uint16)
    mid = (lo.view(np.float16).astype(np.float64) + (lo + 1).view(np.float16)) / 2
    hair = rng.choice([-1, 0, 1], n) * np.exp2(-rng.integers(14, 45, n).astype(float))
    t = (mid * (1 + hair) * rng.choice([-1, 1], n) / scale).astype(dtype)
    if ef:
        x, r = split(t)
        assert np.array_equal(x + r, t)
        check_fp16_exact(x, scale, r)
    else:
        check_fp16_exact(t, scale)


def test_fp16_overflow_detected():
    for impl in IMPLS:
        x = np.array([1.0, 7e4, -2.0], np.float32)
        assert impl.fp16_compress(x, 1.0, np.empty(3, np.float16))
        assert not impl.fp16_compress(x, 0.5, np.empty(3, np.float16))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("ef", [False, True])
def test_int8(dtype, n, stochastic, ef):
    x = data(n, dtype)
    res0 = data(n, dtype, 1) * 0.1
    outs = run_both("int8_compress", lambda: (x, BUCKET, np.empty(n, np.int8),
                                              np.empty(nb(n), dtype), stochastic, 42,
                                              res0.copy() if ef else None))
    assert_same(outs)
    _, (_, _, q, scales, _, _, res) = outs[0]
    v = x + res0 if ef else x
    amax = np.array([np.abs(v[i:i + BUCKET]).max() for i in range(0, n, BUCKET)], dtype)
    np.testing.assert_array_equal(scales, amax / dtype(127))
    deq = q.astype(dtype) * np.repeat(scales, BUCKET)[:n]
    step = np.repeat(scales, BUCKET)[:n].astype(np.float64)
    # Error bound: half a step rounding to nearest, under one step stochastic (plus rounding).
    bound = (1.0 if stochastic else 0.5) * step * (1 + 1e-6) + 1e-30
    assert np.all(np.abs(deq.astype(np.float64) - v) <= bound)
    for impl in IMPLS:
        out = np.empty(n, dtype)
        impl.int8_decompress(q, scales, BUCKET, out)
        np.testing.assert_array_equal(out, deq)
        acc = np.full(n, 2, dtype)
        impl.int8_decompress_add(q, scales, BUCKET, acc)
        np.testing.assert_array_equal(acc, 2 + deq)
    if ef:
        np.testing.assert_array_equal(res, v - deq)


@pytest.mark.parametrize("bucket", [8, 16, 40, 512, 520])
@pytest.mark.parametrize("ef", [False, True])
def test_bucket_shapes(bucket, ef):
    """Buckets shorter than, not a multiple of, and longer than the 16- and 32-float SIMD groups
    of the hand-vectorised float paths, at lengths ending mid-group: int8 and sign agree with the
    twin bit for bit, and the sign magnitude (summed in float32 lanes, at most bucket / 32 + 5
    roundings of 2^-24 each plus the division's) is the mean |v|."""
    for n in (bucket * 3 + 5, bucket * 4, 1):
        x = data(n, np.float32, bucket)
        x[:3] = np.array([np.inf, -0.0, 1e-42], np.float32)[:n]
        res0 = data(n, np.float32, 7)
        int8 = run_both("int8_compress", lambda: (x, bucket, np.empty(n, np.int8),
                                                  np.empty(nb(n, bucket), np.float32), False, 0,
                                                  res0.copy() if ef else None))
        assert_same(int8)
        x[0] = 5.0
        sign = run_both("sign_compress", lambda: (x, bucket, np.empty(-(-n // 8), np.uint8),
                                                  np.empty(nb(n, bucket), np.float32),
                                                  res0.copy() if ef else None))
        assert_same(sign)
        _, (_, _, bits, mags, _) = sign[0]
        v = (x + res0 if ef else x).astype(np.float64)
        np.testing.assert_array_equal(bits, np.packbits(v >= 0, bitorder="little"))
        want = [np.abs(v[i:i + bucket]).mean() for i in range(0, n, bucket)]
        np.testing.assert_allclose(mags, want, rtol=(bucket / 32 + 6) * 2.0 ** -24)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("ef", [False, True])
def test_qsgd(dtype, n, ef):
    x = data(n, dtype)
    levels = 7
    outs = run_both("qsgd_compress", lambda: (x, BUCKET, levels, 9, np.empty(n, np.int8),
                                              np.empty(nb(n), dtype),
                                              np.zeros(n, dtype) if ef else None))
    assert_same(outs)
    _, (_, _, _, _, q, norms, _) = outs[0]
    want = [np.linalg.norm(x[i:i + BUCKET].astype(np.float64)) for i in range(0, n, BUCKET)]
    np.testing.assert_allclose(norms, want, rtol=1e-6)
    assert np.all(np.abs(q) <= levels)
    step = np.repeat(norms / dtype(levels), BUCKET)[:n].astype(np.float64)
    deq = np.empty(n, dtype)
    for impl in IMPLS:
        impl.qsgd_decompress(q, norms, BUCKET, levels, deq)
        assert np.all(np.abs(deq - x.astype(np.float64)) <= step * (1 + 1e-6))
        acc = np.ones(n, dtype)
        impl.qsgd_decompress_add(q, norms, BUCKET, levels, acc)
        np.testing.assert_array_equal(acc, 1 + deq)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("ef", [False, True])
def test_sign(dtype, n, ef):
    x = data(n, dtype)
    res0 = data(n, dtype, 3)
    outs = run_both("sign_compress", lambda: (x, BUCKET, np.empty(-(-n // 8), np.uint8),
                                              np.empty(nb(n), dtype),
                                              res0.copy() if ef else None))
    assert_same(outs)
    _, (_, _, bits, mags, res) = outs[0]
    v = x + res0 if ef else x
    np.testing.assert_array_equal(bits, np.packbits(v >= 0, bitorder="little"))
    want = [np.abs(v[i:i + BUCKET].astype(np.float64)).mean() for i in range(0, n, BUCKET)]
    np.testing.assert_allclose(mags, want, rtol=1e-6)
    for impl in IMPLS:
        out = np.empty(n, dtype)
        impl.sign_decompress(bits, mags, BUCKET, out)
        m = np.repeat(mags, BUCKET)[:n]
        np.testing.assert_array_equal(out, np.where(v >= 0, m, -m))
        acc = np.ones(n, dtype)
        impl.sign_decompress_add(bits, mags, BUCKET, acc)
        np.testing.assert_array_equal(acc, 1 + out)
        if ef:
            np.testing.assert_array_equal(res, v - out)


def test_sign_bucket_must_be_whole_bytes():
    for impl in IMPLS:
        with pytest.raises(ValueError, match="multiple of 8"):
            impl.sign_compress(np.ones(20, np.float32), 12, np.empty(3, np.uint8),
                               np.empty(2, np.float32))


@pytest.mark.parametrize("kind", ["int8", "qsgd"])
def test_stochastic_unbiased(kind):
    """Mean over S seeds of decompress(compress(x)) is within 5 sigma of x, elementwise.

    Each element's error is q*step - x with |error| < step and variance at most step^2 / 4,
    so the mean over S independent seeds has standard deviation at most step / (2 sqrt(S)).
    """
    n, S, levels = 2 * BUCKET + 5, 400, 3
    x = data(n, np.float64, 7)
    impl = IMPLS[-1]
    total = np.zeros(n)
    q, sc = np.empty(n, np.int8), np.empty(nb(n))
    for seed in range(S):
        if kind == "int8":
            impl.int8_compress(x, BUCKET, q, sc, True, seed)
            impl.int8_decompress_add(q, sc, BUCKET, total)
            step = np.repeat(sc, BUCKET)[:n]
        else:
            impl.qsgd_compress(x, BUCKET, levels, seed, q, sc)
            impl.qsgd_decompress_add(q, sc, BUCKET, levels, total)
            step = np.repeat(sc / levels, BUCKET)[:n]
    sigma = step / (2 * np.sqrt(S))
    assert np.all(np.abs(total / S - x) <= 5 * sigma + 1e-12)


def test_rng_reproducible_and_uniform():
    u = rng_uniform(5, 0, 100_000, np.dtype(np.float64))
    np.testing.assert_array_equal(u, rng_uniform(5, 0, 100_000, np.dtype(np.float64)))
    np.testing.assert_array_equal(u[500:600], rng_uniform(5, 500, 100, np.dtype(np.float64)))
    assert not np.array_equal(u, rng_uniform(6, 0, 100_000, np.dtype(np.float64)))
    # Mean of 1e5 uniforms: sd 1/sqrt(12e5) ~ 9.1e-4; 5 sd.
    assert abs(u.mean() - 0.5) < 5 * 9.2e-4
    assert 0 <= u.min() and u.max() < 1


def topk_definition(x, k):
    """Indices of the k largest |x|, ties broken toward lower indices, ascending."""
    order = np.lexsort((np.arange(len(x)), -np.abs(x)))
    return np.sort(order[:k])


def check_topk(x, k):
    """Both implementations select the definition's top k of x, and zero exactly those."""
    m = min(k, len(x))
    outs = run_both("topk", lambda: (x.copy(), k, np.empty(m, np.int64), np.empty(m, x.dtype), True))
    assert_same(outs)
    _, (xz, _, idx, vals, _) = outs[0]
    want = topk_definition(x, m)
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(vals, x[want])
    rest = x.copy()
    rest[want] = 0
    np.testing.assert_array_equal(xz, rest)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("frac", [0.0, 0.01, 0.3, 1.0])
def test_topk(dtype, n, frac):
    x = data(n, dtype)
    x[::5] = x[:1]   # many ties
    check_topk(x, int(round(frac * n)) if frac < 1 else n + 3)


# The native top-k estimates its threshold from 8192 elements at these positions when
# n >= 65536 and k <= n / 16 (csrc/sparsify.c); below, data that makes the estimate hold and
# data that makes it miss (too few survivors, or far too many), so both paths run.
TOPK_SAMPLE_SEED, TOPK_SAMPLE, BIG = 0x746F706B, 8192, 70_001


def sample_hit(x):
    """x with every sampled position made larger than all others: too few survive the estimate."""
    x = x.copy()
    pos = rng_bits(TOPK_SAMPLE_SEED, 0, TOPK_SAMPLE).astype(np.int64) % len(x)
    x[pos] = np.abs(x).max() * 2 + pos
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["gradient", "ties", "sample_hit", "all_equal", "zeros",
                                  "few_huge", "binary"])
@pytest.mark.parametrize("k", [1, 7, BIG // 100, BIG // 16, BIG // 16 + 1, BIG // 3, BIG - 1])
def test_topk_sampled_and_fallback(dtype, case, k):
    x = data(BIG, dtype, seed=1)
    if case == "ties":
        x[::3] = x[7]
    elif case == "sample_hit":
        x = sample_hit(x)
    elif case == "all_equal":
        x[:] = -2.5
    elif case == "zeros":
        x[:] = 0
        x[BIG // 2:: 997] = -0.0
    elif case == "few_huge":
        x[[5, 40_000, BIG - 1]] = [1e30, -1e30, 1e30]
    elif case == "binary":
        x = np.where(np.arange(BIG) % 101 == 0, x, x[0]).astype(dtype)
    check_topk(x, k)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 1001, 20_011, BIG])
@pytest.mark.parametrize("case", ["gradient", "ties", "all_equal"])
def test_approx_topk(dtype, n, case):
    """Survivors of the sampled threshold fewer than k, more, and far more (all tied)."""
    x = data(n, dtype)
    if case == "ties":
        x[::3] = 1e3
    elif case == "all_equal":
        x[:] = 1.5
    k = max(1, n // 100)
    outs = run_both("approx_topk", lambda: (x.copy(), k, 1000, 3, np.zeros(k, np.int64),
                                            np.zeros(k, dtype), True))
    assert_same(outs)
    c, (xz, _, _, _, idx, vals, _) = outs[0]
    assert 0 < c <= k
    idx, vals = idx[:c], vals[:c]
    assert np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(vals, x[idx])
    # Whatever the sampled threshold, the kept elements are the c largest magnitudes.
    np.testing.assert_array_equal(idx, topk_definition(x, c))
    rest = x.copy()
    rest[idx] = 0
    np.testing.assert_array_equal(xz, rest)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
def test_threshold(dtype, n):
    x = data(n, dtype)
    thr = 1.5
    want = np.flatnonzero(np.abs(x) >= thr)
    for impl in IMPLS:
        assert impl.threshold_count(x, thr) == len(want)
    cap = len(want) // 2
    outs = run_both("threshold", lambda: (x.copy(), thr, np.empty(cap, np.int64),
                                          np.empty(cap, dtype), True))
    assert_same(outs)
    c, (xz, _, idx, vals, _) = outs[0]
    assert c == len(want)
    np.testing.assert_array_equal(idx, want[:cap])
    np.testing.assert_array_equal(vals, x[want[:cap]])
    assert np.all(xz[want[:cap]] == 0) and np.all(xz[want[cap:]] == x[want[cap:]])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["gradient", "sample_hit"])
def test_sparsifiers_without_zero_leave_x(dtype, case):
    """With zero unset no selection writes x (compress relies on it to skip a copy)."""
    x = data(BIG, dtype)
    if case == "sample_hit":
        x = sample_hit(x)
    k = BIG // 100
    for impl in IMPLS:
        y = x.copy()
        impl.topk(y, k, np.empty(k, np.int64), np.empty(k, dtype))
        impl.approx_topk(y, k, 1000, 3, np.empty(k, np.int64), np.empty(k, dtype))
        impl.threshold(y, 1.5, np.empty(k, np.int64), np.empty(k, dtype))
        bits_equal(y, x)


# Error feedback fused into the selection: residual r, gradient x, selection of v = r + x.
# 70_003 = 16 * 4375 + 3 is long enough for the sampled top-k, with a ragged last block.
FUSED_LENGTHS = [0, 1, 7, 15, 16 * 63 + 3, 16 * 4375 + 3]


def fused_inputs(n, dtype, case):
    """(r, x): a gradient case, v all equal (the sampled scan misses part way), sampled
    positions of x huge (too few survive the estimate), or x cancelling r in places."""
    r, x = data(n, dtype, seed=1), data(n, dtype, seed=2)
    if case == "all_equal":
        r[:], x[:] = 1.5, 1.0
    elif case == "sample_hit" and n:
        x = sample_hit(x)
    elif case == "cancel":
        x[::2] = -r[::2]
    return r, x


def check_fused(r, v, run, zero):
    """Every implementation given add=x leaves r = v with its selection zeroed (if asked);
    returns the last implementation's return value and selection (idx, vals)."""
    for impl in IMPLS:
        rz = r.copy()
        ret, idx, vals = run(impl, rz, zero)
        c = len(idx) if ret is None else min(ret, len(idx))
        np.testing.assert_array_equal(vals[:c], v[idx[:c]])
        want = v.copy()
        if zero:
            want[idx[:c]] = 0
        bits_equal(rz, want)
    return ret, idx[:c], vals[:c]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", FUSED_LENGTHS)
@pytest.mark.parametrize("case", ["gradient", "all_equal", "sample_hit", "cancel"])
@pytest.mark.parametrize("kfrac", ["1", "1%", "1/16", "n"])
@pytest.mark.parametrize("zero", [True, False])
def test_topk_fused_residual(dtype, n, case, kfrac, zero):
    """Top-k of r + x with add=x: the stable argsort's top k of v, residual v minus them."""
    r, x = fused_inputs(n, dtype, case)
    v = r + x
    k = min(n, {"1": 1, "1%": max(1, n // 100), "1/16": n // 16, "n": n}[kfrac])
    want = np.sort(np.argsort(-np.abs(v), kind="stable")[:k])

    def run(impl, rz, zero):
        idx, vals = np.empty(k, np.int64), np.empty(k, dtype)
        impl.topk(rz, k, idx, vals, zero, add=x)
        return None, idx, vals

    _, idx, _ = check_fused(r, v, run, zero)
    np.testing.assert_array_equal(idx, want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", FUSED_LENGTHS)
@pytest.mark.parametrize("case", ["gradient", "all_equal", "cancel"])
@pytest.mark.parametrize("nsample", [0, 1000])
def test_approx_topk_fused_residual(dtype, n, case, nsample):
    """DGC of r + x with add=x: what it selects from v given directly, residual v minus it."""
    r, x = fused_inputs(n, dtype, case)
    v = r + x
    k = max(1, n // 100)
    ref_idx, ref_vals = np.zeros(k, np.int64), np.zeros(k, dtype)
    ref_c = kernels.numpy.approx_topk(v.copy(), k, nsample, 3, ref_idx, ref_vals)

    def run(impl, rz, zero):
        idx, vals = np.zeros(k, np.int64), np.zeros(k, dtype)
        return impl.approx_topk(rz, k, nsample, 3, idx, vals, zero, add=x), idx, vals

    c, idx, _ = check_fused(r, v, run, True)
    assert c == ref_c
    np.testing.assert_array_equal(idx, ref_idx[:c])
    np.testing.assert_array_equal(idx, np.sort(np.argsort(-np.abs(v), kind="stable")[:c]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", FUSED_LENGTHS)
@pytest.mark.parametrize("case", ["gradient", "cancel"])
@pytest.mark.parametrize("room", ["none", "half", "all"])
@pytest.mark.parametrize("thr", [1.5, np.nan])
def test_threshold_fused_residual(dtype, n, case, room, thr):
    """Threshold (and its count) of r + x with add=x, with room for none, half or all of
    those qualifying."""
    r, x = fused_inputs(n, dtype, case)
    v = r + x
    want = np.flatnonzero(np.abs(v) >= dtype(thr))
    cap = {"none": 0, "half": len(want) // 2, "all": len(want)}[room]

    def run(impl, rz, zero):
        idx, vals = np.empty(cap, np.int64), np.empty(cap, dtype)
        return impl.threshold(rz, thr, idx, vals, zero, add=x), idx, vals

    c, idx, _ = check_fused(r, v, run, True)
    np.testing.assert_array_equal(idx, want[:cap])
    assert c == len(want)
    for impl in IMPLS:
        rz = r.copy()
        assert impl.threshold_count(rz, thr, add=x) == len(want)
        bits_equal(rz, v)


def test_fused_add_must_match():
    """An add of another dtype or length is refused before anything is written."""
    out = (np.empty(3, np.int64), np.empty(3))
    calls = {"topk": (3, *out), "approx_topk": (3, 100, 0, *out), "threshold": (1.0, *out),
             "threshold_count": (1.0,)}
    for impl in IMPLS:
        for fn, args in calls.items():
            for bad in (np.ones(10, np.float32), np.ones(9)):
                r = np.ones(10)
                with pytest.raises(ValueError, match="add must match"):
                    getattr(impl, fn)(r, *args, add=bad)
                assert np.all(r == 1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("thr", [0.0, -0.0, -1.0, 1e-40, 3.0, np.inf, np.nan])
def test_threshold_edges(dtype, thr):
    """Zero, negative, subnormal, infinite and NaN thresholds on data with infinities."""
    x = data(20_011, dtype)
    x[[3, 4096, 20_010]] = [np.inf, -np.inf, np.finfo(dtype).tiny / 4]
    want = np.flatnonzero(np.abs(x) >= dtype(thr))
    for impl in IMPLS:
        assert impl.threshold_count(x, thr) == len(want)
    outs = run_both("threshold", lambda: (x.copy(), thr, np.empty(len(want), np.int64),
                                          np.empty(len(want), dtype), True))
    assert_same(outs)
    c, (xz, _, idx, vals, _) = outs[0]
    assert c == len(want)
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(vals, x[want])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("seed", [11, 2**40 + 7])  # the second also uses the high word
def test_randk(dtype, n, seed):
    x = data(n, dtype)
    k = n // 10
    counts = {impl.randk_indices(n, k, seed, np.empty(0, np.int64)) for impl in IMPLS}
    assert len(counts) == 1
    c = counts.pop()
    # Binomial(n, k/n): within 6 sd of k.
    assert abs(c - k) <= 6 * np.sqrt(k) + 1
    idx = np.empty(c, np.int64)
    outs = run_both("randk_indices", lambda: (n, k, seed, np.empty(c, np.int64)))
    assert_same(outs)
    idx = outs[0][1][3]
    outs = run_both("randk", lambda: (x.copy(), k, seed, np.empty(c, dtype), True))
    assert_same(outs)
    _, (xz, _, _, vals, _) = outs[0]
    np.testing.assert_array_equal(vals, x[idx])
    assert np.all(xz[idx] == 0)
    for impl in IMPLS:
        dst = np.ones(n, dtype)
        impl.randk_scatter_add(dst, k, seed, vals, 2.0)
        want = np.ones(n, dtype)
        want[idx] += vals * dtype(2)
        np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_add(dtype):
    for impl in IMPLS:
        dst = np.zeros(10, dtype)
        impl.scatter_add(dst, np.array([1, 4, 9]), np.array([1, 2, 3], dtype), 0.5)
        np.testing.assert_array_equal(dst, [0, 0.5, 0, 0, 1, 0, 0, 0, 0, 1.5])
        with pytest.raises(ValueError, match="outside"):
            impl.scatter_add(dst, np.array([10]), np.array([1], dtype))
        assert np.all(dst[[1, 4, 9]] == [0.5, 1, 1.5])


def test_bad_sizes_raise():
    for impl in IMPLS:
        with pytest.raises(ValueError, match="scales"):
            impl.int8_compress(np.ones(10, np.float32), 4, np.empty(10, np.int8),
                               np.empty(2, np.float32))
        with pytest.raises(ValueError, match="bucket"):
            impl.int8_compress(np.ones(10, np.float32), 0, np.empty(10, np.int8),
                               np.empty(2, np.float32))
        with pytest.raises(ValueError, match="levels"):
            impl.qsgd_compress(np.ones(4), 4, 200, 0, np.empty(4, np.int8), np.empty(1))
        with pytest.raises(ValueError, match="idx"):
            impl.topk(np.ones(10), 3, np.empty(2, np.int64), np.empty(2))
