"""Full-batch L-BFGS and Newton under ``sync``: every iteration evaluates the objective (and
Newton its Hessian) over every rank's rows, all-reduced, so all ranks take the same
iterates; training stops when an iteration no longer moves or max |gradient| < ``tol``.
"""
import numpy as np

from .loop import Stepped


class FullBatch(Stepped):
    """Deterministic optimizer iterations on the global objective, one per step."""

    def start(self, w, opt):
        """Evaluate the objective at the starting point."""
        self.F, self.G = self.ctx.objective.value(w)
        self.extra = (self.ctx.objective.hessian,) if self.ctx.o["optimizer"] == "newton" else ()

    def plan(self, epoch):
        """One iteration per epoch."""
        return [None]

    def step(self, w, opt, epoch, s, item):
        """One optimizer iteration; True when converged."""
        with self.ctx.updating():
            wn, self.F, self.G = opt.iterate(w, self.F, self.G, self.ctx.objective.value, *self.extra)
        moved = not np.array_equal(wn, w)
        w[...] = wn
        return not moved or np.abs(self.G).max() < self.ctx.o["tol"]
