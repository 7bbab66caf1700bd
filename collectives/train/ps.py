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
"""

import numpy as np
from mpi4py import MPI

from .. import Comm, p2p
from ..schedule import blocks
from .data import redistribute


class ParameterServer:
    """Run the parameter-server synchronisation for a Trainer."""

    def __init__(self, trainer):
        t = self.trainer = trainer
        p, s = t.size, t.o["servers"]
        self.workers = p - s
        self.is_server = t.rank >= self.workers
        counts, displs = blocks(t.model.size, s)
        self.counts = [0] * self.workers + list(counts)
        self.displs = [0] * self.workers + list(displs)
        self.shards = [(displs[i], displs[i] + counts[i]) for i in range(s)]

    def run(self):
        """Train; returns the final parameter vector on every rank."""
        t = self.trainer
        for name in ("train", "test"):
            part = getattr(t, name)
            if part is not None:
                dest = part.rows % self.workers if self.is_server else np.full(len(part), t.rank)
                setattr(t, name, redistribute(t.comm.comm, part, dest))
        w = t.model.init(np.random.default_rng(t.o["seed"]))
        n = t.comm.comm.allreduce(len(t.train))
        sub = t.comm.comm.Split(int(self.is_server), t.rank)
        with Comm(sub) as group:
            if self.is_server:
                lo, hi = self.shards[t.rank - self.workers]
                shard = self._serve(w[lo:hi].copy(), lo, hi)
            else:
                shard = np.zeros(0)
                w = self._work(w, group, n)
        sub.Free()
        out = np.empty(t.model.size)
        t.comm.Allgatherv(shard, [out, (self.counts, self.displs), MPI.DOUBLE])
        return out

    def _work(self, w, group, n):
        t = self.trainer
        o = t.o
        servers = range(self.workers, t.size)
        pulls = [p2p.pull(t.comm, w[lo:hi], s) for s, (lo, hi) in zip(servers, self.shards)]
        with t.clock("comm"):
            p2p.wait(pulls)
        for epoch in range(o["epochs"]):
            batches = t.global_batches(epoch, n, t.train.rows)
            for s, (index, count) in enumerate(batches):
                g = t.local_gradient(w, index)
                msgs = [np.concatenate(([t.t, count], g[lo:hi])) for lo, hi in self.shards]
                with t.clock("comm"):
                    reqs = [p2p.push(t.comm, m, dst) for m, dst in zip(msgs, servers)]
                    reqs += [p2p.pull(t.comm, w[lo:hi], dst) for dst, (lo, hi) in zip(servers, self.shards)]
                    p2p.wait(reqs)
                t.t += 1
                t.progress(epoch, s, len(batches))
            t.report(epoch, w, group)
        done = [np.concatenate(([-1.0, 0.0], np.zeros(hi - lo))) for lo, hi in self.shards]
        p2p.wait([p2p.push(t.comm, m, dst) for m, dst in zip(done, servers)])
        return w

    def _serve(self, shard, lo, hi):
        t = self.trainer
        tau = t.o["tau"]
        opt = t.new_optimizer(hi - lo)
        mask = t.model.penalised[lo:hi]
        lam = t.o["lam"]
        nw = self.workers
        for worker in range(nw):  # the initial pulls
            p2p.serve(t.comm, shard, worker)
        msg = np.empty(2 + hi - lo)
        clock = np.zeros(nw, np.int64)   # next clock each worker will push
        finished = np.zeros(nw, bool)
        waiting = set()
        pending = {}                      # clock -> [gradient per worker]
        applied = -1                      # last clock applied (stale-synchronous)

        def step(g):
            with t.clock("compute"):
                opt.step(shard, g + lam * shard * mask)

        while not finished.all():
            sender = p2p.receive(t.comm, msg).wait()
            c, count = int(msg[0]), msg[1]
            if c < 0:
                finished[sender] = True
                continue
            if tau < 0:
                step(msg[2:] / count)
                p2p.serve(t.comm, shard, sender)
                continue
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
                    p2p.serve(t.comm, shard, worker)
                    waiting.discard(worker)
        return shard
