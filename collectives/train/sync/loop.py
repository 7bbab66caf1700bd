"""The loop that the stepped strategies share: epochs of steps, progress, reports, checkpoints
and preemption at step boundaries.

A stepped strategy says what an epoch's steps are (``plan``), runs one (``step``) and which
model to evaluate and return (``model_of``: the parameters, or the ranks' average for the
local models).  ``run`` starts from the seeded initial model or the checkpoint, calls
``start`` (where a strategy prepares, collectively if it must), then loops.
"""
import numpy as np

from .. import checkpoint as ckpt


class Stepped:
    """Base class of the strategies that run in the common loop, on the run's Context ``ctx``."""

    compressible = False    # runs --compress (the options' check reads this)

    def __init__(self, ctx):
        self.ctx = ctx

    def run(self):
        """Train; returns the final parameter vector (identical on every rank)."""
        ctx, o = self.ctx, self.ctx.o
        w = ctx.model.init(np.random.default_rng(o["seed"]))
        opt = ctx.new_optimizer()
        epoch0 = step0 = 0
        if ctx.checkpoints.resuming():
            w, epoch0, step0 = ctx.checkpoints.restore(o["checkpoint"], opt)
        self.start(w, opt)
        return self.loop(w, opt, epoch0, step0)

    def start(self, w, opt):
        """Prepare to run from parameters ``w`` and optimizer ``opt`` (nothing by default)."""

    def plan(self, epoch):
        """The items of ``epoch``'s steps, one per step."""
        raise NotImplementedError

    def step(self, w, opt, epoch, s, item):
        """Run step ``s`` of ``epoch`` on ``item``, updating ``w`` in place; True ends training (converged)."""
        raise NotImplementedError

    def model_of(self, w):
        """The model to evaluate and return."""
        return w

    def loop(self, w, opt, epoch0, step0):
        """Run epochs from step ``step0`` of ``epoch0``; returns ``model_of(w)``."""
        ctx, o = self.ctx, self.ctx.o
        progress, preemption = ctx.progress, ctx.preemption
        for epoch in range(epoch0, o["epochs"]):
            items = self.plan(epoch)
            for s in range(step0 if epoch == epoch0 else 0, len(items)):
                converged = self.step(w, opt, epoch, s, items[s])
                progress.t += 1
                ctx.reporter.bar(epoch, s, len(items))
                last = s + 1 == len(items)
                if o["checkpoint"] and ckpt.anyone(ctx.comm.comm, preemption.terminated):
                    preemption.preempted = True  # on every rank at this same step, wherever the signal landed
                stop = (converged or preemption.preempted
                        or (o["max_steps"] is not None and progress.t >= o["max_steps"]))
                if stop:
                    ctx.reporter.report(epoch, self.model_of(w), force=True)
                if o["checkpoint"] and ((o["checkpoint_every"] and progress.t % o["checkpoint_every"] == 0) or stop):
                    with ctx.checkpointing():
                        ctx.checkpoints.save_step(o["checkpoint"], epoch + last, 0 if last else s + 1, w, opt)
                if stop:
                    return self.model_of(w)
            ctx.reporter.report(epoch, self.model_of(w))
        return self.model_of(w)
