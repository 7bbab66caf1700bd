"""Minibatches: which rows each step of an epoch computes.

Global minibatches (sync, ddp, ps, data servers) are the next ``batch`` of a seeded
permutation of the *global* row numbers, so the trajectory does not depend on the number of
ranks; local models (local, gossip, fedavg) draw from their own rows.  Everything is a
function of the seed, the epoch and the step, so a checkpointed run resumes to the very
same trajectory.
"""
import numpy as np
from mpi4py import MPI


class Batches:
    """The minibatches of the run whose Context is ``ctx``."""

    def __init__(self, ctx):
        self.ctx = ctx

    def permutation(self, epoch, n_total):
        """The seeded order of the ``n_total`` global row numbers in ``epoch``: batch s is its s-th ``batch`` rows."""
        return np.random.default_rng([self.ctx.o["seed"], epoch]).permutation(n_total)

    def global_batches(self, epoch, n_total, rows):
        """[(local index array, global batch size)] for each step of ``epoch``.

        The epoch's order is a seeded permutation of all ``n_total`` row numbers; a step's
        batch is the next ``batch`` of them, of which each rank computes the rows it holds.
        """
        B = self.ctx.o["batch"]
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
        ctx = self.ctx
        n = len(ctx.train)
        b = max(1, ctx.o["batch"] // ctx.size)
        if n == 0:
            return [(np.zeros(0, np.int64), 1)] * steps
        perm = np.random.default_rng([ctx.o["seed"], epoch, ctx.rank]).permutation(n)
        return [(perm[(s * b + np.arange(b)) % n], b) for s in range(steps)]

    def local_steps(self):
        """Steps of an epoch of local batches: as many as the rank with the most rows needs (collective)."""
        ctx = self.ctx
        b = max(1, ctx.o["batch"] // ctx.size)
        return ctx.comm.comm.allreduce(-(-len(ctx.train) // b), op=MPI.MAX)
