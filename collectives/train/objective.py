"""The training objective over every rank's rows: mean loss plus (lambda/2)||W||^2.

Its value and gradient (and Hessian, for Newton) summed over the ranks for the full-batch
optimizers, the penalty's gradient for the stochastic ones, the reproducible sums that add
rows in fixed shards, and the evaluation of a model on the training and test rows.
"""
import numpy as np
from mpi4py import MPI

from . import data as D


class Objective:
    """The objective of the run whose Context is ``ctx``."""

    def __init__(self, ctx):
        self.ctx = ctx

    def add_penalty(self, w, g):
        """g + gradient of the penalty at ``w``."""
        return g + self.ctx.model.penalty(w, self.ctx.o["lam"])[1]

    def shard_sum(self, w, index, with_loss=False):
        """Loss gradient (after the loss, ``with_loss``) summed over local rows ``index`` and over the
        ranks, shard by shard in a fixed tree: the same bits at any rank count (reproducible mode)."""
        ctx = self.ctx

        def partial(at):
            rows = index[at]
            loss, g = ctx.model.loss_grad(w, ctx.train.X[rows], ctx.train.y[rows])
            return np.concatenate(([loss], g)) if with_loss else g

        with ctx.computing():
            partials = D.shard_partials(ctx.shard[index], ctx.model.size + with_loss, partial)
        ctx.sums.allreduce(partials)
        with ctx.clock("compute"):
            return D.tree_sum(partials)

    def value(self, w):
        """Global (F, G) at ``w``: mean loss over every training row plus the penalty."""
        ctx = self.ctx
        if ctx.o["reproducible"]:
            buf = self.shard_sum(w, np.arange(len(ctx.train)), with_loss=True)
        else:
            with ctx.computing():
                loss, g = ctx.model.loss_grad(w, ctx.train.X, ctx.train.y)
            buf = ctx.sums.allreduce(np.concatenate(([loss], g)))
        pen, pg = ctx.model.penalty(w, ctx.o["lam"])
        return buf[0] / ctx.n + pen, buf[1:] / ctx.n + pg

    def hessian(self, w):
        """Global Hessian of the objective at ``w``."""
        ctx = self.ctx
        with ctx.computing():
            H = ctx.model.hessian(w, ctx.train.X, ctx.train.y)
        ctx.sums.allreduce(H)
        H /= ctx.n
        H[np.diag_indices_from(H)] += ctx.o["lam"] * ctx.model.penalised
        return H

    def evaluate(self, w, comm=None):
        """Global (objective, train metric, test metric) at ``w``; accuracy or RMSE."""
        ctx = self.ctx
        comm = comm or ctx.comm
        with ctx.clock("eval"):
            buf = np.zeros(5)
            loss, _ = ctx.model.loss_grad(w, ctx.train.X, ctx.train.y)
            buf[0] = loss
            for i, part in ((1, ctx.train), (3, ctx.test)):
                if part is None or not len(part):
                    continue
                pred = ctx.model.predict(w, part.X)
                buf[i] = (pred == part.y).sum() if ctx.is_classifier else ((pred - part.y) ** 2).sum()
                buf[i + 1] = len(part)
            comm.Allreduce(MPI.IN_PLACE, buf)
            F = buf[0] / max(buf[2], 1) + ctx.model.penalty(w, ctx.o["lam"])[0]
            metric = [buf[i] / buf[i + 1] if buf[i + 1] else float("nan") for i in (1, 3)]
            if not ctx.is_classifier:
                metric = [float(np.sqrt(m)) for m in metric]
        return F, metric[0], metric[1]
