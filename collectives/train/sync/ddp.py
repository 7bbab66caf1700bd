"""``ddp``: ``sync`` with the gradient all-reduced bucket by bucket while the backward pass
goes on, as PyTorch DDP does.

The model's backward pass yields its gradient layer by layer, from the last; parts go into
buckets of ``bucket_kb`` KiB, and each full bucket starts a nonblocking all-reduce
(Iallreduce) at once, so communication overlaps the rest of the backward pass.  The step
waits for them all, then updates as ``sync`` does.  The overlap reported is the share of
the communication's time that the backward pass hid.  With ``compress``, each bucket's
compressed all-reduce (its own error-feedback state) runs as soon as the bucket is full,
blocking.
"""
import time

import numpy as np

from .loop import Stepped


class DDP(Stepped):
    """Synchronous data-parallel steps with bucketed all-reduces overlapping the backward pass."""

    name = "ddp"
    compressible = True

    def start(self, w, opt):
        """Bucket capacity in float64 elements; no overlap measured yet."""
        self.cap = max(1, int(self.ctx.o["bucket_kb"] * 1024 / 8))
        self.spans = []

    def plan(self, epoch):
        """The epoch's global minibatches."""
        ctx = self.ctx
        return ctx.batches.global_batches(epoch, ctx.n, ctx.train.rows)

    def step(self, w, opt, epoch, s, item):
        """One step: backward pass with the buckets' all-reduces under way, then the update."""
        ctx = self.ctx
        sums, clock, stragglers = ctx.sums, ctx.clock, ctx.stragglers
        compressor = sums.compression.compressor
        index, count = item
        X, y = ctx.train.X[index], ctx.train.y[index]
        g = np.empty_like(w)
        pending, bucket, started, blocked = [], [], None, [0.0]
        t = time.perf_counter()
        parts = ctx.model.backward(w, X, y)
        next(parts)

        def launch():
            buf = np.concatenate([part for _, part in bucket])
            names = [name for name, _ in bucket]
            if compressor is None:
                pending.append((names, buf, sums.reducer(ctx.comm, "Iallreduce")(buf)))
            else:
                t0 = time.perf_counter()
                pending.append((names, sums.compression.sum(buf, tuple(names)), None))
                blocked[0] += time.perf_counter() - t0
            bucket.clear()

        # a straggler slows each layer's backward down, so its buckets leave late too
        factor, mark = stragglers.slowdown(), t
        for name, part in parts:
            mark = stragglers.stretch(factor, mark)
            if bucket and sum(p.size for _, p in bucket) + part.size > self.cap:
                started = started or time.perf_counter()
                launch()
            bucket.append((name, part))
        if bucket:
            started = started or time.perf_counter()
            launch()
        t_wait = time.perf_counter()
        clock.total["compute"] += t_wait - t - blocked[0]
        for names, buf, req in pending:
            if req is not None:
                req.wait()
            at = 0
            for name in names:
                sl = ctx.model.slices[name][0]
                g[sl] = buf[at:at + sl.stop - sl.start]
                at += sl.stop - sl.start
        end = time.perf_counter()
        clock.total["comm"] += end - t_wait + blocked[0]
        clock.total["hidden"] += t_wait - started
        self.spans.append((end - started, end - t_wait))
        with ctx.updating():
            opt.step(w, ctx.objective.add_penalty(w, g / count))
        total = sum(a for a, _ in self.spans)
        ctx.progress.overlap = 1 - sum(b for _, b in self.spans) / total if total > 0 else 0.0
