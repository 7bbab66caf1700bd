"""What a synchronisation strategy, the parameter server and the data servers see of a
training run: its communicator, options, model and rows, its clock and progress, and the
parts that sum, compute, batch, report and checkpoint for it."""
import contextlib
import sys
import time

from .. import timeline
from . import optim, straggler as stragglers
from .batches import Batches
from .checkpoint import Checkpoints
from .objective import Objective
from .preemption import Preemption
from .report import Reporter
from .sums import Sums


class Clock:
    """Seconds spent per activity: compute, comm (exposed), hidden (overlapped comm), eval, and
    wait (for the slowest peer, before an exchange; see Sums.synchronise); each also a phase of
    the timeline, when one is on (collectives.timeline)."""

    PHASE = dict(compute="gradient", comm="communication", eval="evaluation", wait="wait")

    def __init__(self):
        self.total = dict(compute=0.0, comm=0.0, hidden=0.0, eval=0.0, wait=0.0)

    @contextlib.contextmanager
    def __call__(self, what):
        t = time.perf_counter()
        try:
            with timeline.phase(self.PHASE[what]):
                yield
        finally:
            self.total[what] += time.perf_counter() - t


class Progress:
    """How far a run has got: ``t`` steps and the ``history`` of report rows (both in a
    checkpoint), and what strategies measure along the way: ``overlap`` (ddp), ``consensus``
    (local, gossip: the models' mean squared distance to their average) and ``staleness``
    (ps with tau >= 0: per step, how many steps old the parameters read were)."""

    def __init__(self):
        self.t = 0
        self.history = []
        self.overlap = None
        self.consensus = None
        self.staleness = []

    def state_dict(self):
        """The checkpoint's record of progress: the step count (``clock``) and the history."""
        return dict(clock=self.t, history=self.history)

    def load_state_dict(self, state):
        """Restore what ``state_dict`` saved."""
        self.history, self.t = state["history"], state["clock"]


class Context:
    """One rank's view of a training run, shared by the strategy that runs it and its parts.

    ``comm`` (collectives.Comm), ``rank``, ``size``, ``o`` (the checked options), ``model``;
    ``train`` and ``test``, this rank's Parts (strategies that deal rows anew replace them);
    ``n`` and ``n_test``, the rows over every rank, and ``start``, set when training starts;
    ``shard``, each training row's shard (reproducible mode).  ``local_gradient(w, index)``
    is this rank's summed loss gradient over its rows ``index``.  Parts: ``sums`` (all-reduces,
    compressed sums), ``objective`` (the objective over all rows, evaluation), ``batches``,
    ``reporter`` (table rows, progress bar), ``checkpoints``, ``preemption`` (SIGTERM).
    """

    def __init__(self, comm, model, train, test, is_classifier, o, local_gradient):
        self.o = o
        self.comm, self.model = comm, model
        self.train, self.test = train, test
        self.is_classifier = is_classifier
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.n = self.n_test = self.shard = self.start = None
        self.local_gradient = local_gradient
        self.clock = Clock()
        self.progress = Progress()
        self.preemption = Preemption()
        self.sums = Sums(comm, o, self.clock, model.size)
        self.stragglers = stragglers.Stragglers(o["straggler"], self.rank, o["seed"])
        self.objective = Objective(self)
        self.batches = Batches(self)
        progress = o["progress"]
        self.reporter = Reporter(self, self.rank == 0 and (sys.stderr.isatty() if progress is None else progress))
        self.checkpoints = Checkpoints(self)

    @contextlib.contextmanager
    def computing(self):
        """Time the block as compute, then slow this rank down as ``straggler`` says (counted as compute)."""
        with self.clock("compute"):
            t = time.perf_counter()
            yield
            if self.stragglers:
                self.stragglers.stretch(self.stragglers.slowdown(), t)

    def batch_gradient(self, w, index, count):
        """The gradient of the penalised objective on this rank's batch alone: the mean loss
        gradient over its ``count`` rows ``index``, plus the penalty's (no communication)."""
        return self.objective.add_penalty(w, self.local_gradient(w, index) / count)

    def updating(self):
        """The optimizer's step: a phase of the timeline, not one of the Clock's totals."""
        return timeline.phase("update")

    def checkpointing(self):
        """A checkpoint's gathering and writing: a phase of the timeline."""
        return timeline.phase("checkpoint")

    def new_optimizer(self, size=None):
        """A fresh optimizer of the chosen kind for ``size`` parameters (default: the model's)."""
        return optim.make(self.o, self.model.size if size is None else size)
