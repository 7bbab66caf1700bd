"""The training loop and its synchronisation models.

``Trainer(comm, model, train, test, **options).fit()`` minimises the mean loss plus
(lambda/2)||W||^2 over the rows every rank holds.  ``sync`` picks how ranks cooperate:

* ``sync``   data parallel: the gradient of a global minibatch all-reduced every step
             (any ``allreduce`` algorithm, any ``compress``ion); L-BFGS and Newton too;
* ``ddp``    the same, but gradients are all-reduced bucket by bucket with nonblocking
             collectives while the backward pass goes on (PyTorch DDP); overlap measured;
             with ``compress``, each bucket's compressed all-reduce (its own error-feedback
             state) runs as soon as the bucket is full, blocking;
* ``local``  local SGD: each rank steps on its own rows, models averaged every H steps;
             with ``compress``, what is averaged is the change since the last average
             (compressed, with error feedback), added to that average on every rank;
* ``fedavg`` federated averaging: per round a seeded fraction of clients (ranks) trains
             for E local epochs from the global model, then a weighted average;
* ``ps``     parameter server (collectives.train.ps): asynchronous, or stale-synchronous
             with bound tau (tau = 0 is synchronous and matches ``sync``);
* ``gossip`` each step, mix with the neighbours of a ``topology`` (ring, torus, exponential,
             random matching) by Metropolis-Hastings weights (collectives.train.gossip);
             one global average at the end.

``data_servers`` K (with ``sync``) has K ranks serve the others their minibatches
(collectives.train.dataserver).  ``straggler`` slows chosen ranks' computation down
(collectives.train.straggler); ``measure_wait`` times the wait for the slowest peer before
each exchange apart from the exchange itself.  Local models report their consensus distance.

Minibatches are drawn from a seeded permutation of the *global* row numbers (``sync``,
``ddp``, ``ps``), so the trajectory does not depend on the number of ranks; local models
draw from their own rows.  Everything is a function of the seed, the epoch and the step,
so a checkpointed run resumes to the very same trajectory.
"""
import contextlib
import os
import signal
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from .. import compression, p2p
from . import checkpoint as ckpt
from . import data as D, dataserver, gossip, optim, straggler as stragglers
from .errors import DataError
from .options import check_options


class Clock:
    """Seconds spent per activity: compute, comm (exposed), hidden (overlapped comm), eval, and
    wait (for the slowest peer, before an exchange; see Trainer.synchronise)."""

    def __init__(self):
        self.total = dict(compute=0.0, comm=0.0, hidden=0.0, eval=0.0, wait=0.0)

    @contextlib.contextmanager
    def __call__(self, what):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.total[what] += time.perf_counter() - t


class Trainer:
    """Train ``model`` on this rank's ``train`` Part, cooperating over collectives.Comm ``comm``.

    Options are the keys of DEFAULTS (the command line's flags); see ``python -m
    collectives train --help`` for their meaning.
    """

    def __init__(self, comm, model, train, test=None, is_classifier=True, **options):
        o = check_options(options, model, comm.Get_size())
        self.o = o
        self.comm, self.model = comm, model
        self.train, self.test = train, test
        self.is_classifier = is_classifier
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.clock = Clock()
        self.history = []
        self.t = 0
        self.overlap = None
        self.staleness = []      # ps with tau >= 0: per step, how many steps old the parameters read were
        self.consensus = None    # local and gossip: mean squared distance of the ranks' models to their average
        self.terminated = False  # SIGTERM seen by this rank
        self.preempted = False   # the ranks agreed to checkpoint and stop on a SIGTERM
        # "none" is the plain all-reduce (no compression pass at all)
        self.compressor = (None if o["compress"] == "none"
                           else compression.COMPRESSORS[o["compress"]](error_feedback=o["error_feedback"]))
        self.compress_states = {}  # error-feedback state per compressed vector (ddp: per bucket)
        self.stragglers = stragglers.Stragglers(o["straggler"], self.rank, o["seed"])
        progress = o["progress"]
        self.show_progress = self.rank == 0 and (sys.stderr.isatty() if progress is None else progress)

    # ---- global quantities ---------------------------------------------------------------

    @contextlib.contextmanager
    def computing(self):
        """Time the block as compute, then slow this rank down as ``straggler`` says (counted as compute)."""
        with self.clock("compute"):
            t = time.perf_counter()
            yield
            if self.stragglers:
                self.stragglers.stretch(self.stragglers.slowdown(), t)

    def synchronise(self, comm=None, peers=None):
        """With ``measure_wait``, wait for the peers before an exchange, timed as wait.

        A barrier over ``comm`` (default: the trainer's), or zero-byte messages to and from
        ``peers``: the time there is spent waiting for the slowest of them (plus one small
        exchange's latency), so the exchange after it times communication alone.
        """
        if not self.o["measure_wait"]:
            return
        comm = comm or self.comm
        with self.clock("wait"):
            if peers is None:
                comm.Barrier()
            else:
                empty = np.empty(0)
                p2p.wait([p2p.receive(comm, empty, q) for q in peers] + [p2p.push(comm, empty, q) for q in peers])

    def allreduce(self, buf, comm=None):
        """Sum ``buf`` over the ranks of ``comm`` (default: the trainer's) in place, timed as communication."""
        comm = comm or self.comm
        self.synchronise(comm)
        with self.clock("comm"):
            self.reducer(comm, "Allreduce")(buf)
        return buf

    def reducer(self, comm, method):
        """``comm``'s in-place ``method`` (Allreduce or Iallreduce) as f(buf): MPI's own call for
        ``allreduce="native"``, else ours with the chosen algorithm."""
        if self.o["allreduce"] == "native":
            return lambda buf: getattr(getattr(comm, "comm", comm), method)(MPI.IN_PLACE, buf)
        return lambda buf: getattr(comm, method)(MPI.IN_PLACE, buf, algorithm=self.o["allreduce"])

    def sum_gradient(self, g):
        """Sum a gradient over ranks, through the compressor when one is chosen."""
        if self.compressor is None:
            return self.allreduce(g)
        self.synchronise()
        with self.clock("comm"):
            return self.compressed_sum(g)

    def compressed_sum(self, v, key=None):
        """Sum ``v`` over the ranks through the compressor, with the error-feedback state of ``key``."""
        out, self.compress_states[key] = compression.allreduce(self.comm, v, self.compressor,
                                                               self.compress_states.get(key))
        return out

    def shard_sum(self, w, index, with_loss=False):
        """Loss gradient (after the loss, ``with_loss``) summed over local rows ``index`` and over the
        ranks, shard by shard in a fixed tree: the same bits at any rank count (reproducible mode)."""
        def partial(at):
            rows = index[at]
            loss, g = self.model.loss_grad(w, self.train.X[rows], self.train.y[rows])
            return np.concatenate(([loss], g)) if with_loss else g

        with self.computing():
            partials = D.shard_partials(self.shard[index], self.model.size + with_loss, partial)
        self.allreduce(partials)
        with self.clock("compute"):
            return D.tree_sum(partials)

    def objective(self, w):
        """Global (F, G) at ``w``: mean loss over every training row plus the penalty."""
        if self.o["reproducible"]:
            buf = self.shard_sum(w, np.arange(len(self.train)), with_loss=True)
        else:
            with self.computing():
                loss, g = self.model.loss_grad(w, self.train.X, self.train.y)
            buf = self.allreduce(np.concatenate(([loss], g)))
        pen, pg = self.model.penalty(w, self.o["lam"])
        return buf[0] / self.n + pen, buf[1:] / self.n + pg

    def hessian(self, w):
        """Global Hessian of the objective at ``w``."""
        with self.computing():
            H = self.model.hessian(w, self.train.X, self.train.y)
        self.allreduce(H)
        H /= self.n
        H[np.diag_indices_from(H)] += self.o["lam"] * self.model.penalised
        return H

    def local_gradient(self, w, index):
        """Summed loss gradient over local rows ``index`` (no communication)."""
        with self.computing():
            return self.model.loss_grad(w, self.train.X[index], self.train.y[index])[1]

    def add_penalty(self, w, g):
        """g + gradient of the penalty at ``w``."""
        return g + self.model.penalty(w, self.o["lam"])[1]

    def permutation(self, epoch, n_total):
        """The seeded order of the ``n_total`` global row numbers in ``epoch``: batch s is its s-th ``batch`` rows."""
        return np.random.default_rng([self.o["seed"], epoch]).permutation(n_total)

    def global_batches(self, epoch, n_total, rows):
        """[(local index array, global batch size)] for each step of ``epoch``.

        The epoch's order is a seeded permutation of all ``n_total`` row numbers; a step's
        batch is the next ``batch`` of them, of which each rank computes the rows it holds.
        """
        B = self.o["batch"]
        perm = self.permutation(epoch, n_total)
        where = np.empty(n_total, np.int64)
        where[perm] = np.arange(n_total)
        pos = where[rows]
        order = np.argsort(pos, kind="stable")
        steps = -(-n_total // B)
        cuts = np.searchsorted(pos[order], np.arange(steps + 1) * B)
        return [(order[cuts[s]:cuts[s + 1]], min(B, n_total - s * B)) for s in range(steps)]

    def local_batches(self, epoch, steps):
        """``steps`` batches of this rank's own rows, cycling through a seeded permutation."""
        n = len(self.train)
        b = max(1, self.o["batch"] // self.size)
        if n == 0:
            return [(np.zeros(0, np.int64), 1)] * steps
        perm = np.random.default_rng([self.o["seed"], epoch, self.rank]).permutation(n)
        return [(perm[(s * b + np.arange(b)) % n], b) for s in range(steps)]

    def new_optimizer(self, size=None):
        """A fresh optimizer of the chosen kind for ``size`` parameters (default: the model's)."""
        o, size = self.o, self.model.size if size is None else size
        name = o["optimizer"]
        if name == "sgd":
            return optim.SGD(size, o["lr"], o["momentum"], o["schedule"])
        if name == "adam":
            return optim.Adam(size, o["lr"], decay=o["adam_decay"])
        if name == "lbfgs":
            return optim.LBFGS(size, o["history"])
        return optim.Newton(size)

    # ---- evaluation and reporting ----------------------------------------------------------

    def evaluate(self, w, comm=None):
        """Global (objective, train metric, test metric) at ``w``; accuracy or RMSE."""
        comm = comm or self.comm
        with self.clock("eval"):
            buf = np.zeros(5)
            loss, _ = self.model.loss_grad(w, self.train.X, self.train.y)
            buf[0] = loss
            for i, part in ((1, self.train), (3, self.test)):
                if part is None or not len(part):
                    continue
                pred = self.model.predict(w, part.X)
                buf[i] = (pred == part.y).sum() if self.is_classifier else ((pred - part.y) ** 2).sum()
                buf[i + 1] = len(part)
            comm.Allreduce(MPI.IN_PLACE, buf)
            F = buf[0] / max(buf[2], 1) + self.model.penalty(w, self.o["lam"])[0]
            metric = [buf[i] / buf[i + 1] if buf[i + 1] else float("nan") for i in (1, 3)]
            if not self.is_classifier:
                metric = [float(np.sqrt(m)) for m in metric]
        return F, metric[0], metric[1]

    def report(self, epoch, w, comm=None, force=False):
        """Evaluate at the end of ``epoch`` and print a table row on rank 0."""
        if not force and (epoch + 1) % self.o["log_every"] and epoch + 1 != self.o["epochs"]:
            return
        F, train_m, test_m = self.evaluate(w, comm)
        row = dict(epoch=epoch + 1, step=self.t, objective=F, train=train_m, test=test_m,
                   compute=self.clock.total["compute"], comm=self.clock.total["comm"],
                   wait=self.clock.total["wait"], elapsed=time.perf_counter() - self.start)
        if self.consensus is not None:
            row["consensus"] = self.consensus
        row["training"] = row["elapsed"] - self.clock.total["eval"]  # wall time less evaluations
        self.history.append(row)
        if self.rank == 0:
            # no test column without a test set (--test-fraction 0), rather than a column of NaN
            test = "" if self.n_test == 0 else f" {test_m:>10.4f}"
            # optional columns: wait when measured, consensus distance for the local models
            extra = [(f"{'wait s':>8}", f"{row['wait']:>8.3f}")] if self.o["measure_wait"] else []
            if "consensus" in row:
                extra.append((f"{'consensus':>10}", f"{row['consensus']:>10.3e}"))
            if len(self.history) == 1:
                metric = "acc" if self.is_classifier else "rmse"
                head = "" if self.n_test == 0 else f" {'test ' + metric:>10}"
                self._print(f"{'epoch':>6} {'step':>7} {'objective':>18} {'train ' + metric:>10}{head} "
                            f"{'compute s':>10} {'comm s':>8}" + "".join(" " + h for h, _ in extra))
            self._print(f"{row['epoch']:>6} {row['step']:>7} {F:>18.12f} {train_m:>10.4f}{test} "
                        f"{row['compute']:>10.3f} {row['comm']:>8.3f}" + "".join(" " + v for _, v in extra))

    def diverged(self):
        """The message for a run whose objective or parameters stopped being finite: where it
        happened (the first report that saw it, else the current step) and what to try."""
        bad = next((r for r in self.history if not np.isfinite(r["objective"])), None)
        where = f"epoch {bad['epoch']} (step {bad['step']})" if bad else f"step {self.t}"
        hint = (f"try a smaller --lr (now {self.o['lr']:g})" if self.o["optimizer"] in ("sgd", "adam")
                else "try a larger --lam or standardized features")
        return f"training diverged: the objective is not finite from {where}; {hint}"

    def check_finite(self):
        """DataError (``diverged``) unless the final objective and parameters are finite."""
        if not (np.isfinite(self.final[0]) and np.isfinite(self.w).all()):
            raise DataError(self.diverged())

    def _print(self, line):
        if self.show_progress:
            sys.stderr.write("\r\033[K")
        print(line, flush=True)

    def progress(self, epoch, step, steps):
        """Redraw rank 0's progress bar."""
        if self.show_progress:
            width = 30
            done = int(width * (step + 1) / max(steps, 1))
            sys.stderr.write(f"\repoch {epoch + 1}/{self.o['epochs']} [{'#' * done}{'.' * (width - done)}] "
                             f"{step + 1}/{steps}")
            sys.stderr.flush()

    # ---- checkpoints -----------------------------------------------------------------------

    def save(self, path, epoch, step, w, opt):
        """Write the checkpoint of this step to ``path`` (collective; see train.checkpoint)."""
        state = dict(w=w, **opt.state_dict(), **self.compression_state())
        if ckpt.layout(self.o["sync"]) == "per-rank":
            states = ckpt.gather(self.comm.comm, state, lambda r: ckpt.shapes_of(state))
            if self.rank == 0:
                state = {k: v if isinstance(v, int) else np.stack([s[k] for s in states]) for k, v in state.items()}
        self.write_checkpoint(path, epoch, step, state, ckpt.layout(self.o["sync"]))

    def write_checkpoint(self, path, epoch, step, state, layout):
        """Rank 0 writes ``state`` with this job's metadata; every rank learns whether it could.

        A state that is no longer finite (training diverged) is not written: the checkpoint
        already at ``path`` is the last good one, and every rank raises a DataError saying so.
        """
        error = None
        if self.rank == 0 and not all(np.isfinite(v).all() for v in state.values()
                                      if isinstance(v, np.ndarray) and v.dtype.kind == "f"):
            error = DataError(f"{self.diverged()}; {path} was not overwritten")
        elif self.rank == 0:
            meta = dict(nranks=self.size, layout=layout, model=type(self.model).__name__,
                        model_size=self.model.size, options={k: self.o[k] for k in ckpt.SETTINGS},
                        epoch=epoch, step=step, clock=self.t, history=self.history)
            try:
                ckpt.save(path, meta, state)
            except DataError as exc:
                error = exc
        ckpt.agree(self.comm.comm, error)

    def read_checkpoint(self, path, expected):
        """(meta, state) of the checkpoint at ``path``, checked against this job on every rank
        (``expected``: name -> shape of the state it must hold, see checkpoint.check_state).

        DataError on every rank when any rank cannot use it: resuming some ranks but not
        others would train on silently mixed states.
        """
        meta = state = error = None
        try:
            meta, state = ckpt.load(path)
            ckpt.check(path, meta, self.o, self.model.size, type(self.model).__name__)
            ckpt.check_state(path, state, expected)
        except DataError as exc:
            error = exc
        ckpt.agree(self.comm.comm, error)
        self.history, self.t = meta["history"], meta["clock"]
        return meta, state

    def load(self, path, opt):
        """(w, epoch, step) restored from ``path`` into ``opt``, at any rank count (train.checkpoint)."""
        meta, state = self.read_checkpoint(path, ckpt.shapes_of(dict(w=np.zeros(self.model.size),
                                                                     **opt.state_dict())))
        if meta["layout"] == "per-rank":
            state = ckpt.rank_state(state, meta["nranks"], self.rank, self.size)
        w = np.array(state.pop("w"), np.float64)
        self.load_compression(state, meta["nranks"])
        opt.load_state_dict(state)
        return w, meta["epoch"], meta["step"]

    def compression_state(self):
        """What ``--compress`` carries from step to step (collective): the compressor's step
        counter (its seeds) and, on rank 0, every rank's error-feedback residuals, stacked: the
        one of its gradient, and the one of its re-compression of the chunk it sums (placed
        in a whole-length vector, with the chunk's bounds)."""
        if self.compressor is None:
            return {}
        state = {"compress_step": self.compressor.step}
        ef = self.compress_states.get(None)
        residual = ef.residual if ef is not None else None
        if ckpt.anyone(self.comm.comm, ef is not None and (residual is not None or ef.server is not None)):
            n = self.model.size
            mine = {"r": residual if residual is not None else np.zeros(n), "s": np.zeros(n), "span": np.zeros(2)}
            if ef.server is not None:
                lo, hi = ef.server_span
                mine["s"][lo:hi] = ef.server
                mine["span"][:] = lo, hi
            rows = ckpt.gather(self.comm.comm, mine, lambda r: {"r": (n,), "s": (n,), "span": (2,)})
            if rows is not None:
                state["residuals"] = np.stack([row["r"] for row in rows])
                state["owner_residuals"] = np.stack([row["s"] for row in rows])
                state["owner_spans"] = np.stack([row["span"] for row in rows])
        return state

    def load_compression(self, state, nranks):
        """Restore what ``compression_state`` saved (taking it out of ``state``).  At another
        rank count the chunks differ: every rank gets an equal share of all the residuals
        summed, so what compression had not yet sent is still sent, once."""
        step, rows = state.pop("compress_step", None), state.pop("residuals", None)
        owners, spans = state.pop("owner_residuals", None), state.pop("owner_spans", None)
        if self.compressor is None:
            return
        self.compressor.step = step or 0
        if rows is None:
            return
        ef = self.compress_states[None] = compression.ErrorFeedback()
        if nranks != self.size:
            ef.residual = (rows.sum(axis=0) + owners.sum(axis=0)) / self.size
            return
        ef.residual = np.array(rows[self.rank], np.float64)
        lo, hi = (int(v) for v in spans[self.rank])
        if hi > lo:
            ef.server, ef.server_span = np.array(owners[self.rank][lo:hi], np.float64), (lo, hi)

    def resuming(self):
        """Whether to resume: --resume and the checkpoint exists on some rank."""
        o = self.o
        return bool(o["resume"] and o["checkpoint"] and ckpt.anyone(self.comm.comm, os.path.exists(o["checkpoint"])))

    @contextlib.contextmanager
    def sigterm(self, enabled):
        """While in the block, a SIGTERM only sets ``self.terminated`` (checked at step boundaries)."""
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def note(signum, frame):
            self.terminated = True
        previous = signal.signal(signal.SIGTERM, note)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    # ---- the loop --------------------------------------------------------------------------

    def fit(self):
        """Train; returns the final parameter vector (identical on every rank)."""
        o = self.o
        self.start = time.perf_counter()
        counts = np.array([len(self.train), 0 if self.test is None else len(self.test)])
        self.comm.comm.Allreduce(MPI.IN_PLACE, counts)
        self.n, self.n_test = (int(c) for c in counts)
        if o["reproducible"]:
            self.train = D.by_shard(self.comm.comm, self.train)
            self.shard = D.shard_of(self.train.rows, self.n)
        # the parameter server looks at SIGTERM at its checkpoint boundaries only
        with self.sigterm(bool(o["checkpoint"] and (o["sync"] != "ps" or o["checkpoint_every"]))):
            if o["sync"] == "ps":
                from .ps import ParameterServer
                self.w = ParameterServer(self).run()
            elif o["data_servers"]:
                self.w = dataserver.DataServers(self).run()
            else:
                self.w = self._run()
        self.elapsed = time.perf_counter() - self.start
        self.final = self.evaluate(self.w)
        return self.w

    def _run(self):
        o = self.o
        w = self.model.init(np.random.default_rng(o["seed"]))
        opt = self.new_optimizer()
        epoch0 = step0 = 0
        if self.resuming():
            w, epoch0, step0 = self.load(o["checkpoint"], opt)
        mode = self._batch if o["optimizer"] in optim.BATCH else getattr(self, "_" + o["sync"])
        return mode(w, opt, epoch0, step0)

    def _loop(self, w, opt, epoch0, step0, plan, step, model_of):
        """Run epochs: ``plan(epoch)`` gives the steps, ``step(epoch, s, item)`` runs one.

        A step returning True ends training (converged); ``model_of(w)`` is the model to
        evaluate and return (an average, for the local models).
        """
        o = self.o
        for epoch in range(epoch0, o["epochs"]):
            items = plan(epoch)
            for s in range(step0 if epoch == epoch0 else 0, len(items)):
                converged = step(epoch, s, items[s])
                self.t += 1
                self.progress(epoch, s, len(items))
                last = s + 1 == len(items)
                if o["checkpoint"] and ckpt.anyone(self.comm.comm, self.terminated):
                    self.preempted = True  # on every rank at this same step, wherever the signal landed
                stop = converged or self.preempted or (o["max_steps"] is not None and self.t >= o["max_steps"])
                if stop:
                    self.report(epoch, model_of(w), force=True)
                if o["checkpoint"] and ((o["checkpoint_every"] and self.t % o["checkpoint_every"] == 0) or stop):
                    self.save(o["checkpoint"], epoch + last, 0 if last else s + 1, w, opt)
                if stop:
                    return model_of(w)
            self.report(epoch, model_of(w))
        return model_of(w)

    def _sync(self, w, opt, epoch0, step0):
        def step(epoch, s, item):
            index, count = item
            if self.o["reproducible"]:
                g = self.shard_sum(w, index)
            else:
                g = self.sum_gradient(self.local_gradient(w, index))
            opt.step(w, self.add_penalty(w, g / count))
        return self._loop(w, opt, epoch0, step0,
                          lambda e: self.global_batches(e, self.n, self.train.rows), step, lambda v: v)

    def _ddp(self, w, opt, epoch0, step0):
        cap = max(1, int(self.o["bucket_kb"] * 1024 / 8))
        spans = []

        def step(epoch, s, item):
            index, count = item
            X, y = self.train.X[index], self.train.y[index]
            g = np.empty_like(w)
            pending, bucket, started, blocked = [], [], None, [0.0]
            t = time.perf_counter()
            parts = self.model.backward(w, X, y)
            next(parts)

            def launch():
                buf = np.concatenate([part for _, part in bucket])
                names = [name for name, _ in bucket]
                if self.compressor is None:
                    pending.append((names, buf, self.reducer(self.comm, "Iallreduce")(buf)))
                else:
                    t0 = time.perf_counter()
                    pending.append((names, self.compressed_sum(buf, tuple(names)), None))
                    blocked[0] += time.perf_counter() - t0
                bucket.clear()

            # a straggler slows each layer's backward down, so its buckets leave late too
            factor, mark = self.stragglers.slowdown(), t
            for name, part in parts:
                mark = self.stragglers.stretch(factor, mark)
                if bucket and sum(p.size for _, p in bucket) + part.size > cap:
                    started = started or time.perf_counter()
                    launch()
                bucket.append((name, part))
            if bucket:
                started = started or time.perf_counter()
                launch()
            t_wait = time.perf_counter()
            self.clock.total["compute"] += t_wait - t - blocked[0]
            for names, buf, req in pending:
                if req is not None:
                    req.wait()
                at = 0
                for name in names:
                    sl = self.model.slices[name][0]
                    g[sl] = buf[at:at + sl.stop - sl.start]
                    at += sl.stop - sl.start
            end = time.perf_counter()
            self.clock.total["comm"] += end - t_wait + blocked[0]
            self.clock.total["hidden"] += t_wait - started
            spans.append((end - started, end - t_wait))
            opt.step(w, self.add_penalty(w, g / count))
            total = sum(a for a, _ in spans)
            self.overlap = 1 - sum(b for _, b in spans) / total if total > 0 else 0.0

        return self._loop(w, opt, epoch0, step0,
                          lambda e: self.global_batches(e, self.n, self.train.rows), step, lambda v: v)

    def _local_steps(self):
        b = max(1, self.o["batch"] // self.size)
        return self.comm.comm.allreduce(-(-len(self.train) // b), op=MPI.MAX)

    def average(self, w):
        """Mean of ``w`` over the ranks (a new array)."""
        return self.allreduce(w.copy()) / self.size

    def compressed_average(self, w, anchor):
        """``anchor`` (the last average, the same on every rank) plus the compressed mean of the
        ranks' changes since it; becomes the new ``anchor`` and is returned."""
        self.synchronise()
        with self.clock("comm"):
            anchor += self.compressed_sum(w - anchor) / self.size
        return anchor

    def _local(self, w, opt, epoch0, step0):
        steps = self._local_steps()
        anchor = None if self.compressor is None else self.average(w)

        def step(epoch, s, item):
            index, count = item
            opt.step(w, self.add_penalty(w, self.local_gradient(w, index) / count))
            if (self.t + 1) % self.o["local_steps"] == 0:
                w[...] = self.average(w) if anchor is None else self.compressed_average(w, anchor)
        return self._loop(w, opt, epoch0, step0, lambda e: self.local_batches(e, steps), step, self._eval_average)

    def _eval_average(self, w):
        """The ranks' average model; keeps the consensus distance of their models for the report."""
        with self.clock("eval"):
            out, self.consensus = gossip.consensus_distance(self.comm, w)
        return out

    def _gossip(self, w, opt, epoch0, step0):
        steps = self._local_steps()
        mixer = gossip.Gossip(self.o["topology"], self.size, self.rank, self.o["seed"])

        def step(epoch, s, item):
            index, count = item
            opt.step(w, self.add_penalty(w, self.local_gradient(w, index) / count))
            weights = mixer.row(self.t)
            self.synchronise(peers=sorted(set(weights) - {self.rank}))
            with self.clock("comm"):
                inbox = mixer.exchange(self.comm, w, weights)
            with self.clock("compute"):
                w[...] = mixer.combine(w, weights, inbox)
        return self._loop(w, opt, epoch0, step0, lambda e: self.local_batches(e, steps), step, self._eval_average)

    def _fedavg(self, w, opt, epoch0, step0):
        o = self.o
        p = self.size
        chosen_count = max(1, int(round(o["client_fraction"] * p)))
        b = max(1, o["batch"] // p)
        local_steps = o["local_epochs"] * -(-len(self.train) // b)

        def step(epoch, s, item):
            chosen = np.random.default_rng([o["seed"], epoch]).permutation(p)[:chosen_count]
            buf = np.zeros(w.size + 1)
            if self.rank in chosen and len(self.train):
                local = w.copy()
                client = self.new_optimizer()
                for index, count in self.local_batches(epoch, local_steps):
                    client.step(local, self.add_penalty(local, self.local_gradient(local, index) / count))
                buf[:-1] = len(self.train) * local
                buf[-1] = len(self.train)
            self.allreduce(buf)
            w[...] = buf[:-1] / buf[-1]
        return self._loop(w, opt, epoch0, step0, lambda e: [None], step, lambda v: v)

    def _batch(self, w, opt, epoch0, step0):
        o = self.o
        F, G = self.objective(w)
        extra = (self.hessian,) if o["optimizer"] == "newton" else ()

        def step(epoch, s, item):
            nonlocal F, G
            wn, F, G = opt.iterate(w, F, G, self.objective, *extra)
            moved = not np.array_equal(wn, w)
            w[...] = wn
            return not moved or np.abs(G).max() < o["tol"]
        return self._loop(w, opt, epoch0, step0, lambda e: [None], step, lambda v: v)

    # ---- results ---------------------------------------------------------------------------

    def metrics(self):
        """Everything worth keeping about the run, as a JSON-ready dict."""
        F, train_m, test_m = self.final
        return dict(options={k: v for k, v in self.o.items() if k != "progress"}, nranks=self.size,
                    objective=F, train_metric=train_m, test_metric=test_m if self.n_test else None, steps=self.t,
                    seconds=self.elapsed, time=self.clock.total, overlap=self.overlap,
                    max_staleness=max(self.staleness, default=None),
                    history=self.history)

