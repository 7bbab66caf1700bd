"""Training-data servers: K ranks hold the training rows and hand the workers their minibatches.

With ``data_servers`` K (``--data-servers K``, synchronous SGD or Adam), the last K ranks
serve data and the others are workers.  Row r of the training set lives on server r mod K.

Each step's global minibatch is what partitioned reading uses (Batches.permutation: the
next ``batch`` row numbers of the epoch's seeded order), cut into W contiguous slices, one
per worker in rank order.  A worker asks every server for its slice of a step (a push of
the step number) and receives from each the slice's rows that server holds, as one float64
message of [row number, target, features] rows; it asks for the next step before computing
this one, so the next batch travels while it computes.  Servers answer the requests of
each step from each worker in turn, so a server is never more than one step ahead of a worker.
Workers then compute their slice's gradient sum and all-reduce it over the workers'
sub-communicator; the step is that of partitioned reading with the same seed, up to the
order in which floating-point sums are added.

At the end of every epoch worker 0 broadcasts the parameters to every rank, and all ranks
evaluate on the rows they hold (the servers on the training rows, every rank on its test
rows), so the reports are those of partitioned reading.
"""
import numpy as np

from .. import Comm, p2p
from .data import issparse, redistribute
from .errors import DataError, UsageError


def check(o, size):
    """UsageError unless the options ``o`` allow ``data_servers`` on ``size`` ranks."""
    k = o["data_servers"]
    if not 1 <= k < size:
        raise UsageError(f"--data-servers needs 1 <= servers < ranks, got {k} with {size} ranks")
    if o["sync"] != "sync" or o["optimizer"] not in ("sgd", "adam"):
        raise UsageError("--data-servers serves minibatches to --sync sync with --optimizer sgd or adam")
    for name, off in (("reproducible", False), ("compress", "none"), ("checkpoint", None)):
        if o[name] not in (off, None):
            raise UsageError(f"--data-servers does not combine with --{name}")


def worker_rows(batch, workers, worker):
    """The row numbers of global minibatch ``batch`` that ``worker`` (of ``workers``) computes."""
    n = len(batch)
    return batch[worker * n // workers:(worker + 1) * n // workers]


class DataServers:
    """Run synchronous training with data servers on the run's Context ``ctx``."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.servers = ctx.o["data_servers"]
        self.workers = ctx.size - self.servers
        self.is_server = ctx.rank >= self.workers

    def steps(self, epoch0=0):
        """(epoch, step, global minibatch, whether it ends the epoch), up to ``epochs`` and ``max_steps``."""
        ctx, o = self.ctx, self.ctx.o
        B = o["batch"]
        total = 0
        for epoch in range(epoch0, o["epochs"]):
            perm = ctx.batches.permutation(epoch, ctx.n)
            count = -(-ctx.n // B)
            for s in range(count):
                total += 1
                stop = o["max_steps"] is not None and ctx.progress.t + total >= o["max_steps"]
                yield epoch, s, perm[s * B:(s + 1) * B], s + 1 == count or stop
                if stop:
                    return

    def run(self):
        """Train; returns the final parameter vector on every rank."""
        ctx = self.ctx
        if issparse(ctx.train.X):
            raise DataError("--data-servers sends dense rows: keep the features standardised (no --no-standardize)")
        dest = self.workers + ctx.train.rows % self.servers
        ctx.train = redistribute(ctx.comm.comm, ctx.train, dest)
        self.dim = ctx.train.X.shape[1]
        w = ctx.model.init(np.random.default_rng(ctx.o["seed"]))
        sub = ctx.comm.comm.Split(int(self.is_server), ctx.rank)
        with Comm(sub) as group:
            w = self._serve(w) if self.is_server else self._work(w, group)
        sub.Free()
        return w

    def _end_epoch(self, epoch, w, last):
        """Every rank gets worker 0's parameters and reports the epoch."""
        ctx = self.ctx
        with ctx.clock("eval"):
            ctx.comm.Bcast(w, root=0)
        ctx.reporter.report(epoch, w, force=last)

    def _request(self, step, rows):
        """Ask every server for its part of ``rows`` (step ``step``); the receives, and the buffers they fill."""
        ctx = self.ctx
        bufs = [np.empty((int(np.count_nonzero(rows % self.servers == k)), self.dim + 2))
                for k in range(self.servers)]
        reqs = [p2p.receive(ctx.comm, buf, self.workers + k) for k, buf in enumerate(bufs)]
        ask = np.array([step], np.int64)
        p2p.wait([p2p.push(ctx.comm, ask, self.workers + k) for k in range(self.servers)])
        return reqs, bufs

    def _work(self, w, group):
        ctx = self.ctx
        opt = ctx.new_optimizer()
        plan = list(self.steps())
        mine = [worker_rows(batch, self.workers, ctx.rank) for _, _, batch, _ in plan]
        pending = self._request(0, mine[0]) if plan else None
        for i, (epoch, s, batch, ends) in enumerate(plan):
            with ctx.clock("comm"):
                reqs, bufs = pending
                p2p.wait(reqs)
            pending = self._request(i + 1, mine[i + 1]) if i + 1 < len(plan) else None
            X, y = self._assemble(mine[i], bufs)
            with ctx.computing():
                g = ctx.model.loss_grad(w, X, y)[1]
            ctx.sums.allreduce(g, group)
            opt.step(w, ctx.objective.add_penalty(w, g / len(batch)))
            ctx.progress.t += 1
            ctx.reporter.bar(epoch, s, -(-ctx.n // ctx.o["batch"]))
            if ends:
                self._end_epoch(epoch, w, i + 1 == len(plan))
        return w

    def _assemble(self, rows, bufs):
        """(X, y) of ``rows`` in their minibatch order from the servers' messages."""
        X = np.empty((len(rows), self.dim))
        y = np.empty(len(rows), self.ctx.train.y.dtype)
        for k, buf in enumerate(bufs):
            at = np.flatnonzero(rows % self.servers == k)
            if not np.array_equal(buf[:, 0], rows[at]):
                raise RuntimeError(f"data server {self.workers + k} sent rows other than those asked for")
            y[at] = buf[:, 1]
            X[at] = buf[:, 2:]
        return X, y

    def _serve(self, w):
        ctx = self.ctx
        part = ctx.train
        plan = list(self.steps())
        ask = np.empty(1, np.int64)
        for i, (epoch, _, batch, ends) in enumerate(plan):
            # Worker by worker: a worker's request for step i comes before its request for i + 1
            # (one sender's messages keep their order), so every request of step i is answered
            # before the collective at an epoch's end, whatever the others have asked for since.
            for worker in range(self.workers):
                p2p.receive(ctx.comm, ask, worker).wait()
                if ask[0] != i:
                    raise RuntimeError(f"data server {ctx.rank}: worker {worker} asked for step {ask[0]} at step {i}")
                rows = worker_rows(batch, self.workers, worker)
                rows = rows[rows % self.servers == ctx.rank - self.workers]
                local = np.searchsorted(part.rows, rows)
                msg = np.column_stack([rows, part.y[local], part.X[local]]).astype(np.float64)
                p2p.push(ctx.comm, msg, worker).wait()
            ctx.progress.t += 1
            if ends:
                self._end_epoch(epoch, w, i + 1 == len(plan))
        return w
