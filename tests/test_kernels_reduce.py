"""Reduction kernels: native against the NumPy fallback and against NumPy's ufuncs, every op x dtype.

Covers the plain in-place reduction the collectives call, and its fused forms: strided
blocks, sum with scale, and float16 summed into a float32 accumulator.
"""
import numpy as np
import pytest

from collectives import _kernels_numpy, kernels
from collectives.ops import OP_CODE, dtype_code
from tests.specials import FLOATS, assert_result, ieee, pool, specials
from tests.util import ALL_DTYPES, make_data, ops_for

pytestmark = pytest.mark.serial

try:
    from collectives import _kernels as native
except ImportError:
    native = None

IMPLS = [_kernels_numpy] + ([native] if native is not None else [])
LENGTHS = [0, 1, 7, 8, 33, 4097]
UFUNC = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
         "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
         "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
CASES = [(dt, op) for dt in ALL_DTYPES for op in ops_for(dt)]


def definition(op, a, b):
    """op(a, b) by NumPy's ufunc, cast back to a's dtype (logical ops give 0/1); floating MIN
    and MAX by the IEEE minimum / maximum of tests/specials.py."""
    if a.dtype.kind == "f" and op in ("min", "max"):
        return ieee(op, a, b)
    with np.errstate(over="ignore"):
        return UFUNC[op](a, b).astype(a.dtype)


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
def test_reduce_into(dtype, op):
    for n in LENGTHS:
        a, b = make_data(dtype, op, n, 0), make_data(dtype, op, n, 1)
        want = definition(op, a, b)
        for impl in IMPLS:
            d = a.copy()
            impl.reduce_into(d, b, dtype_code(dtype), OP_CODE[op])
            what = f"{impl.__name__} n={n}"
            if dtype.kind == "c" and op == "prod":
                # NumPy's own complex multiply differs between its loops by an ulp.
                np.testing.assert_allclose(d, want, rtol=4 * np.finfo(dtype).eps, err_msg=what)
            else:
                np.testing.assert_array_equal(d.view(np.uint8), want.view(np.uint8), err_msg=what)


def at_every_offset(dtype, a, b, op):
    """op(a, b) by the selected kernels with dst starting at every offset in a 64-byte line
    (src fixed 32 bytes past one): the bytes of each result."""
    n, results = len(a), []
    for shift in range(0, 64, dtype.itemsize):
        raw_d, raw_s = np.empty(n * dtype.itemsize + 128, np.uint8), np.empty(n * dtype.itemsize + 128, np.uint8)
        at_d = (shift - raw_d.ctypes.data) % 64
        at_s = (32 - raw_s.ctypes.data) % 64
        d = raw_d[at_d:at_d + n * dtype.itemsize].view(dtype)
        src = raw_s[at_s:at_s + n * dtype.itemsize].view(dtype)
        d[...], src[...] = a, b
        kernels.reduce_into(d, src, dtype_code(dtype), OP_CODE[op])
        results.append(d.view(np.uint8).copy())
    for shift, r in enumerate(results):
        np.testing.assert_array_equal(r, results[0], err_msg=f"shift {shift * dtype.itemsize} bytes")
    return results[0]


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
def test_reduce_into_same_bits_at_any_alignment(dtype, op):
    """The same result wherever the buffers start: ranks of a collective hold their data at
    different addresses and must still agree bit for bit.  Complex PROD is also checked
    against the textbook formula evaluated in NumPy's element type (no fused multiply-add)."""
    n = 4103
    a, b = make_data(dtype, op, n, 0), make_data(dtype, op, n, 1)
    got = at_every_offset(dtype, a, b, op)
    if dtype.kind == "c" and op == "prod":
        want = np.empty_like(a)
        want.real = a.real * b.real - a.imag * b.imag
        want.imag = a.real * b.imag + a.imag * b.real
        np.testing.assert_array_equal(got, want.view(np.uint8))


SPECIAL_CASES = [(dt, op) for dt in FLOATS for op in ("min", "max", "sum", "prod")]


@pytest.mark.parametrize("dtype,op", SPECIAL_CASES, ids=[f"{d}-{o}" for d, o in SPECIAL_CASES])
def test_reduce_into_specials(dtype, op):
    """Every ordered pair of NaNs (three kinds), +-Inf, +-0 and ordinary values, through the
    vector loops and their tails, in both implementations: MIN and MAX are IEEE minimum and
    maximum bit for bit (canonical NaN); SUM and PROD are NaN where NumPy's are and equal to
    them elsewhere; in either operand order."""
    values = pool(dtype)
    a, b = np.repeat(values, len(values)), np.tile(values, len(values))
    for n in LENGTHS[1:]:
        x, y = np.resize(a, n), np.resize(b, n)
        want = ieee(op, x, y)
        for impl in IMPLS:
            results = []
            for d, s in ((x.copy(), y), (y.copy(), x)):
                impl.reduce_into(d, s, dtype_code(dtype), OP_CODE[op])
                results.append(d)
            for d in results:
                assert_result(d, want, op, f"{impl.__name__} {op} n={n}")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", ["min", "max"])
def test_specials_same_bits_at_any_alignment(dtype, op):
    n = 4103
    a, b = specials(dtype, n, 0), specials(dtype, n, 1)
    np.testing.assert_array_equal(at_every_offset(dtype, a, b, op), ieee(op, a, b).view(np.uint8))


def test_selector_exports_the_chosen_implementation():
    want = _kernels_numpy if kernels.PUREPYTHON else native
    assert kernels.reduce_into is want.reduce_into


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("geometry", [(0, 5, 7, 9), (3, 0, 4, 4), (1, 5, 5, 0), (4, 3, 5, 7), (5, 33, 40, 33)])
def test_reduce_blocks(dtype, geometry):
    nblocks, blocklen, ds, ss = geometry
    nd = (nblocks - 1) * ds + blocklen if nblocks else 0
    ns = (nblocks - 1) * ss + blocklen if nblocks else 0
    a, b = make_data(dtype, "sum", nd + 2, 0), make_data(dtype, "sum", ns, 1)
    want = a.copy()
    for k in range(nblocks):
        want[k * ds:k * ds + blocklen] += b[k * ss:k * ss + blocklen]
    for impl in IMPLS:
        d = a.copy()
        impl.reduce_blocks(d, b, dtype_code(dtype), OP_CODE["sum"], nblocks, blocklen, ds, ss)
        np.testing.assert_array_equal(d, want, err_msg=impl.__name__)


def test_reduce_blocks_rejects_overrun_and_overlap():
    for impl in IMPLS:
        with pytest.raises(ValueError, match="overrun"):
            impl.reduce_blocks(np.zeros(10), np.zeros(20), dtype_code(np.float64), 0, 3, 4, 4, 4)
        with pytest.raises(ValueError, match="overlap"):
            impl.reduce_blocks(np.zeros(10), np.zeros(10), dtype_code(np.float64), 0, 2, 4, 3, 4)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", LENGTHS)
def test_reduce_scaled(dtype, n):
    a, b = make_data(dtype, "sum", n, 0), make_data(dtype, "sum", n, 1)
    wide = np.float32 if dtype == np.float16 else dtype
    want = ((a.astype(wide) + b.astype(wide)) * wide(1 / 3)).astype(dtype)
    for impl in IMPLS:
        d = a.copy()
        impl.reduce_scaled(d, b, dtype_code(dtype), 1 / 3)
        np.testing.assert_array_equal(d, want, err_msg=impl.__name__)
        with pytest.raises(TypeError, match="floating"):
            impl.reduce_scaled(np.zeros(3, np.int32), np.zeros(3, np.int32), dtype_code(np.int32), 0.5)


@pytest.mark.parametrize("n", LENGTHS)
def test_sum_f16_f32(n):
    rng = np.random.default_rng(n)
    parts = [rng.uniform(-1, 1, n).astype(np.float16) for _ in range(50)]
    want = np.zeros(n, np.float32)
    for p in parts:
        want += p.astype(np.float32)
    for impl in IMPLS:
        acc = np.zeros(n, np.float32)
        for p in parts:
            impl.sum_f16_f32(acc, p)
        np.testing.assert_array_equal(acc, want, err_msg=impl.__name__)
    # The point of a float32 accumulator: summing in float16 loses what float32 keeps.
    if n >= 33:
        half = np.zeros(n, np.float16)
        for p in parts:
            half += p
        assert np.abs(half - want).max() > np.abs(want.astype(np.float16) - want).max()


@pytest.mark.parametrize("n", [1, 1 << 20])
def test_reduce_large_float32(n):
    a, b = make_data(np.float32, "sum", n, 0), make_data(np.float32, "sum", n, 1)
    for impl in IMPLS:
        d = a.copy()
        impl.reduce_into(d, b, dtype_code(np.float32), OP_CODE["sum"])
        np.testing.assert_array_equal(d, a + b)
