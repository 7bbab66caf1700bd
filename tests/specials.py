"""Floating-point specials for the tests: data with NaN, +-Inf and +-0, and an exact NumPy
reference for the reductions over it, written independently of the kernels.

MIN and MAX are IEEE 754-2019 minimum and maximum: NaN if either operand is NaN, and
-0 < +0.  Every NaN they produce is the canonical quiet NaN of the type (np.nan's bits),
so the result is the same bit for bit whatever order an algorithm combines the ranks in.
"""
import numpy as np

FLOATS = [np.dtype(t) for t in (np.float16, np.float32, np.float64)]


def nans(dtype):
    """Quiet NaNs of ``dtype`` with different bits: np.nan, negative, and with a payload."""
    bits = np.dtype(f"u{dtype.itemsize}")
    canonical = np.array(np.nan, dtype).view(bits)
    sign = bits.type(1) << bits.type(8 * dtype.itemsize - 1)
    return np.array([canonical, canonical | sign, canonical | bits.type(5)], bits).view(dtype)


def pool(dtype):
    """Every special of ``dtype`` with a few ordinary values beside them."""
    dtype = np.dtype(dtype)
    ordinary = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -2.0, 3.0], dtype)
    return np.concatenate([nans(dtype), ordinary])


def specials(dtype, n, rank, seed=0):
    """Rank ``rank``'s ``n`` elements of ``dtype``, about one in six a NaN, one in three +-0 or
    +-Inf, the rest ordinary: drawn per rank so the ranks disagree on where the specials are."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng([seed, rank, n, FLOATS.index(dtype)])
    values = pool(dtype)
    weights = np.array([2, 1, 1] + [3, 3, 2, 2] + [2, 2, 2, 2, 2], float)
    return rng.choice(values, n, p=weights / weights.sum())


def ieee(op, a, b):
    """op(a, b) for op in min, max (IEEE minimum / maximum, canonical NaN), sum, prod."""
    if op in ("sum", "prod"):
        with np.errstate(invalid="ignore", over="ignore"):
            return (np.add if op == "sum" else np.multiply)(a, b)
    if op == "min":
        r = np.where(b < a, b, a)
        r = np.where((a == b) & np.signbit(b), b, r)
    else:
        r = np.where(b > a, b, a)
        r = np.where((a == b) & ~np.signbit(b), b, r)
    return np.where(np.isnan(a) | np.isnan(b), a.dtype.type(np.nan), r)


def fold(op, parts):
    """op over ``parts`` in order (a single part is returned as it is, as a collective on one
    rank copies its input without combining anything)."""
    acc = parts[0].copy()
    for part in parts[1:]:
        acc = ieee(op, acc, part)
    return acc


def assert_result(got, want, op, what):
    """Bit for bit, except that SUM and PROD need only have a NaN where the reference has one:
    they keep the payload of whichever NaN came first, which depends on the order.  (Every
    ordinary value in the pool is a small dyadic number or 3, so sums and products of a few
    are exact in any order, and their zeros' signs are order-free too.)"""
    bits = np.dtype(f"u{got.dtype.itemsize}")
    same = got.view(bits) == want.view(bits)
    if op in ("sum", "prod"):
        same |= np.isnan(got) & np.isnan(want)
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (f"{what}: {bad.size} elements differ in bits, first at {bad[0]}: "
                           f"{got[bad[0]]!r} != {want[bad[0]]!r}")
