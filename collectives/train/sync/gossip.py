"""``gossip``: each step, every rank mixes its model with its neighbours' in a ``topology``
(ring, torus, exponential, random matching) by Metropolis-Hastings weights
(collectives.train.gossip); the model returned is the ranks' average.
"""
from .. import gossip
from .local import LocalModels


class Gossip(LocalModels):
    """Local steps, each followed by one gossip mixing step with the neighbours."""

    name = "gossip"

    def start(self, w, opt):
        """Steps per epoch (collective) and this rank's mixer."""
        super().start(w, opt)
        ctx = self.ctx
        self.mixer = gossip.Gossip(ctx.o["topology"], ctx.size, ctx.rank, ctx.o["seed"])

    def step(self, w, opt, epoch, s, item):
        """A step on this rank's batch, then the exchange with the neighbours and their weighted sum."""
        ctx = self.ctx
        index, count = item
        g = ctx.batch_gradient(w, index, count)
        with ctx.updating():
            opt.step(w, g)
        weights = self.mixer.row(ctx.progress.t)
        ctx.sums.synchronise(peers=sorted(set(weights) - {ctx.rank}))
        with ctx.clock("comm"):
            inbox = self.mixer.exchange(ctx.comm, w, weights)
        with ctx.clock("compute"):
            w[...] = self.mixer.combine(w, weights, inbox)
