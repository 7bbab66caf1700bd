"""``fedavg``: federated averaging.  Each round (an epoch) a seeded fraction
``client_fraction`` of the ranks (clients) trains for ``local_epochs`` epochs on its own
rows from the global model; the new global model is the average of theirs weighted by
their rows.
"""
import numpy as np

from .loop import Stepped


class FedAvg(Stepped):
    """One round of federated averaging per epoch."""

    name = "fedavg"

    def start(self, w, opt):
        """Clients per round and local steps per round."""
        ctx = self.ctx
        o, p = ctx.o, ctx.size
        self.chosen_count = max(1, int(round(o["client_fraction"] * p)))
        b = max(1, o["batch"] // p)
        self.local_steps = o["local_epochs"] * -(-len(ctx.train) // b)

    def plan(self, epoch):
        """One round per epoch."""
        return [None]

    def step(self, w, opt, epoch, s, item):
        """The round: the chosen clients train from ``w``, which becomes their weighted average."""
        ctx = self.ctx
        o, p = ctx.o, ctx.size
        chosen = np.random.default_rng([o["seed"], epoch]).permutation(p)[:self.chosen_count]
        buf = np.zeros(w.size + 1)
        if ctx.rank in chosen and len(ctx.train):
            local = w.copy()
            client = ctx.new_optimizer()
            for index, count in ctx.batches.local_batches(epoch, self.local_steps):
                client.step(local, ctx.batch_gradient(local, index, count))
            buf[:-1] = len(ctx.train) * local
            buf[-1] = len(ctx.train)
        ctx.sums.allreduce(buf)
        w[...] = buf[:-1] / buf[-1]
