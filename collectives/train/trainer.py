"""The Trainer: one training run over the ranks of a communicator, from options to metrics.

``Trainer(comm, model, train, test, **options).fit()`` minimises the mean loss plus
(lambda/2)||W||^2 over the rows every rank holds.  The options (collectives.train.options)
are checked first; ``sync`` picks the strategy that runs the training
(collectives.train.sync), on a Context (collectives.train.context) that holds what it may
use: the communicator, the data, the clock and progress, and the parts that sum, batch,
evaluate, report and checkpoint.

``data_servers`` K (with ``sync``) has K ranks serve the others their minibatches
(collectives.train.dataserver).  ``straggler`` slows chosen ranks' computation down
(collectives.train.straggler); ``measure_wait`` times the wait for the slowest peer before
each exchange apart from the exchange itself.  Local models report their consensus distance.
With ``checkpoint``, a SIGTERM checkpoints at the next step and stops
(collectives.train.preemption).
"""
import time

import numpy as np
from mpi4py import MPI

from . import data as D
from .context import Context
from .errors import DataError
from .options import check_options
from .sync import choose


class Trainer:
    """Train ``model`` on this rank's ``train`` Part, cooperating over collectives.Comm ``comm``.

    Options are the keys of DEFAULTS (the command line's flags); see ``python -m
    collectives train --help`` for their meaning.
    """

    def __init__(self, comm, model, train, test=None, is_classifier=True, **options):
        o = check_options(options, model, comm.Get_size())
        self.o = o
        self.comm, self.model = comm, model
        self.ctx = Context(comm, model, train, test, is_classifier, o, self.local_gradient)
        self.clock = self.ctx.clock

    def local_gradient(self, w, index):
        """Summed loss gradient over local rows ``index`` (no communication)."""
        # Every strategy computes its gradients through this method (the Context holds it
        # bound), so one wrapper of Trainer.local_gradient reaches them all.
        ctx = self.ctx
        with ctx.computing():
            return self.model.loss_grad(w, ctx.train.X[index], ctx.train.y[index])[1]

    def fit(self):
        """Train; returns the final parameter vector (identical on every rank)."""
        o, ctx = self.o, self.ctx
        ctx.start = time.perf_counter()
        counts = np.array([len(ctx.train), 0 if ctx.test is None else len(ctx.test)])
        self.comm.comm.Allreduce(MPI.IN_PLACE, counts)
        ctx.n, ctx.n_test = (int(c) for c in counts)
        if o["reproducible"]:
            ctx.train = D.by_shard(self.comm.comm, ctx.train)
            ctx.shard = D.shard_of(ctx.train.rows, ctx.n)
        # the parameter server looks at SIGTERM at its checkpoint boundaries only
        with ctx.preemption.sigterm(bool(o["checkpoint"] and (o["sync"] != "ps" or o["checkpoint_every"]))):
            self.w = choose(o)(ctx).run()
        self.elapsed = time.perf_counter() - ctx.start
        self.final = ctx.objective.evaluate(self.w)
        return self.w

    # What the run reached, for its callers.
    history = property(lambda self: self.ctx.progress.history, doc="The report rows, one per reported epoch.")
    t = property(lambda self: self.ctx.progress.t, doc="Steps taken.")
    overlap = property(lambda self: self.ctx.progress.overlap, doc="ddp: the share of communication hidden.")
    staleness = property(lambda self: self.ctx.progress.staleness,
                         doc="ps with tau >= 0: per step, how many steps old the parameters read were.")
    n = property(lambda self: self.ctx.n, doc="Training rows over every rank.")
    n_test = property(lambda self: self.ctx.n_test, doc="Test rows over every rank.")
    preempted = property(lambda self: self.ctx.preemption.preempted,
                         doc="Whether the ranks checkpointed and stopped on a SIGTERM.")

    def check_finite(self):
        """DataError (``diverged``) unless the final objective and parameters are finite."""
        if not (np.isfinite(self.final[0]) and np.isfinite(self.w).all()):
            raise DataError(self.ctx.reporter.diverged())

    def metrics(self):
        """Everything worth keeping about the run, as a JSON-ready dict."""
        F, train_m, test_m = self.final
        return dict(options={k: v for k, v in self.o.items() if k != "progress"}, nranks=self.ctx.size,
                    objective=F, train_metric=train_m, test_metric=test_m if self.n_test else None, steps=self.t,
                    seconds=self.elapsed, time=self.clock.total, overlap=self.overlap,
                    max_staleness=max(self.staleness, default=None),
                    history=self.history)
