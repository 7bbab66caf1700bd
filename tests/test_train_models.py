"""Models' gradients and Hessians against finite differences; optimizers on a known quadratic."""
import numpy as np
import pytest
import scipy.sparse as sp

from collectives.train.models import make_model
from collectives.train.optim import LBFGS, SGD, Adam, Newton, wolfe_search

pytestmark = pytest.mark.serial

N, D, K = 30, 5, 3


def _data(name, sparse, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    X[rng.random((N, D)) < 0.3] = 0
    y = {"softmax": rng.integers(0, K, N), "mlp": rng.integers(0, K, N),
         "logistic": rng.integers(0, 2, N), "linear": rng.standard_normal(N)}[name]
    return (sp.csr_matrix(X) if sparse else X), y


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("name", ["softmax", "logistic", "linear", "mlp"])
def test_gradient_and_hessian(name, sparse):
    X, y = _data(name, sparse)
    model = make_model(name, D, 2 if name == "logistic" else K, hidden=4)
    rng = np.random.default_rng(1)
    w = rng.standard_normal(model.size) * 0.5
    lam = 0.3

    def f(v):
        loss, g = model.loss_grad(v, X, y)
        pen, pg = model.penalty(v, lam)
        return loss + pen, g + pg

    _, g = f(w)
    h = 1e-6
    fd = np.array([(f(w + h * e)[0] - f(w - h * e)[0]) / (2 * h) for e in np.eye(model.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    if hasattr(model, "hessian"):
        H = model.hessian(w, X, y) + lam * np.diag(model.penalised)
        fdH = np.array([(f(w + h * e)[1] - f(w - h * e)[1]) / (2 * h) for e in np.eye(model.size)])
        np.testing.assert_allclose(H, fdH, rtol=1e-5, atol=1e-5)
    parts = model.backward(w, X, y)
    assert next(parts)[0] == pytest.approx(model.loss_grad(w, X, y)[0])
    g2 = np.zeros(model.size)
    for part_name, part in parts:
        g2[model.slices[part_name][0]] = part
    np.testing.assert_array_equal(g2, model.loss_grad(w, X, y)[1])


def test_intercept_not_penalised():
    model = make_model("softmax", D, K)
    w = np.ones(model.size)
    pen, g = model.penalty(w, 2.0)
    assert pen == pytest.approx(D * K)
    np.testing.assert_array_equal(g.reshape(D + 1, K)[-1], 0)


def test_make_model_errors():
    with pytest.raises(ValueError, match="unknown model"):
        make_model("svm", D, K)
    with pytest.raises(ValueError, match="binary"):
        make_model("logistic", D, 3)


A = np.diag([1.0, 10.0, 100.0])
B = np.array([1.0, -2.0, 3.0])
XSTAR = np.linalg.solve(A, B)


def quad(w):
    """0.5 w'Aw - b'w and its gradient."""
    return 0.5 * w @ A @ w - B @ w, A @ w - B


def test_wolfe_conditions():
    w = np.zeros(3)
    F, G = quad(w)
    d = -G

    def phi(a):
        Fa, Ga = quad(w + a * d)
        return Fa, Ga @ d, None

    for step in (1e-4, 1.0, 100.0):
        a, Fa, ga, _ = wolfe_search(phi, F, G @ d, step)
        assert Fa <= F + 1e-4 * a * (G @ d)
        assert abs(ga) <= 0.9 * abs(G @ d)


@pytest.mark.parametrize("opt", [LBFGS, Newton])
def test_batch_optimizers_on_quadratic(opt):
    w = np.zeros(3)
    F, G = quad(w)
    o = opt(3)
    for _ in range(50):
        w, F, G = o.iterate(w, F, G, quad, lambda v: A) if opt is Newton else o.iterate(w, F, G, quad)
    np.testing.assert_allclose(w, XSTAR, rtol=1e-8)


@pytest.mark.parametrize("make", [lambda: SGD(3, 0.009, 0.9), lambda: SGD(3, 0.009, 0.0),
                                  lambda: Adam(3, 0.05), lambda: Adam(3, 0.1, decay=True)],
                         ids=["momentum", "sgd", "adam", "adam-decay"])
def test_stochastic_optimizers_on_quadratic(make):
    o = make()
    w = np.zeros(3)
    for _ in range(3000):
        o.step(w, quad(w)[1])
    np.testing.assert_allclose(w, XSTAR, rtol=1e-2, atol=1e-3)
    # a restored state continues exactly
    clone = make()
    clone.load_state_dict(o.state_dict())
    w2 = w.copy()
    for _ in range(5):
        o.step(w, quad(w)[1])
        clone.step(w2, quad(w2)[1])
    np.testing.assert_array_equal(w, w2)


def test_sqrt_schedule():
    o = SGD(1, 0.5, schedule="sqrt")
    w = np.zeros(1)
    for t in range(1, 5):
        assert o.rate() == 0.5 / np.sqrt(t)
        o.step(w, np.ones(1))
    assert w[0] == pytest.approx(-0.5 * sum(1 / np.sqrt(t) for t in range(1, 5)))
    with pytest.raises(ValueError, match="schedule"):
        SGD(1, schedule="cosine")
