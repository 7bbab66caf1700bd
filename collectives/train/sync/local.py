"""``local``: local SGD; each rank steps on its own rows, and the models are averaged every
``local_steps`` steps.

With ``compress``, what is averaged is the change since the last average (compressed, with
error feedback), added to that average on every rank.  The model evaluated and returned is
the ranks' average, and reports carry the consensus distance (the mean squared distance of
the ranks' models to it).  ``LocalModels`` is what local SGD shares with gossip: batches of
a rank's own rows, and that average.
"""
from .. import gossip
from .loop import Stepped


class LocalModels(Stepped):
    """A strategy whose ranks keep models of their own, trained on their own rows."""

    def start(self, w, opt):
        """Steps per epoch: as many as the rank with the most rows needs (collective)."""
        self.steps = self.ctx.batches.local_steps()

    def plan(self, epoch):
        """``steps`` batches of this rank's rows."""
        return self.ctx.batches.local_batches(epoch, self.steps)

    def model_of(self, w):
        """The ranks' average model; keeps the consensus distance of their models for the report."""
        ctx = self.ctx
        with ctx.clock("eval"):
            out, ctx.progress.consensus = gossip.consensus_distance(ctx.comm, w)
        return out


class Local(LocalModels):
    """Local SGD: local steps, models averaged every ``local_steps`` steps."""

    name = "local"
    compressible = True

    def start(self, w, opt):
        """Steps per epoch and, with a compressor, the first average (collective)."""
        super().start(w, opt)
        self.anchor = None if self.ctx.sums.compression.compressor is None else self.ctx.sums.average(w)

    def step(self, w, opt, epoch, s, item):
        """A step on this rank's batch; every ``local_steps`` steps, the average."""
        ctx = self.ctx
        index, count = item
        g = ctx.batch_gradient(w, index, count)
        with ctx.updating():
            opt.step(w, g)
        if (ctx.progress.t + 1) % ctx.o["local_steps"] == 0:
            w[...] = ctx.sums.average(w) if self.anchor is None else ctx.sums.compressed_average(w, self.anchor)
