"""Compressed all-reduce: every compressor at every rank count against NumPy on all ranks' data.

Each rank's gradient is a pure function of its rank, so every rank can rebuild all of them
and compute the expected result by compressing and decompressing each rank's gradient in
rank order, with the same seeds and the same error-feedback state, and summing.
"""
import numpy as np
import pytest

from collectives import compression
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


def expected(name, p, n, steps, dtype):
    """The sum at the last step, computed rank by rank without communication, and the sum of
    the magnitudes of its terms (which bounds the rounding of summing them in another order)."""
    comps = [make(name) for _ in range(p)]
    states = [ErrorFeedback() if comps[0].error_feedback else None for _ in range(p)]
    for step in range(steps):
        total, absum = np.zeros(n, dtype), np.zeros(n)
        for r in range(p):
            g = grad(r, n, step, dtype)
            res = states[r].residual_for(g) if states[r] else None
            payload, ctx = comps[r].compress(g, res, comps[r].next_seed(r))
            comps[r].decompress_add(total, payload, ctx)
            absum += np.abs(comps[r].decompress(payload, ctx))
    return total, absum


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_allreduce_matches_numpy(comm, name, dtype):
    p, r = comm.Get_size(), comm.Get_rank()
    for n in SIZES:
        comp, state = make(name), None
        for step in range(2):
            out, state = allreduce(comm, grad(r, n, step, dtype), comp, state)
        want, absum = expected(name, p, n, 2, dtype)
        assert out.dtype == dtype and out.shape == (n,)
        what = f"{name} n={n} p={p}"
        if name == "fp16":
            # Payloads are summed in float16 by the all-reduce, in the algorithm's order: each
            # of the p - 1 additions rounds by half an ulp of a partial sum <= sum |terms|.
            assert np.all(np.abs(out - want) <= p * 2.0**-11 * absum + p * 2.0**-24 / 0.25), what
        elif comp.summable:
            # Summed by the all-reduce in its own order: p roundings of partial sums <= absum.
            assert np.all(np.abs(out - want) <= 2 * p * np.finfo(dtype).eps * absum), what
        else:
            np.testing.assert_array_equal(out, want, err_msg=what)
        assert_identical_across_ranks(comm, out, what)
        assert (state is not None) == comp.error_feedback


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


def test_bad_inputs():
    with pytest.raises(TypeError, match="float32 or float64"):
        compression.TopK().compress(np.arange(5))
    with pytest.raises(ValueError, match="multiple of 8"):
        compression.Sign(bucket=12)
    with pytest.raises(ValueError, match="levels"):
        compression.QSGD(levels=300)


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
