"""Pipeline parallelism: an MLP split by layers across the ranks of a communicator, with micro-batches.

Stage s (rank s of ``comm``) holds a contiguous block of the layers (near-equal blocks, so 5
layers over 3 ranks are 2 + 2 + 1).  A minibatch is cut into m micro-batches; each goes
forward through the stages, its activations pushed from stage s to s + 1, and back, its
gradients pushed from s + 1 to s, over collectives.p2p (push / receive on the Comm's private
duplicate).  A stage that waits for a message is idle: with equal stages the idle share of
a synchronous schedule, the bubble, is (p - 1) / (m + p - 1).

Schedules are data: ``schedule(name, stages, stage, micro)`` lists one stage's steps, compute
(``forward m``, ``backward m``, ``update m``) and blocking communication (``send``, ``recv``,
and ``sendrecv`` for a send and a receive with the same neighbour posted together), which the
runtime executes as they stand, ``replay`` times on dedicated cores (the bubble a schedule
implies), and ``as_schedule`` turns into a collectives.schedule.Schedule for the symbolic
deadlock checker (tests/test_schedules.py, blocking sends modelled as unbuffered too).

* ``gpipe``: every micro-batch forward, then every one backward, then one synchronous update
  (the trainer's optimizer step on the summed gradient);
* ``1f1b``: stage s runs min(p - s - 1, m) forwards, then alternates one forward and one
  backward, then drains the backwards: the same gradient as GPipe with at most p - s
  micro-batches' activations held instead of m;
* ``pipedream``: 1F1B without the flush (PipeDream, Narayanan et al., 2019): each stage
  updates its weights by SGD after every backward, and weight stashing keeps the version each
  micro-batch's forward used for its backward.  Stage s's forward of micro-batch j uses its
  weights after max(0, j - (p - s - 1)) updates.

Without fusing a send with the next receive from the same neighbour, 1F1B deadlocks when
sends do not complete before their receive is posted (stage s sending an activation forward
while stage s + 1 sends a gradient back); the checker finds that, so the fused form is the
default (Megatron-LM's send_forward_recv_backward does the same).
"""
import time

import numpy as np

from .. import p2p
from ..schedule import ACC, blocks
from . import Shard, ShardedModel, block, cross_entropy

SCHEDULES = ("gpipe", "1f1b", "pipedream")


def _order(name, stages, stage, micro):
    """The compute steps of one stage: ("F" | "B" | "U", micro-batch)."""
    if name == "forward":
        return [("F", j) for j in range(micro)]
    if name == "gpipe":
        return [("F", j) for j in range(micro)] + [("B", j) for j in range(micro)]
    if name not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {name!r}; one of {', '.join(SCHEDULES)}")
    warm = min(stages - stage - 1, micro)

    def backward(i):
        return [("B", i), ("U", i)] if name == "pipedream" else [("B", i)]
    steady = [step for i in range(micro - warm) for step in [("F", warm + i)] + backward(i)]
    return [("F", j) for j in range(warm)] + steady + [step for i in range(micro - warm, micro) for step in backward(i)]


def schedule(name, stages, stage, micro, fuse=True):
    """Stage ``stage``'s steps under schedule ``name`` ("gpipe", "1f1b", "pipedream", or "forward" for inference).

    A step is ("forward" | "backward" | "update", j), ("send" | "recv", what, j, peer) with
    what "act" or "grad", or ("sendrecv", send, recv) of two such (what, j, peer).  With
    ``fuse``, a send to a neighbour directly followed by a receive from it becomes a sendrecv.
    """
    steps = []
    for kind, j in _order(name, stages, stage, micro):
        if kind == "F":
            steps += [("recv", "act", j, stage - 1)] * (stage > 0) + [("forward", j)] + \
                     [("send", "act", j, stage + 1)] * (stage < stages - 1)
        elif kind == "B":
            steps += [("recv", "grad", j, stage + 1)] * (stage < stages - 1) + [("backward", j)] + \
                     [("send", "grad", j, stage - 1)] * (stage > 0)
        else:
            steps.append(("update", j))
    if not fuse:
        return steps
    fused = []
    for step in steps:
        if step[0] == "recv" and fused and fused[-1][0] == "send" and fused[-1][3] == step[3]:
            fused[-1] = ("sendrecv", fused[-1][1:], step[1:])
        else:
            fused.append(step)
    return fused


def replay(name, stages, micro, cost):
    """The bubble schedule ``name`` implies on dedicated cores: its steps replayed with ``cost[s][kind]``
    seconds per compute step of stage s and free messages; the mean over the stages of the idle share."""
    steps = [schedule(name, stages, s, micro) for s in range(stages)]
    clock, at, sent = [0.0] * stages, [0] * stages, {}
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while at[s] < len(steps[s]):
                kind, *rest = steps[s][at[s]]
                if kind in cost[s]:
                    clock[s] += cost[s][kind]
                else:
                    for what, j, q in {"send": [rest], "sendrecv": rest[:1]}.get(kind, []):
                        sent.setdefault((what, j, s, q), clock[s])  # posted once, even if its receive waits
                    wanted = [(what, j, q, s) for what, j, q in {"recv": [rest], "sendrecv": rest[1:]}.get(kind, [])]
                    if any(key not in sent for key in wanted):
                        break
                    clock[s] = max([clock[s]] + [sent[key] for key in wanted])
                at[s] += 1
                moved = True
    span = max(clock)
    return float(np.mean([1 - sum(cost[s][k] * sum(step[0] == k for step in steps[s]) for k in cost[s]) / span
                          for s in range(stages)]))


def as_schedule(s, steps, micro):
    """Append ``steps`` to collectives.schedule.Schedule ``s`` over symbolic slots, for the checker.

    ACC holds 4 x ``micro`` one-element slots: activations in (j), out (micro + j), gradients
    from the next stage (2 micro + j) and to the previous (3 micro + j).  A forward copies
    in to out; a backward puts (out, gradient in) into gradient out (the last stage: out), so
    stage 0's gradient slots show which activation and gradient every backward combined; an
    update moves no data.
    """
    slot = {("act", "send"): micro, ("act", "recv"): 0, ("grad", "recv"): 2 * micro, ("grad", "send"): 3 * micro}

    def region(what, j, way):
        return ACC, slot[what, way] + j, 1
    last = s.rank == s.size - 1
    for step in steps:
        kind = step[0]
        if kind == "send":
            s.send(step[3], *region(step[1], step[2], "send"))
        elif kind == "recv":
            s.recv(step[3], *region(step[1], step[2], "recv"))
        elif kind == "sendrecv":
            (sw, sj, sp), (rw, rj, rp) = step[1], step[2]
            s.sendrecv(sp, region(sw, sj, "send"), rp, region(rw, rj, "recv"))
        elif kind == "forward":
            s.copy((ACC, micro + step[1], 1), (ACC, step[1], 1))
        elif kind == "backward":
            j = step[1]
            s.copy((ACC, 3 * micro + j, 1), (ACC, micro + j, 1))
            if not last:
                s.reduce((ACC, 3 * micro + j, 1), (ACC, 2 * micro + j, 1))


class _Pass:
    """One run of a schedule over one minibatch: messages, caches and weight versions per micro-batch."""

    def __init__(self, w, X, y, micro):
        self.w, self.X, self.y = w, X, y
        counts, displs = blocks(X.shape[0], micro)
        self.rows = [slice(a, a + c) for a, c in zip(displs, counts)]
        self.inbox = {"act": {}, "grad": {}}
        self.outbox = {"act": {}, "grad": {}}
        self.cache, self.stash, self.top = {}, {}, {}
        self.grad = np.zeros_like(w)
        self.loss = 0.0
        self.pred = np.zeros(X.shape[0], np.int64)


class PipelineMLP(ShardedModel):
    """An MLP of ``sizes`` (inputs, hidden widths..., classes; ReLU between layers, softmax
    cross-entropy on top) with its layers split across the stages of ``comm``.

    Layer l's parameters are W{l} (sizes[l] x sizes[l+1]) and b{l}; the whole vector lays the
    layers end to end, which for two layers is models.MLP's layout, and ``init`` draws it as
    models.MLP does.  ``loss_grad`` runs ``schedule`` ("gpipe" or "1f1b") over ``micro``
    micro-batches; ``busy`` accumulates this stage's compute seconds per kind of step (for the bubble).
    """

    def __init__(self, comm, sizes, micro=4, schedule="1f1b"):
        self.sizes, self.micro, self.schedule_name = list(sizes), micro, schedule
        layers, stages = len(sizes) - 1, comm.size
        if layers < stages:
            raise ValueError(f"a pipeline of {stages} stages needs at least {stages} layers, got {layers}")
        if micro < 1:
            raise ValueError(f"micro-batches must be at least 1, got {micro}")
        if schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"loss_grad runs a synchronous schedule, 'gpipe' or '1f1b', not {schedule!r}")
        self.layers = range(*block(layers, stages, comm.rank).indices(layers))
        self.stage, self.stages = comm.rank, stages
        self.whole = Shard(self._shapes(range(layers)))
        super().__init__(comm, self._shapes(self.layers), [f"W{l}" for l in self.layers])
        self.busy = dict.fromkeys(("forward", "backward", "update"), 0.0)

    def _shapes(self, layers):
        return [shape for l in layers for shape in ((f"W{l}", (self.sizes[l], self.sizes[l + 1])),
                                                    (f"b{l}", (self.sizes[l + 1],)))]

    def shard(self, w):
        """This stage's layers of the whole parameter vector ``w``."""
        return self.pack({name: self.whole.view(w, name) for name in self.slices})

    def init(self, rng):
        """This stage's part of He-scaled random weights and zero biases for the whole MLP."""
        w = np.zeros(self.whole.size)
        for l in range(len(self.sizes) - 1):
            sl = self.whole.slices[f"W{l}"][0]
            w[sl] = rng.standard_normal(sl.stop - sl.start) * np.sqrt(2.0 / max(self.sizes[l], 1))
        return self.shard(w)

    # ---- the runtime ---------------------------------------------------------------------

    def _post(self, st, what, j, peer, send):
        if send:
            return p2p.push(self.comm, st.outbox[what].pop(j), peer)
        width = self.sizes[self.layers.start if what == "act" else self.layers.stop]
        buf = st.inbox[what][j] = np.empty((st.rows[j].stop - st.rows[j].start, width))
        return p2p.receive(self.comm, buf, peer)

    def _forward(self, st, j):
        w = st.stash[j] = st.w  # weight stashing: the backward of j uses these, whatever updates come between
        x = st.inbox["act"].pop(j) if self.stage else st.X[st.rows[j]]
        cache = []
        for l in self.layers:
            z = np.asarray(x @ self.view(w, f"W{l}")) + self.view(w, f"b{l}")
            if l < len(self.sizes) - 2:
                z = np.maximum(z, 0)
            cache.append((x, z))
            x = z
        st.cache[j] = cache
        if self.stage < self.stages - 1:
            st.outbox["act"][j] = x
        elif st.y is None:
            st.pred[st.rows[j]] = x.argmax(1)
        else:
            loss, st.top[j] = cross_entropy(x, st.y[st.rows[j]])
            st.loss += loss

    def _backward(self, st, j):
        w = st.stash.pop(j)
        d = st.top.pop(j) if self.stage == self.stages - 1 else st.inbox["grad"].pop(j)
        for l, (x, z) in zip(reversed(self.layers), reversed(st.cache.pop(j))):
            if l < len(self.sizes) - 2:
                d = d * (z > 0)
            W = self.view(w, f"W{l}")
            self.view(st.grad, f"W{l}")[...] += np.asarray(x.T @ d)
            self.view(st.grad, f"b{l}")[...] += d.sum(0)
            if l:
                d = d @ W.T
        if self.stage:
            st.outbox["grad"][j] = d

    def _run(self, name, st, update=None):
        """Execute this stage's steps of schedule ``name`` on ``st``; ``update(st, j)`` for update steps."""
        compute = {"forward": self._forward, "backward": self._backward, "update": update}
        for step in schedule(name, self.stages, self.stage, self.micro):
            kind = step[0]
            if kind in compute:
                t = time.perf_counter()
                compute[kind](st, step[1])
                self.busy[kind] += time.perf_counter() - t
            elif kind == "sendrecv":
                p2p.wait([self._post(st, *step[1], True), self._post(st, *step[2], False)])
            else:
                p2p.wait([self._post(st, *step[1:], kind == "send")])
        return st

    def loss_grad(self, w, X, y):
        """Summed cross-entropy over the rows (the same on every stage) and this stage's gradient."""
        st = self._run(self.schedule_name, _Pass(w, X, y, self.micro))
        loss = np.array([st.loss])
        self.comm.Bcast(loss, root=self.stages - 1)
        return float(loss[0]), st.grad

    def predict(self, w, X):
        """Class index of the largest output, on every stage."""
        st = self._run("forward", _Pass(w, X, None, self.micro))
        self.comm.Bcast(st.pred, root=self.stages - 1)
        return st.pred

    def pipedream(self, w, X, y, lr, lam=0.0):
        """One asynchronous PipeDream pass over the rows of ``X``: (new weights, summed loss).

        Each micro-batch's backward is followed by an SGD step of this stage's weights on its
        mean gradient plus the L2 penalty's; its forward and backward use the same (stashed) weights.
        """
        def update(st, j):
            rows = st.rows[j].stop - st.rows[j].start
            st.w = st.w - lr * (st.grad / max(rows, 1) + lam * self.penalised * st.w)
            st.grad = np.zeros_like(st.w)
        st = self._run("pipedream", _Pass(w.copy(), X, y, self.micro), update)
        loss = np.array([st.loss])
        self.comm.Bcast(loss, root=self.stages - 1)
        return st.w, float(loss[0])
