"""Optimizers: minibatch SGD (momentum, 1/sqrt(t) steps), Adam, L-BFGS and Newton.

Stochastic optimizers take a gradient and update the parameters in place.  L-BFGS and
Newton drive a deterministic objective ``f(w) -> (F, G)`` whose values are all-reduced,
so every rank computes bit-identical iterates and takes the same branch in every test:
the ranks run in lockstep without ever exchanging a decision.

Each optimizer's ``state_dict()`` is a dict of arrays and numbers for a checkpoint, and
``load_state_dict(state)`` restores it exactly.
"""
import numpy as np


class SGD:
    """w -= lr_t * v with v = momentum * v + g; lr_t = lr, or lr / sqrt(t) with ``schedule='sqrt'``."""

    def __init__(self, size, lr=0.1, momentum=0.0, schedule="const"):
        if schedule not in ("const", "sqrt"):
            raise ValueError(f"unknown SGD schedule {schedule!r}; 'const' or 'sqrt'")
        self.lr, self.momentum, self.schedule = lr, momentum, schedule
        self.t = 0
        self.v = np.zeros(size)

    def rate(self):
        """The step size of the next step."""
        return self.lr / np.sqrt(self.t + 1) if self.schedule == "sqrt" else self.lr

    def step(self, w, g):
        """One update of ``w`` in place with gradient ``g``."""
        lr = self.rate()
        self.t += 1
        if self.momentum:
            self.v *= self.momentum
            self.v += g
            g = self.v
        w -= lr * g

    def state_dict(self):
        """Checkpoint state."""
        return {"t": self.t, "v": self.v.copy()}

    def load_state_dict(self, state):
        """Restore a checkpoint state."""
        self.t = int(state["t"])
        self.v[...] = state["v"]


class Adam:
    """Adam (Kingma & Ba) with bias correction; ``decay=True`` uses alpha_t = alpha / sqrt(t)."""

    def __init__(self, size, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, decay=False):
        self.lr, self.beta1, self.beta2, self.eps, self.decay = lr, beta1, beta2, eps, decay
        self.t = 0
        self.m = np.zeros(size)
        self.v = np.zeros(size)

    def step(self, w, g):
        """One update of ``w`` in place with gradient ``g``."""
        self.t += 1
        t = self.t
        self.m *= self.beta1
        self.m += (1 - self.beta1) * g
        self.v *= self.beta2
        self.v += (1 - self.beta2) * g * g
        lr = self.lr / np.sqrt(t) if self.decay else self.lr
        lr *= np.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t)
        w -= lr * self.m / (np.sqrt(self.v) + self.eps)

    def state_dict(self):
        """Checkpoint state."""
        return {"t": self.t, "m": self.m.copy(), "v": self.v.copy()}

    def load_state_dict(self, state):
        """Restore a checkpoint state."""
        self.t = int(state["t"])
        self.m[...] = state["m"]
        self.v[...] = state["v"]


def _cubic_min(a, fa, ga, b, fb, gb):
    """Minimiser of the cubic through (a, fa, ga), (b, fb, gb), or None when it has none."""
    d1 = ga + gb - 3 * (fa - fb) / (a - b)
    disc = d1 * d1 - ga * gb
    if disc < 0:
        return None
    d2 = np.copysign(np.sqrt(disc), b - a)
    return b - (b - a) * (gb + d2 - d1) / (gb - ga + 2 * d2)


def wolfe_search(phi, f0, g0, step, c1=1e-4, c2=0.9, max_evals=30):
    """A step length satisfying the strong Wolfe conditions (Nocedal & Wright, Alg. 3.5/3.6).

    ``phi(a) -> (f, g, extra)`` evaluates the objective along the search direction, ``g``
    being the directional derivative.  Returns ``(a, f, g, extra)``; with no acceptable
    step within ``max_evals`` evaluations, the best point seen (possibly a = 0: no progress).
    """
    best = (0.0, f0, g0, None)
    prev_a, prev_f, prev_g = 0.0, f0, g0
    a = step
    lo = hi = None
    evals = 0
    while evals < max_evals:
        f, g, extra = phi(a)
        evals += 1
        if f < best[1]:
            best = (a, f, g, extra)
        if f > f0 + c1 * a * g0 or (evals > 1 and f >= prev_f):
            lo, hi = (prev_a, prev_f, prev_g), (a, f, g)
            break
        if abs(g) <= -c2 * g0:
            return a, f, g, extra
        if g >= 0:
            lo, hi = (a, f, g), (prev_a, prev_f, prev_g)
            break
        prev_a, prev_f, prev_g = a, f, g
        a *= 2
    else:
        return best
    # zoom: the bracket [lo, hi] holds a step satisfying both conditions
    while evals < max_evals:
        (la, lf, lg), (ha, hf, hg) = lo, hi
        a = _cubic_min(la, lf, lg, ha, hf, hg)
        width = abs(ha - la)
        if a is None or not min(la, ha) + 0.1 * width <= a <= max(la, ha) - 0.1 * width:
            a = 0.5 * (la + ha)
        f, g, extra = phi(a)
        evals += 1
        if f < best[1]:
            best = (a, f, g, extra)
        if f > f0 + c1 * a * g0 or f >= lf:
            hi = (a, f, g)
        else:
            if abs(g) <= -c2 * g0:
                return a, f, g, extra
            if g * (ha - la) >= 0:
                hi = lo
            lo = (a, f, g)
        if width < 1e-16 * max(1.0, abs(a)):
            break
    return best


class LBFGS:
    """Limited-memory BFGS: two-loop recursion over the last ``m`` pairs, strong-Wolfe line search."""

    def __init__(self, size, m=10):
        self.m = m
        self.S, self.Y = [], []
        self.t = 0

    def direction(self, g):
        """-H g for the current inverse-Hessian approximation H (two-loop recursion)."""
        q = -g.copy()
        alphas = []
        for s, y in zip(reversed(self.S), reversed(self.Y)):
            a = (s @ q) / (y @ s)
            q -= a * y
            alphas.append(a)
        if self.S:
            s, y = self.S[-1], self.Y[-1]
            q *= (s @ y) / (y @ y)
        for (s, y), a in zip(zip(self.S, self.Y), reversed(alphas)):
            q += (a - (y @ q) / (y @ s)) * s
        return q

    def iterate(self, w, F, G, f):
        """One iteration from (w, F, G) with objective ``f``; returns the new (w, F, G)."""
        d = self.direction(G)
        slope = float(G @ d)
        if slope >= 0:  # not a descent direction (lost curvature): restart from steepest descent
            self.S, self.Y = [], []
            d, slope = -G, -float(G @ G)
        step = 1.0 if self.S else min(1.0, 1.0 / max(np.abs(G).sum(), 1e-300))

        def phi(a):
            wa = w + a * d
            Fa, Ga = f(wa)
            return Fa, float(Ga @ d), (wa, Ga)

        a, Fn, _, extra = wolfe_search(phi, F, slope, step)
        self.t += 1
        if extra is None:
            return w, F, G
        wn, Gn = extra
        s, y = wn - w, Gn - G
        if s @ y > 1e-12 * (y @ y):
            self.S.append(s)
            self.Y.append(y)
            if len(self.S) > self.m:
                self.S.pop(0)
                self.Y.pop(0)
        return wn, Fn, Gn

    def state_dict(self):
        """Checkpoint state."""
        return {"t": self.t, "S": np.array(self.S), "Y": np.array(self.Y)}

    def load_state_dict(self, state):
        """Restore a checkpoint state."""
        self.t = int(state["t"])
        self.S, self.Y = list(state["S"]), list(state["Y"])


class Newton:
    """Newton's method with the all-reduced Hessian and a backtracking (Armijo) line search."""

    def __init__(self, size):
        self.t = 0

    def iterate(self, w, F, G, f, hess):
        """One iteration from (w, F, G); ``hess(w)`` gives the global Hessian."""
        H = hess(w)
        try:
            d = -np.linalg.solve(H, G)
        except np.linalg.LinAlgError:
            # singular: softmax's unpenalised intercepts are redundant (one constant added to every
            # class changes nothing) and rounding does not always hide it; take the least-norm step
            d = -np.linalg.lstsq(H, G, rcond=None)[0]
        slope = float(G @ d)
        a = 1.0
        self.t += 1
        for _ in range(40):
            wn = w + a * d
            Fn, Gn = f(wn)
            if Fn <= F + 1e-4 * a * slope:
                return wn, Fn, Gn
            a *= 0.5
        return w, F, G

    def state_dict(self):
        """Checkpoint state."""
        return {"t": self.t}

    def load_state_dict(self, state):
        """Restore a checkpoint state."""
        self.t = int(state["t"])


STOCHASTIC = {"sgd": SGD, "adam": Adam}
BATCH = {"lbfgs": LBFGS, "newton": Newton}
OPTIMIZERS = (*STOCHASTIC, *BATCH)


def make(o, size):
    """A fresh optimizer for ``size`` parameters, of the kind and settings the training options ``o`` name."""
    name = o["optimizer"]
    if name == "sgd":
        return SGD(size, o["lr"], o["momentum"], o["schedule"])
    if name == "adam":
        return Adam(size, o["lr"], decay=o["adam_decay"])
    if name == "lbfgs":
        return LBFGS(size, o["history"])
    return Newton(size)
