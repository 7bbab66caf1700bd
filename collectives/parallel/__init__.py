"""Splitting the model instead of the data: tensor (collectives.parallel.tensor) and pipeline
(collectives.parallel.pipeline) parallelism, and data x model process grids
(collectives.parallel.grid).

Every model here has the training driver's model interface (collectives.train.models) over
this rank's *shard* of the parameters: ``init``, ``loss_grad`` (summed loss over the rows,
the same on every rank of the model's communicator, and this shard's gradient), ``penalty``,
``predict``, ``size`` and ``penalised``.  So the trainer runs them unchanged over the data
axis of a grid, and its gradient all-reduce is the data-parallel half of a hybrid layout.
"""
import numpy as np

from ..schedule import blocks
from ..train.models import _logsumexp, layout


def block(n, parts, index):
    """The ``index``-th of ``parts`` near-equal contiguous blocks of range(n), as a slice."""
    counts, displs = blocks(n, parts)
    return slice(displs[index], displs[index] + counts[index])


def cross_entropy(Z, y):
    """Summed cross-entropy of scores ``Z`` (rows x classes) against class indices ``y``, and its gradient."""
    lse = _logsumexp(Z)
    rows = np.arange(len(y))
    loss = float(lse.sum() - Z[rows, y].sum())
    D = np.exp(Z - lse[:, None])
    D[rows, y] -= 1
    return loss, D


class Shard:
    """A flat parameter vector of named arrays (name -> shape), the layout models.MLP uses."""

    def __init__(self, shapes):
        self.slices, self.size = layout(shapes)

    def view(self, w, name):
        """The array ``name`` of the flat vector ``w`` (a view)."""
        sl, shape = self.slices[name]
        return w[sl].reshape(shape)

    def mask(self, names):
        """1 over the entries of the arrays in ``names``, 0 elsewhere."""
        m = np.zeros(self.size)
        for name in names:
            m[self.slices[name][0]] = 1
        return m

    def pack(self, parts):
        """The flat vector of the arrays in ``parts`` (name -> array), in this layout's order."""
        return np.concatenate([np.ravel(parts[name]) for name in self.slices])


class ShardedModel(Shard):
    """A model whose parameters are split over the ranks of ``comm`` (a collectives.Comm): the
    penalty of the whole model is the sum of the shards' (replicated arrays are never penalised)."""

    def __init__(self, comm, shapes, penalised):
        super().__init__(shapes)
        self.comm = comm
        self.penalised = self.mask(penalised)

    def penalty(self, w, lam):
        """(lambda/2)||W||^2 over every shard's weights, and this shard's part of its gradient."""
        pw = w * self.penalised
        return self.comm.comm.allreduce(0.5 * lam * float(pw @ pw)), lam * pw

