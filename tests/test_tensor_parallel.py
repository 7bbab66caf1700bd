"""Tensor parallelism (collectives.parallel.tensor) against NumPy forward and backward passes written
here, over the suite's communicators (SELF, WORLD, an uneven half of WORLD).

Every rank count splits the hidden units or features unevenly somewhere (10 units over 3 or
4 ranks, 7 features over 2..4); loss and gradients must match to 1e-12 in float64.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from collectives.parallel.tensor import (ColumnParallelLinear, FeatureParallelSoftmax, RowParallelLinear,
                                         TensorParallelMLP)

N, D, K = 23, 7, 4


class Counting:
    """A communicator that counts the all-reduces made through it."""

    def __init__(self, comm):
        self.inner, self.allreduces = comm, 0
        self.rank, self.size, self.comm = comm.rank, comm.size, comm.comm

    def Allreduce(self, *args, **kwargs):
        self.allreduces += 1
        return self.inner.Allreduce(*args, **kwargs)


def _data(seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    X[rng.random((N, D)) < 0.3] = 0
    return (sp.csr_matrix(X) if sparse else X), rng.integers(0, K, N)


def _softmax_loss(Z, y):
    """Summed cross-entropy and its gradient with respect to the scores."""
    E = np.exp(Z - Z.max(1, keepdims=True))
    P = E / E.sum(1, keepdims=True)
    rows = np.arange(len(y))
    P2 = P.copy()
    P2[rows, y] -= 1
    return -np.log(P[rows, y]).sum(), P2


def _gathered(comm, part, axis):
    """The ranks' blocks of ``part`` laid end to end along ``axis`` (rank order)."""
    return np.concatenate(comm.comm.allgather(part), axis=axis)


@pytest.mark.parametrize("hidden", [10, 1, 5])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_mlp_loss_and_gradient(comm, hidden, sparse):
    X, y = _data(sparse=sparse)
    rng = np.random.default_rng(1)
    W1, b1 = rng.standard_normal((D, hidden)), rng.standard_normal(hidden)
    W2, b2 = rng.standard_normal((hidden, K)), rng.standard_normal(K)
    Xd = X.toarray() if sparse else X
    A = Xd @ W1 + b1
    H = np.maximum(A, 0)
    loss, dZ = _softmax_loss(H @ W2 + b2, y)
    dA = (dZ @ W2.T) * (A > 0)

    counting = Counting(comm)
    model = TensorParallelMLP(counting, D, K, hidden)
    w = model.shard(np.concatenate([W1.ravel(), b1, W2.ravel(), b2]))
    got_loss, g = model.loss_grad(w, X, y)
    assert counting.allreduces == 1  # the forward's; the first layer's input gradient is not needed
    assert got_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(_gathered(comm, model.view(g, "W1"), 1), Xd.T @ dA, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_gathered(comm, model.view(g, "b1"), 0), dA.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_gathered(comm, model.view(g, "W2"), 0), H.T @ dZ, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.view(g, "b2"), dZ.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(model.predict(w, X), (H @ W2 + b2).argmax(1))
    lam = 0.3
    pen, pg = model.penalty(w, lam)
    assert pen == pytest.approx(0.5 * lam * ((W1 ** 2).sum() + (W2 ** 2).sum()), rel=1e-12)
    np.testing.assert_array_equal(pg, lam * w * model.penalised)


def test_megatron_block_communicates_once_each_way(comm):
    """Column then row layer inside a network: one all-reduce forward, one backward (the input's gradient)."""
    rng = np.random.default_rng(2)
    hidden = 10
    X, W1, W2 = rng.standard_normal((N, D)), rng.standard_normal((D, hidden)), rng.standard_normal((hidden, K))
    b1, b2, dY = rng.standard_normal(hidden), rng.standard_normal(K), rng.standard_normal((N, K))
    counting = Counting(comm)
    col, row = ColumnParallelLinear(counting, D, hidden), RowParallelLinear(counting, hidden, K)
    cW, cb = col.shard(W1, b1)
    rW, rb = row.shard(W2, b2)
    H = np.tanh(col.forward(cW, cb, X))
    Y = row.forward(rW, rb, H)
    assert counting.allreduces == 1
    np.testing.assert_allclose(Y, np.tanh(X @ W1 + b1) @ W2 + b2, rtol=1e-12, atol=1e-12)
    _, _, dH = row.backward(rW, H, dY)
    _, _, dX = col.backward(cW, X, dH * (1 - H ** 2))
    assert counting.allreduces == 2
    full_H = np.tanh(X @ W1 + b1)
    np.testing.assert_allclose(dX, ((dY @ W2.T) * (1 - full_H ** 2)) @ W1.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_feature_parallel_softmax(comm, sparse):
    X, y = _data(3, sparse)
    Xd = X.toarray() if sparse else X
    rng = np.random.default_rng(4)
    W, b = rng.standard_normal((D, K)), rng.standard_normal(K)
    loss, dZ = _softmax_loss(Xd @ W + b, y)
    model = FeatureParallelSoftmax(comm, D, K)
    w = model.shard(np.vstack([W, b]).ravel())
    got_loss, g = model.loss_grad(w, X, y)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(_gathered(comm, model.view(g, "W"), 0), Xd.T @ dZ, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.view(g, "b"), dZ.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(model.predict(w, X), (Xd @ W + b).argmax(1))
