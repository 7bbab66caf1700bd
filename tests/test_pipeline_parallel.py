"""Pipeline parallelism (collectives.parallel.pipeline) against a NumPy MLP written here, over the
suite's communicators (SELF, WORLD, an uneven half of WORLD).

The MLP has max(5, p) layers, so every rank count splits them (unevenly at 2, 3 and 4 ranks);
loss and gradients of GPipe and 1F1B must match to 1e-12 in float64 at 1, 4, 16 and more
micro-batches than rows, and PipeDream's weights after a pass must match a sequential
NumPy run that gives stage s's micro-batch j the weights after max(0, j - (p - s - 1)) updates.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from collectives.parallel.pipeline import PipelineMLP

N, D, K = 23, 7, 4


def _sizes(p):
    layers = max(5, p)
    return [D] + [(6, 5, 4, 3)[i % 4] for i in range(layers - 1)] + [K]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    X[rng.random((N, D)) < 0.3] = 0
    return X, rng.integers(0, K, N)


def _params(sizes, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b)) * 0.7, rng.standard_normal(b) * 0.1) for a, b in zip(sizes, sizes[1:])]


def _flat(params):
    return np.concatenate([np.concatenate([W.ravel(), b]) for W, b in params])


def _reference(params, X, y):
    """Summed cross-entropy of a ReLU MLP and its gradient, per layer."""
    xs, x = [], X
    for l, (W, b) in enumerate(params):
        xs.append(x)
        x = x @ W + b
        if l < len(params) - 1:
            x = np.maximum(x, 0)
    Z = x - x.max(1, keepdims=True)
    P = np.exp(Z) / np.exp(Z).sum(1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(P[rows, y]).sum()
    d = P
    d[rows, y] -= 1
    grads = []
    for l in reversed(range(len(params))):
        grads.append((xs[l].T @ d, d.sum(0)))
        d = (d @ params[l][0].T) * (xs[l] > 0)
    return loss, grads[::-1]


@pytest.mark.parametrize("micro", [1, 4, 16, 30])
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_loss_and_gradient(comm, name, micro):
    sizes = _sizes(comm.size)
    X, y = _data()
    params = _params(sizes)
    loss, grads = _reference(params, X, y)
    model = PipelineMLP(comm, sizes, micro, name)
    w = model.shard(_flat(params))
    got_loss, g = model.loss_grad(w, sp.csr_matrix(X) if micro == 4 else X, y)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(np.concatenate(comm.comm.allgather(g)), _flat(grads), rtol=1e-12, atol=1e-12)
    Z = X
    for l, (W, b) in enumerate(params):
        Z = Z @ W + b if l == len(params) - 1 else np.maximum(Z @ W + b, 0)
    np.testing.assert_array_equal(model.predict(w, X), Z.argmax(1))


def test_init_is_the_mlp_init(comm):
    """Two layers on one stage draw models.MLP's initial parameters."""
    from collectives.train.models import MLP

    if comm.size > 1:
        pytest.skip("two layers on one stage")
    model = PipelineMLP(comm, [D, 5, K])
    np.testing.assert_array_equal(model.init(np.random.default_rng(3)), MLP(D, K, 5).init(np.random.default_rng(3)))


@pytest.mark.parametrize("micro", [1, 5, 9])
def test_pipedream_weight_stashing(comm, micro):
    sizes = _sizes(comm.size)
    X, y = _data(2)
    params = _params(sizes, 3)
    model = PipelineMLP(comm, sizes, micro)
    lr, lam = 0.05, 0.01
    new, loss = model.pipedream(model.shard(_flat(params)), X, y, lr, lam)

    # Sequential reference: layer l on stage s(l); micro-batch j's forward and backward use that stage's
    # weights after max(0, j - (p - s - 1)) updates, and each backward then updates the stage.
    p, layers = comm.size, len(sizes) - 1
    stage = np.repeat(np.arange(p), [len(range(*_block(layers, p, s))) for s in range(p)])
    history = [[(W.copy(), b.copy())] for W, b in params]
    counts = [N // micro + (i < N % micro) for i in range(micro)]
    edges = np.concatenate([[0], np.cumsum(counts)])
    total = 0.0
    for j in range(micro):
        version = [max(0, j - (p - stage[l] - 1)) for l in range(layers)]
        used = [history[l][version[l]] for l in range(layers)]
        rows = slice(edges[j], edges[j + 1])
        part, grads = _reference(used, X[rows], y[rows])
        total += part
        for l, (dW, db) in enumerate(grads):
            W, b = history[l][-1]
            n = max(counts[j], 1)
            history[l].append((W - lr * (dW / n + lam * W), b - lr * db / n))
    assert loss == pytest.approx(total, rel=1e-12)
    want = _flat([h[-1] for h in history])
    np.testing.assert_allclose(np.concatenate(comm.comm.allgather(new)), want, rtol=1e-12, atol=1e-12)


def _block(n, parts, index):
    q, r = divmod(n, parts)
    start = index * q + min(index, r)
    return start, start + q + (index < r)


def test_bad_layouts(comm):
    with pytest.raises(ValueError, match=f"{comm.size + 1} stages needs at least"):
        PipelineMLP(type("C", (), {"size": comm.size + 1, "rank": 0})(), [D] * comm.size + [K])
    with pytest.raises(ValueError, match="unknown pipeline schedule|synchronous schedule"):
        PipelineMLP(comm, _sizes(comm.size), 2, "pipedream")


@pytest.mark.serial
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_schedule_bubble_is_the_theory(name):
    """Replayed with equal stages (backward twice the forward) and free messages, GPipe and 1F1B idle
    exactly (p - 1) / (m + p - 1) of the time: neither schedule serialises more than it must."""
    from collectives.parallel.pipeline import replay

    for p in range(1, 9):
        for m in (1, 2, 4, 7, 16):
            assert replay(name, p, m, [{"forward": 1.0, "backward": 2.0}] * p) == pytest.approx((p - 1) / (m + p - 1),
                                                                                              abs=1e-12), (p, m)
