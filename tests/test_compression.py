"""Compressed all-reduce: every compressor at every rank count against NumPy on all ranks' data.

Each rank's gradient is a pure function of its rank, so every rank can rebuild all of them:
the sparse and summed shapes must give the bits of decoding each rank's payload in rank order;
the re-quantizing ones the exact sum within their error bound; every shape the bytes of its
formula, and with error feedback, results that add up to the gradients less the residuals.
"""
import numpy as np
import pytest

from collectives import compression, kernels
from collectives.compression import COMPRESSORS, ErrorFeedback, allreduce
from tests.util import assert_identical_across_ranks

SIZES = [0, 1, 65, 4099]
SETTINGS = {"int8": dict(bucket=64), "qsgd": dict(bucket=64, levels=7), "sign": dict(bucket=64),
            "topk": dict(ratio=0.05), "dgc": dict(ratio=0.05, sample=0.2),
            "threshold": dict(threshold=1.0), "randk": dict(ratio=0.1), "fp16": dict(scale=0.25)}


def grad(rank, n, step, dtype):
    """Rank ``rank``'s gradient at ``step``."""
    rng = np.random.default_rng([rank, n, step])
    return (rng.standard_normal(n) * np.exp(rng.uniform(-2, 2, n))).astype(dtype)


def make(name):
    return COMPRESSORS[name](**SETTINGS.get(name, {}))


def expected(name, p, n, steps, dtype, gradient=grad, settings=SETTINGS):
    """The sum at the last step, computed rank by rank without communication (gradients
    ``gradient(rank, n, step, dtype)``, compressors made with ``settings``)."""
    comps = [COMPRESSORS[name](**settings.get(name, {})) for _ in range(p)]
    states = [ErrorFeedback() if comps[0].error_feedback else None for _ in range(p)]
    for step in range(steps):
        total = np.zeros(n, dtype)
        for r in range(p):
            g = gradient(r, n, step, dtype)
            res = states[r].residual_for(g) if states[r] else None
            payload, ctx = comps[r].compress(g, res, comps[r].next_seed(r))
            comps[r].decompress_add(total, payload, ctx)
    return total


EXACT = sorted(name for name, c in COMPRESSORS.items() if c.shape != "requantize")
QUANTIZERS = sorted(name for name, c in COMPRESSORS.items() if c.shape == "requantize")


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_allreduce_matches_numpy(comm, name, dtype):
    """Sparse and summed shapes add every rank's decoded payload in rank order: the same bits as
    NumPy adding them in that order (a dense fallback adds zeros, which changes nothing)."""
    p, r = comm.Get_size(), comm.Get_rank()
    for n in SIZES:
        comp, state = make(name), None
        for step in range(2):
            out, state = allreduce(comm, grad(r, n, step, dtype), comp, state)
        want = expected(name, p, n, 2, dtype)
        assert out.dtype == dtype and out.shape == (n,)
        what = f"{name} n={n} p={p}"
        np.testing.assert_array_equal(out, want, err_msg=what)
        assert_identical_across_ranks(comm, out, what)
        assert (state is not None) == comp.error_feedback


def _per_bucket(a, bucket, reduce):
    """reduce over each bucket of ``a``, repeated over the bucket's elements."""
    starts = np.arange(0, len(a), bucket)
    return np.repeat(reduce(a, starts), np.diff(np.append(starts, len(a))))


def error_bound(name, gs, comp):
    """Elementwise bound on |compressed sum - exact sum| of one call without error feedback:
    a rounding when each rank compresses its chunk, and one when the owner re-quantizes the sum."""
    a = [np.abs(g.astype(np.float64)) for g in gs]
    if name == "fp16":
        # round to nearest: 2^-11 relative, plus half the smallest subnormal (2^-25) over scale
        total = sum(a)
        return 2.0**-11 * 2.001 * total + (len(gs) + 1) * 2.0**-24 / comp.scale
    B = comp.bucket
    if name == "qsgd":
        # one step of norm / L per element; |decoded| <= |g| + norm / L bounds the sum's norm
        L, m = comp.levels, min(B, len(a[0]))
        norms = sum(np.sqrt(_per_bucket(x * x, B, np.add.reduceat)) for x in a)
        return norms / L + norms * (1 + np.sqrt(m) / L) / L
    amax = sum(_per_bucket(x, B, np.maximum.reduceat) for x in a)
    # int8: stochastic rounding moves by less than one step, max|v| / 127, and the sum's max is
    # at most the sum of the ranks' maxima; sign: |v - (+-mean|v|)| <= 2 max|v| in each phase
    return amax * (2 / 127 if name == "int8" else 4)


@pytest.mark.parametrize("name", QUANTIZERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_requantized_sum_within_bound(comm, name, dtype):
    """Reduce-scatter/all-gather quantizers against NumPy's exact sum, within the bound of the
    two roundings (error feedback off, so one call's error is all there is)."""
    p, r = comm.Get_size(), comm.Get_rank()
    for n in SIZES:
        comp = COMPRESSORS[name](**SETTINGS[name], error_feedback=False)
        out, state = allreduce(comm, grad(r, n, 0, dtype), comp)
        gs = [grad(q, n, 0, dtype) for q in range(p)]
        exact = sum(g.astype(np.float64) for g in gs)
        rounding = 4 * p * np.finfo(dtype).eps * sum(np.abs(g.astype(np.float64)) for g in gs)
        err = np.abs(out - exact)
        bound = error_bound(name, gs, comp) + rounding
        what = f"{name} n={n} p={p}: worst excess {np.max(err - bound, initial=0)}"
        assert out.dtype == dtype and out.shape == (n,) and state is None
        assert np.all(err <= bound), what
        assert_identical_across_ranks(comm, out, what)


def payload_nbytes(comp, m, itemsize):
    """Bytes of one compressed chunk of ``m`` elements, from each format's definition."""
    scales = itemsize * -(-m // comp.bucket) if hasattr(comp, "bucket") else 0
    return {"fp16": 2 * m, "int8": m + scales, "qsgd": m + scales,
            "sign": -(-m // 8) + scales}.get(comp.name, itemsize * m)


def chunk_sizes(n, p, unit):
    """Elements of each rank's chunk: whole units dealt out as evenly as possible."""
    units = [len(c) for c in np.array_split(np.arange(-(-n // unit)), p)]
    sizes = [u * unit for u in units]
    sizes[max(j for j in range(p) if units[j] or j == 0)] -= sum(sizes) - n
    return sizes


def reduce_scatter_bytes(comp, n, p, r, itemsize):
    """Sent by rank r: p - 1 chunk payloads in each phase (others' chunks, then its own p - 1 times)."""
    m = chunk_sizes(n, p, comp.unit)
    size = [payload_nbytes(comp, c, itemsize) for c in m]
    return sum(size) - size[r] + (p - 1) * size[r]


def wire_formula(comm, comp, n, itemsize):
    """Bytes this rank must send, and the p-independent bound on them."""
    p, r = comm.Get_size(), comm.Get_rank()
    if comp.shape == "requantize":
        whole = payload_nbytes(comp, n, itemsize)
        return reduce_scatter_bytes(comp, n, p, r, itemsize), 2 * whole + p * payload_nbytes(comp, comp.unit, itemsize)
    if comp.name == "none":
        return reduce_scatter_bytes(comp, n, p, r, itemsize), 2 * n * itemsize + p * itemsize
    if comp.name == "randk":
        c = kernels.randk_indices(n, compression.sparsifiers._count(n, comp.ratio), comp.seed_for(0, r), np.empty(0, np.int64))
        return reduce_scatter_bytes(compression.Compressor(), c, p, r, itemsize), 2 * c * itemsize + p * itemsize
    # Top-k: every rank knows that each selects k pairs, so no count travels; the indices go
    # as uint16 gaps after a 16-byte head (gaps at these sizes are far below 2^16).
    k = compression.sparsifiers._count(n, comp.ratio)
    if p * k * (4 + itemsize) > 2 * n * itemsize:
        sent = reduce_scatter_bytes(compression.Compressor(), n, p, r, itemsize)
    else:
        sent = (p - 1) * (16 + k * (2 + itemsize) if k else 0)
    return sent, 2 * n * itemsize + p * itemsize


@pytest.mark.parametrize("name", sorted(set(COMPRESSORS) - {"dgc", "threshold"}))
@pytest.mark.parametrize("ratio", [0.01, 0.5])
def test_wire_bytes(comm, name, ratio):
    """Bytes sent per rank match each shape's formula and stay under a bound free of p
    (2 x the payload of the whole vector, plus a bucket and a count per rank).  Top-k at 1%
    takes the sparse all-gather, at 50% the dense fallback (from np 2)."""
    settings = dict(SETTINGS.get(name, {}), **({"ratio": ratio} if name in ("topk", "randk") else {}))
    seen = []
    for n in SIZES + [100_003]:
        comp = COMPRESSORS[name](**settings)
        allreduce(comm, grad(comm.Get_rank(), n, 0, np.float32), comp, report=seen.append)
        want, bound = wire_formula(comm, comp, n, 4)
        got = comp.last
        assert seen[-1] is got and got.wire_bytes == want, f"{name} n={n}: {got}, formula {want} B"
        assert got.wire_bytes <= bound, f"{name} n={n}: {got.wire_bytes} B over the bound {bound} B"
        assert min(got.compress_s, got.communicate_s, got.decompress_s) >= 0
        assert got.shape.startswith(comp.shape)


@pytest.mark.parametrize("name,settings", [("sign", {}), ("int8", dict(error_feedback=True)),
                                           ("qsgd", dict(error_feedback=True)), ("fp16", dict(error_feedback=True)),
                                           ("topk", {}), ("topk", dict(ratio=0.5)), ("randk", {})],
                         ids=["sign", "int8", "qsgd", "fp16", "topk", "topk-dense", "randk"])
def test_error_feedback_invariant(comm, name, settings):
    """Over T calls, sum of the results = sum of all ranks' gradients - every rank's residual
    - the owners' re-quantization residuals: error feedback delays, never loses."""
    p, r, n = comm.Get_size(), comm.Get_rank(), 1001
    comp, state = COMPRESSORS[name](**dict(SETTINGS.get(name, {}), **settings)), None
    got, true = np.zeros(n), np.zeros(n)
    for step in range(4):
        out, state = allreduce(comm, grad(r, n, step, np.float64), comp, state)
        got += out
        true += sum(grad(q, n, step, np.float64) for q in range(p))
    held = state.residual.copy()
    if state.server is not None:
        lo, hi = state.server_span
        held[lo:hi] += state.server
    left = np.empty(n)
    comm.comm.Allreduce(held, left)
    scale = 4 * p * np.max(np.abs(true))
    np.testing.assert_allclose(got + left, true, rtol=0, atol=1e-12 * scale)
    assert np.max(np.abs(left)) > 1e-6 * scale  # something was held back: the check has teeth


def test_none_is_exact_sum_and_average(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    total = sum(grad(i, 101, 0, np.float64) for i in range(p))
    out, _ = allreduce(comm, grad(r, 101, 0, np.float64).reshape(1, 101), "none", average=True)
    assert out.shape == (1, 101)
    np.testing.assert_allclose(out[0], total / p, rtol=1e-12)


@pytest.mark.parametrize("name", ["topk", "sign", "int8"])
def test_error_feedback_loses_nothing(comm, name):
    """Sum of what was sent over T steps = sum of the gradients - the final residual, per rank."""
    r = comm.Get_rank()
    comp, state = make(name), ErrorFeedback()
    comp.error_feedback = True
    n, sent, true = 777, np.zeros(777), np.zeros(777)
    for step in range(5):
        g = grad(r, n, step, np.float64)
        true += g
        payload, ctx = comp.compress(g, state.residual_for(g), comp.next_seed(r))
        comp.decompress_add(sent, payload, ctx)
    np.testing.assert_allclose(sent + state.residual, true, rtol=1e-12, atol=1e-12)


def test_fp16_overflow_falls_back_to_exact(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    g = np.full(5, 1e5 if r == 0 else 1.0, np.float32)
    with pytest.warns(RuntimeWarning, match="overflowed"):
        out, _ = allreduce(comm, g, compression.FP16(scale=1.0))
    np.testing.assert_allclose(out, np.full(5, 1e5 + (p - 1), np.float32), rtol=1e-6)


@pytest.mark.parametrize("name", ["int8", "randk", "topk"])
def test_out_takes_the_result(comm, name):
    """``out`` gets the bits of the default call (a fresh array), for each shape, reused."""
    r = comm.Get_rank()
    comps, outs = [make(name), make(name)], [None, np.full((4099,), np.nan, np.float32)]
    states = [None, None]
    for step in range(2):
        g = grad(r, 4099, step, np.float32)
        got = [allreduce(comm, g, comps[i], states[i], out=outs[i]) for i in range(2)]
        states = [s for _, s in got]
        assert got[1][0] is outs[1]
        np.testing.assert_array_equal(got[1][0], got[0][0])


def test_sparse_gaps_wider_than_uint16(comm):
    """Selected indices 2^16 or more apart travel as uint32 gaps: NumPy's rank-order sum, and
    the bytes of a 16-byte head and 3 pairs of 4 + 4 bytes to each other rank."""
    p, r, n = comm.Get_size(), comm.Get_rank(), 200_000

    def spikes(q):
        g = np.zeros(n, np.float32)
        g[[q, 70_000 + q, n - 1]] = 1 + q, -2 - q, 0.5 + q
        return g

    comp = compression.TopK(ratio=3 / n)
    out, _ = allreduce(comm, spikes(r), comp)
    want = np.zeros(n, np.float32)
    for q in range(p):
        want += spikes(q)
    np.testing.assert_array_equal(out, want)
    assert comp.last.shape == "sparse" and comp.last.wire_bytes == (p - 1) * (16 + 3 * 8), comp.last


class Reversed(compression.TopK):
    """Top-k handing its pairs over in decreasing index order."""

    def _select(self, v, add, seed, zero):
        idx, vals = super()._select(v, add, seed, zero)
        return idx[::-1].copy(), vals[::-1].copy()


def test_sparse_pairs_in_any_order(comm):
    """Pairs out of index order are summed all the same: NumPy's rank-order sum of top-k's."""
    p, r = comm.Get_size(), comm.Get_rank()
    out, _ = allreduce(comm, grad(r, 4099, 0, np.float64), Reversed(ratio=0.05))
    np.testing.assert_array_equal(out, expected("topk", p, 4099, 1, np.float64))


def test_out_refused_unless_it_fits(comm):
    g = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="out holds 7 float32; the gradient 8 float32"):
        allreduce(comm, g, "topk", out=np.empty(7, np.float32))
    with pytest.raises(ValueError, match="out holds 8 float64"):
        allreduce(comm, g, "topk", out=np.empty(8))
    with pytest.raises(ValueError, match="contiguous"):
        allreduce(comm, g, "topk", out=np.empty(16, np.float32)[::2])
    with pytest.raises(ValueError, match="overlaps the gradient"):
        allreduce(comm, g, "topk", out=g)
    with pytest.raises(TypeError, match="NumPy array"):
        allreduce(comm, g, "topk", out=[0.0] * 8)


@pytest.mark.serial
def test_bad_inputs():
    with pytest.raises(TypeError, match="float32 or float64"):
        compression.TopK().compress(np.arange(5))
    with pytest.raises(ValueError, match="multiple of 8"):
        compression.Sign(bucket=12)
    with pytest.raises(ValueError, match="levels"):
        compression.QSGD(levels=300)


@pytest.mark.serial
def test_randk_without_feedback_is_unbiased():
    """Mean over S seeds of decompress(compress(x)) is within 5 sigma of x.

    An element is kept with probability p and then worth x / p: variance x^2 (1 - p) / p, so
    the mean over S seeds has standard deviation |x| sqrt((1 - p) / (p S)).
    """
    comp, S = compression.RandK(ratio=0.1, error_feedback=False), 400
    x = grad(0, 500, 0, np.float64)
    total = np.zeros_like(x)
    for seed in range(S):
        payload, ctx = comp.compress(x, seed=seed)
        comp.decompress_add(total, payload, ctx)
    p = 0.1
    assert comp.unbiased
    assert np.all(np.abs(total / S - x) <= 5 * np.abs(x) * np.sqrt((1 - p) / (p * S)) + 1e-12)


# (what rank 0 passes, what the others pass, the field the error names): calls that differ
# across ranks raise the same ValueError on every rank before any payload moves.
DIFFERING = [
    (dict(n=100), dict(n=120), "count ranges 100..120"),
    (dict(dtype=np.float32), dict(dtype=np.float64), "dtype ranges"),
    (dict(name="int8"), dict(name="topk"), "compressor_settings"),
    (dict(settings=dict(ratio=0.05)), dict(settings=dict(ratio=0.1)), "compressor_settings"),
    (dict(settings=dict(seed=1), name="randk"), dict(settings=dict(seed=2), name="randk"), "compressor_settings"),
    (dict(average=True), dict(average=False), "compressor_settings"),
]


@pytest.mark.parametrize("mine, theirs, field", DIFFERING)
def test_calls_that_differ_raise_on_every_rank(comm, mine, theirs, field):
    if comm.size < 2 or not comm.check:
        pytest.skip("needs two ranks and the cross-rank check")
    call = dict(n=100, dtype=np.float32, name="topk", settings={}, average=False)
    call.update(mine if comm.rank == 0 else theirs)
    g = grad(comm.rank, call["n"], 0, call["dtype"])
    with pytest.raises(ValueError, match="compressed allreduce: arguments differ across ranks: " + field) as err:
        allreduce(comm, g, COMPRESSORS[call["name"]](**call["settings"]), average=call["average"])
    assert comm.allgather(str(err.value)) == [str(err.value)] * comm.size
    got, _ = allreduce(comm, grad(comm.rank, 64, 1, np.float32), "none")
    assert np.allclose(got, sum(grad(r, 64, 1, np.float32) for r in range(comm.size)), rtol=1e-5)


def test_seeds_of_their_own_are_fine_where_ranks_draw_apart(comm):
    """Int8's stochastic rounding draws per rank: a seed per rank is a legitimate choice."""
    g = grad(comm.rank, 256, 0, np.float32)
    got, _ = allreduce(comm, g, compression.Int8(seed=comm.rank, bucket=64))
    assert_identical_across_ranks(comm, got, "int8 with a seed per rank")


def test_one_rank_with_bad_arguments_makes_every_rank_raise(comm):
    if comm.size < 2 or not comm.check:
        pytest.skip("needs two ranks and the cross-rank check")
    g = np.ones(8, np.int32) if comm.rank == 0 else np.ones(8, np.float32)
    expected_error = (TypeError, "float32 or float64") if comm.rank == 0 else (ValueError, "invalid arguments on another rank")
    with pytest.raises(expected_error[0], match=expected_error[1]):
        allreduce(comm, g, "int8")
    with pytest.raises(ValueError, match="unknown compressor 'bogus'" if comm.rank == comm.size - 1 else "invalid arguments"):
        allreduce(comm, np.ones(8, np.float32), "bogus" if comm.rank == comm.size - 1 else "int8")


def test_behind_a_pending_nonblocking_collective(comm):
    """A compressed all-reduce issued while an Iallreduce is pending on the same Comm agrees
    after it, not beside it on another thread: both agreements use the same exchange and tag."""
    p = comm.size
    x = np.arange(50000, dtype=np.float64) + comm.rank
    want = np.arange(50000, dtype=np.float64) * p + p * (p - 1) // 2
    for step in range(10):
        out = np.empty_like(x)
        req = comm.Iallreduce(x, out)
        got, _ = allreduce(comm, grad(comm.rank, 64, step, np.float32), "none")
        req.wait()
        np.testing.assert_array_equal(out, want)
        assert np.allclose(got, sum(grad(r, 64, step, np.float32) for r in range(p)), rtol=1e-5)
