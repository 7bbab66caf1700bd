"""``sync``: data parallel SGD or Adam; every step all-reduces the gradient of a global minibatch.

Each rank computes the gradient sum over its rows of the step's global minibatch
(collectives.train.batches); the sum over the ranks, through any ``allreduce`` algorithm or
``compress``or, divided by the batch size, is the step every rank takes, so the ranks keep
identical parameters.  In reproducible mode the sum goes shard by shard in a fixed tree
(the same bits at any rank count).  L-BFGS and Newton under ``sync`` are full_batch's.
"""
from .loop import Stepped


class Sync(Stepped):
    """Synchronous data-parallel minibatch steps."""

    name = "sync"
    compressible = True

    def plan(self, epoch):
        """The epoch's global minibatches."""
        ctx = self.ctx
        return ctx.batches.global_batches(epoch, ctx.n, ctx.train.rows)

    def step(self, w, opt, epoch, s, item):
        """One step on the all-reduced gradient of minibatch ``item``."""
        ctx = self.ctx
        index, count = item
        if ctx.o["reproducible"]:
            g = ctx.objective.shard_sum(w, index)
        else:
            g = ctx.sums.gradient(ctx.local_gradient(w, index))
        with ctx.updating():
            opt.step(w, ctx.objective.add_penalty(w, g / count))
