"""Parameter server: the last ``servers`` ranks each own a contiguous shard of the parameters.

Workers hold all the data (servers hand theirs over at the start).  Each step a worker
computes the gradient of its rows of the global minibatch, pushes each server its slice
with the step number (its *clock*), then pulls the shards back (collectives.p2p).

* Stale-synchronous, bound ``tau`` >= 0: a server keeps each worker's gradient per clock
  and applies clock c (summed in worker order, divided by the global batch size) once
  every worker has pushed it; a worker at clock c gets its pull answered once clock
  c - tau is applied.  With tau = 0 every worker reads exactly the parameters synchronous
  SGD would, so the trajectory is that of ``sync`` (same batches, same optimizer step,
  which is elementwise and so the same on a shard).
* Asynchronous (``tau`` < 0): a server applies each push on arrival as that worker's share
  of a step (its rows' gradient sum over the global batch size, so the pushes of one
  minibatch add up to one synchronous step however many workers there are) and answers
  the pull at once (Hogwild-style staleness).

At the end the servers' shards are all-gathered into the final model on every rank.

A pull's reply carries two numbers after the shard: the seconds the server held it back
for the staleness bound (waiting for slower workers: the worker counts them as wait, not
communication), and the last clock applied to the shard.  A worker computing step k from a
reply with clock a applied reads parameters k - 1 - a steps old (0 in synchronous SGD);
stale-synchronous workers record that staleness per step (``Progress.staleness``), which the
bound keeps at most tau.

Checkpoints (``checkpoint`` with ``checkpoint_every`` N, and at ``max_steps``): every N
steps each worker pushes each server a marker after its step's push and pull.  A server
that has every worker's marker has applied every gradient sent before them (messages from
one sender are not overtaken), so all ranks then meet in one collective: they agree on
stopping (a SIGTERM on any rank) and rank 0 writes the servers' gathered shards as one
whole parameter vector and optimizer state (collectives.train.checkpoint).  Any rank and
server count resumes from it.
"""

import time

import numpy as np
from mpi4py import MPI

from ... import Comm, p2p
from ...schedule import blocks
from .. import checkpoint as ckpt
from ..data import redistribute

DONE, MARK = -1, -2  # clock values of a worker's last message and of its checkpoint marker


class ParameterServer:
    """Run the parameter-server synchronisation on the run's Context ``ctx``."""

    name = "ps"
    compressible = False

    def __init__(self, ctx):
        self.ctx = ctx
        p, s = ctx.size, ctx.o["servers"]
        self.workers = p - s
        self.is_server = ctx.rank >= self.workers
        counts, displs = blocks(ctx.model.size, s)
        self.counts = [0] * self.workers + list(counts)
        self.displs = [0] * self.workers + list(displs)
        self.shards = [(displs[i], displs[i] + counts[i]) for i in range(s)]

    def run(self):
        """Train; returns the final parameter vector on every rank."""
        ctx = self.ctx
        for name in ("train", "test"):
            part = getattr(ctx, name)
            if part is not None:
                dest = part.rows % self.workers if self.is_server else np.full(len(part), ctx.rank)
                setattr(ctx, name, redistribute(ctx.comm.comm, part, dest))
        w = ctx.model.init(np.random.default_rng(ctx.o["seed"]))
        n = ctx.comm.comm.allreduce(len(ctx.train))
        saved, start = {}, (0, 0)
        if ctx.checkpoints.resuming():
            whole = dict(w=w, **ctx.new_optimizer(ctx.model.size).state_dict())
            meta, saved = ctx.checkpoints.read(ctx.o["checkpoint"], ckpt.shapes_of(whole))
            w, start = np.array(saved["w"], np.float64), (meta["epoch"], meta["step"])
        sub = ctx.comm.comm.Split(int(self.is_server), ctx.rank)
        with Comm(sub) as group:
            if self.is_server:
                lo, hi = self.shards[ctx.rank - self.workers]
                shard = self._serve(w[lo:hi].copy(), lo, hi, {k: v if isinstance(v, int) else v[..., lo:hi]
                                                              for k, v in saved.items() if k != "w"})
            else:
                shard = np.zeros(0)
                w = self._work(w, group, n, *start)
        sub.Free()
        out = np.empty(ctx.model.size)
        ctx.comm.Allgatherv(shard, [out, (self.counts, self.displs), MPI.DOUBLE])
        return out

    def _boundary(self, stop, epoch, step, state):
        """The collective at a checkpoint: agree on a SIGTERM, write the checkpoint; whether to stop.

        ``state`` is a server's shard state ({} on a worker); ``epoch`` and ``step`` (where
        training resumes) and ``stop`` (max_steps reached) count on the workers only.
        """
        ctx = self.ctx
        ctx.preemption.preempted = ckpt.anyone(ctx.comm.comm, ctx.preemption.terminated)
        layout = {r: ckpt.shapes_of(dict(w=np.zeros(hi - lo), **ctx.new_optimizer(hi - lo).state_dict()))
                  for r, (lo, hi) in zip(range(self.workers, ctx.size), self.shards)}
        states = ckpt.gather(ctx.comm.comm, state, lambda r: layout.get(r, {}))
        whole = None
        if ctx.rank == 0:
            shards = states[self.workers:]
            whole = {k: v if isinstance(v, int) else np.concatenate([s[k] for s in shards], axis=-1)
                     for k, v in shards[0].items()}
        with ctx.checkpointing():
            ctx.checkpoints.write(ctx.o["checkpoint"], epoch, step, whole, "replicated")
        return stop or ctx.preemption.preempted

    def _work(self, w, group, n, epoch0, step0):
        ctx = self.ctx
        o, progress = ctx.o, ctx.progress
        servers = range(self.workers, ctx.size)
        replies = [np.empty(hi - lo + 2) for lo, hi in self.shards]
        pulls = [p2p.pull(ctx.comm, buf, s) for s, buf in zip(servers, replies)]
        with ctx.clock("comm"):
            p2p.wait(pulls)
        self._read(w, replies, progress.t)
        for epoch in range(epoch0, o["epochs"]):
            batches = ctx.batches.global_batches(epoch, n, ctx.train.rows)
            for s in range(step0 if epoch == epoch0 else 0, len(batches)):
                index, count = batches[s]
                g = ctx.local_gradient(w, index)
                msgs = [np.concatenate(([progress.t, count], g[lo:hi])) for lo, hi in self.shards]
                with ctx.clock("comm"):
                    reqs = [p2p.push(ctx.comm, m, dst) for m, dst in zip(msgs, servers)]
                    reqs += [p2p.pull(ctx.comm, buf, dst) for dst, buf in zip(servers, replies)]
                    p2p.wait(reqs)
                self._read(w, replies, progress.t + 1)
                progress.t += 1
                ctx.reporter.bar(epoch, s, len(batches))
                stop = o["max_steps"] is not None and progress.t >= o["max_steps"]
                if o["checkpoint"] and ((o["checkpoint_every"] and progress.t % o["checkpoint_every"] == 0) or stop):
                    self._tell(servers, MARK, stop)
                    last = s + 1 == len(batches)
                    stop = self._boundary(stop, epoch + last, 0 if last else s + 1, {})
                    if stop:
                        return w  # the servers stop at the boundary too
                if stop:
                    self._tell(servers, DONE)
                    return w
            ctx.reporter.report(epoch, w, group)
        self._tell(servers, DONE)
        return w

    def _read(self, w, replies, clock):
        """Copy the pulled shards into ``w``; move the servers' hold time from comm to wait and
        record the staleness of the parameters that step ``clock`` reads."""
        ctx = self.ctx
        for (lo, hi), buf in zip(self.shards, replies):
            w[lo:hi] = buf[:-2]
        held = max(buf[-2] for buf in replies)
        ctx.clock.total["comm"] -= held
        ctx.clock.total["wait"] += held
        if ctx.o["tau"] >= 0:
            ctx.progress.staleness.append(clock - 1 - int(min(buf[-1] for buf in replies)))

    def _tell(self, servers, clock, flag=False):
        """Push every server a message with ``clock`` (DONE or MARK) and ``flag``, and no gradient."""
        msgs = [np.concatenate(([clock, float(flag)], np.zeros(hi - lo))) for lo, hi in self.shards]
        p2p.wait([p2p.push(self.ctx.comm, m, dst) for m, dst in zip(msgs, servers)])

    def _serve(self, shard, lo, hi, saved):
        ctx = self.ctx
        tau = ctx.o["tau"]
        opt = ctx.new_optimizer(hi - lo)
        if saved:
            opt.load_state_dict(saved)
        mask = ctx.model.penalised[lo:hi]
        lam = ctx.o["lam"]
        nw = self.workers
        reply = np.empty(hi - lo + 2)  # the shard, the seconds held back, the last clock applied
        applied = ctx.progress.t - 1   # last clock applied (stale-synchronous)

        def answer(worker, held):
            reply[:-2] = shard
            reply[-2:] = held, applied
            p2p.serve(ctx.comm, reply, worker)

        for worker in range(nw):  # the initial pulls
            answer(worker, 0.0)
        msg = np.empty(2 + hi - lo)
        clock = np.full(nw, ctx.progress.t, np.int64)  # next clock each worker will push (where it resumes)
        finished = np.zeros(nw, bool)
        marked = np.zeros(nw, bool)         # workers at a checkpoint boundary
        waiting = set()
        pending = {}                        # clock -> [gradient per worker]
        arrived = np.zeros(nw)              # when each worker's last push arrived

        def step(g):
            with ctx.computing(), ctx.updating():
                opt.step(shard, g + lam * shard * mask)

        while not finished.all():
            sender = p2p.receive(ctx.comm, msg).wait()
            c, count = int(msg[0]), msg[1]
            if c == DONE:
                finished[sender] = True
                continue
            if c == MARK:
                marked[sender] = True
                if marked.all():
                    marked[:] = False
                    if self._boundary(bool(count), 0, 0, dict(w=shard, **opt.state_dict())):
                        return shard
                continue
            if tau < 0:
                step(msg[2:] / count)
                answer(sender, 0.0)
                continue
            arrived[sender] = time.perf_counter()
            pending.setdefault(c, (count, [None] * nw))[1][sender] = msg[2:].copy()
            clock[sender] = c + 1
            waiting.add(sender)
            while applied + 1 in pending and all(g is not None for g in pending[applied + 1][1]):
                count, grads = pending.pop(applied + 1)
                total = grads[0].copy()
                for g in grads[1:]:
                    total += g
                step(total / count)
                applied += 1
            for worker in sorted(waiting):
                if clock[worker] - 1 - tau <= applied:
                    # a pull answered as its push arrives waited for no one
                    answer(worker, 0.0 if worker == sender else time.perf_counter() - arrived[worker])
                    waiting.discard(worker)
        return shard
