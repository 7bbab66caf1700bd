"""Models over a flat float64 parameter vector, in NumPy (X dense or scipy.sparse CSR).

Every model returns *sums* over the rows it is given (loss, gradient, Hessian), so ranks
add their sums with one all-reduce and divide by the global row count; the L2 penalty
(lambda/2)||W||^2 on the weights (never the intercepts) is added once, after the reduction.
"""
import numpy as np


def _logsumexp(Z):
    """log(sum(exp(Z), axis=1)), shifted by the row maximum (scipy's is slow on small arrays)."""
    if not Z.shape[0]:
        return np.zeros(0)
    m = Z.max(1)
    return m + np.log(np.exp(Z - m[:, None]).sum(1))


def _expit(z):
    """The logistic function 1 / (1 + exp(-z)), without overflow for large |z|."""
    return np.exp(-np.logaddexp(0, -z))


def _augment(X):
    """Columns of X followed by a column of ones, dense (for Hessians of small models)."""
    dense = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    return np.hstack([dense, np.ones((dense.shape[0], 1))])


def layout(shapes):
    """(name -> (slice, shape), total size) of the arrays [(name, shape)] laid end to end in one vector."""
    slices, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        slices[name] = (slice(at, at + n), shape)
        at += n
    return slices, at


class Model:
    """What every model shares: the L2 penalty over the entries marked in ``penalised``."""

    def penalty(self, w, lam):
        """(lambda/2)||W||^2 over the weights (not the intercepts) and its gradient."""
        pw = w * self.penalised
        return 0.5 * lam * float(pw @ pw), lam * pw


class Linear(Model):
    """Common shape of the generalised linear models: W is (n_features + 1) x outputs, last row the intercept."""

    outputs = 1

    def __init__(self, n_features, n_classes=None):
        self.d = n_features
        self.k = self.outputs if self.outputs else n_classes
        self.size = (n_features + 1) * self.k
        mask = np.ones((n_features + 1, self.k))
        mask[-1] = 0
        self.penalised = mask.ravel()
        self.slices = {"W": (slice(0, self.size), (n_features + 1, self.k))}

    def init(self, rng):
        """Initial parameters: zeros (the objectives are convex)."""
        return np.zeros(self.size)

    def _split(self, w):
        W = w.reshape(self.d + 1, self.k)
        return W[:-1], W[-1]

    def scores(self, w, X):
        """Linear scores X W + b, one column per output."""
        W, b = self._split(w)
        return np.asarray(X @ W) + b

    def _pack(self, X, R):
        """Gradient sum of the scores' residuals R: [X^T R; sum R], flattened."""
        return np.vstack([np.asarray(X.T @ R), R.sum(0, keepdims=True)]).ravel()

    def backward(self, w, X, y):
        """Summed loss, then the whole gradient as one part (see MLP.backward)."""
        loss, g = self.loss_grad(w, X, y)
        yield loss, None
        yield "W", g


class Softmax(Linear):
    """Multinomial logistic regression: mean cross-entropy over K classes (y = class index)."""

    outputs = None

    def loss_grad(self, w, X, y):
        """Summed cross-entropy over the rows and its gradient."""
        Z = self.scores(w, X)
        lse = _logsumexp(Z)
        rows = np.arange(len(y))
        loss = float(lse.sum() - Z[rows, y].sum())
        P = np.exp(Z - lse[:, None])
        P[rows, y] -= 1
        return loss, self._pack(X, P)

    def hessian(self, w, X, y):
        """Summed Hessian of the cross-entropy, (size x size)."""
        A = _augment(X)
        Z = self.scores(w, X)
        P = np.exp(Z - _logsumexp(Z)[:, None])
        H = np.zeros((self.d + 1, self.k, self.d + 1, self.k))
        for k in range(self.k):
            for m in range(k, self.k):
                c = P[:, k] * ((k == m) - P[:, m])
                H[:, k, :, m] = A.T @ (A * c[:, None])
                H[:, m, :, k] = H[:, k, :, m]
        return H.reshape(self.size, self.size)

    def predict(self, w, X):
        """Class index of the largest score."""
        return self.scores(w, X).argmax(1)


class Logistic(Linear):
    """Binary logistic regression (y in {0, 1})."""

    def loss_grad(self, w, X, y):
        """Summed log-loss over the rows and its gradient."""
        z = self.scores(w, X)[:, 0]
        loss = float((np.logaddexp(0, z) - y * z).sum())
        return loss, self._pack(X, (_expit(z) - y)[:, None])

    def hessian(self, w, X, y):
        """Summed Hessian of the log-loss."""
        A = _augment(X)
        p = _expit(self.scores(w, X)[:, 0])
        return A.T @ (A * (p * (1 - p))[:, None])

    def predict(self, w, X):
        """1 where the score is positive, else 0."""
        return (self.scores(w, X)[:, 0] > 0).astype(np.int64)


class LeastSquares(Linear):
    """Linear regression: half the squared residual per row (y real)."""

    def loss_grad(self, w, X, y):
        """Summed (1/2)(x.w + b - y)^2 and its gradient."""
        r = self.scores(w, X)[:, 0] - y
        return 0.5 * float(r @ r), self._pack(X, r[:, None])

    def hessian(self, w, X, y):
        """Summed Hessian [X 1]^T [X 1]."""
        A = _augment(X)
        return A.T @ A

    def predict(self, w, X):
        """The fitted values."""
        return self.scores(w, X)[:, 0]


class MLP(Model):
    """One hidden ReLU layer and a softmax output; parameters W1, b1, W2, b2 in one vector."""

    def __init__(self, n_features, n_classes, hidden=64):
        self.d, self.k, self.h = n_features, n_classes, hidden
        shapes = [("W1", (n_features, hidden)), ("b1", (hidden,)), ("W2", (hidden, n_classes)), ("b2", (n_classes,))]
        self.slices, self.size = layout(shapes)
        self.penalised = np.zeros(self.size)
        for name in ("W1", "W2"):
            self.penalised[self.slices[name][0]] = 1

    def init(self, rng):
        """He-scaled random weights, zero biases."""
        w = np.zeros(self.size)
        for name, fan_in in (("W1", self.d), ("W2", self.h)):
            sl, _ = self.slices[name]
            w[sl] = rng.standard_normal(sl.stop - sl.start) * np.sqrt(2.0 / max(fan_in, 1))
        return w

    def _view(self, w, name):
        sl, shape = self.slices[name]
        return w[sl].reshape(shape)

    def _forward(self, w, X):
        A = np.asarray(X @ self._view(w, "W1")) + self._view(w, "b1")
        H = np.maximum(A, 0)
        return H, H @ self._view(w, "W2") + self._view(w, "b2")

    def backward(self, w, X, y):
        """Summed loss, then the gradient sums yielded layer by layer from the output back.

        Yields ``(loss, None)`` first, then ``(name, grad)`` for b2, W2, b1, W1, so a caller
        can start communicating the output layer while the earlier layers are computed.
        """
        H, Z = self._forward(w, X)
        lse = _logsumexp(Z)
        rows = np.arange(len(y))
        yield float(lse.sum() - Z[rows, y].sum()), None
        D = np.exp(Z - lse[:, None])
        D[rows, y] -= 1
        yield "b2", D.sum(0)
        yield "W2", (H.T @ D).ravel()
        D = (D @ self._view(w, "W2").T) * (H > 0)
        yield "b1", D.sum(0)
        yield "W1", np.asarray(X.T @ D).ravel()

    def loss_grad(self, w, X, y):
        """Summed cross-entropy over the rows and its gradient."""
        parts = self.backward(w, X, y)
        loss, _ = next(parts)
        g = np.empty(self.size)
        for name, part in parts:
            g[self.slices[name][0]] = part
        return loss, g

    def predict(self, w, X):
        """Class index of the largest output."""
        return self._forward(w, X)[1].argmax(1)


MODELS = {"softmax": Softmax, "logistic": Logistic, "linear": LeastSquares, "mlp": MLP}
CLASSIFIERS = ("softmax", "logistic", "mlp")


def make_model(name, n_features, n_classes, hidden=64):
    """The model called ``name`` (one of MODELS) for this data shape."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    if name == "logistic" and n_classes != 2:
        raise ValueError(f"model 'logistic' is binary but the data has {n_classes} classes; use 'softmax'")
    if name == "mlp":
        return MLP(n_features, n_classes, hidden)
    return MODELS[name](n_features, n_classes)
