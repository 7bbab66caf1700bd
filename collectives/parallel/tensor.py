"""Tensor parallelism in the Megatron-LM arrangement (Shoeybi et al., 2019) over a collectives.Comm.

A linear layer Y = X W + b is a block matrix product; split W by columns or by rows:

* ``ColumnParallelLinear``: rank r holds W[:, c_r] and b[c_r] (its block of output features)
  and computes Y[:, c_r] from the whole X.  Forward: no communication.  Backward: the input's
  gradient dX = sum_r dY[:, c_r] W[:, c_r]^T is one all-reduce (skipped when X is the data).
* ``RowParallelLinear``: rank r holds W[i_r, :] (its block of input features) and X[:, i_r],
  and computes the partial product X[:, i_r] W[i_r, :].  Forward: one all-reduce of the
  partial products, then + b (b replicated).  Backward: dX[:, i_r] = dY W[i_r, :]^T and
  dW[i_r, :] = X[:, i_r]^T dY are local: no communication.

Column then row (an MLP block) needs nothing between the two, since the column layer's
output split is the row layer's input split and ReLU acts elementwise: one all-reduce
forward (after the row layer) and one backward (the column layer's input gradient).

``TensorParallelMLP`` is models.MLP split that way; ``FeatureParallelSoftmax`` is
models.Softmax with its features split (a row-parallel layer alone), for wide data: each
rank keeps 1/p of W.  Cost of the all-reduce on n rows of k outputs with the ring algorithm
at p ranks: 2(p-1) alpha + 2 n k (p-1)/p beta + n k (p-1)/p gamma, per forward.
Uneven splits are fine (a rank may even hold no units when p exceeds them).
"""
import numpy as np
from mpi4py import MPI

from ..train.models import MLP, Softmax
from . import ShardedModel, block, cross_entropy


class ParallelLinear:
    """What both splits share: the communicator, the all-reduce algorithm and this rank's block."""

    def __init__(self, comm, n_in, n_out, split, algorithm=None):
        self.comm, self.algorithm = comm, algorithm
        self.n_in, self.n_out = n_in, n_out
        self.part = block(n_in if split == "rows" else n_out, comm.size, comm.rank)

    def allreduce(self, buf):
        """Sum ``buf`` over the ranks in place with our all-reduce."""
        buf = np.ascontiguousarray(buf)
        self.comm.Allreduce(MPI.IN_PLACE, buf, algorithm=self.algorithm)
        return buf


class ColumnParallelLinear(ParallelLinear):
    """Y[:, c_r] = X W[:, c_r] + b[c_r]: the output features split across the ranks."""

    def __init__(self, comm, n_in, n_out, algorithm=None):
        super().__init__(comm, n_in, n_out, "columns", algorithm)
        width = self.part.stop - self.part.start
        self.shapes = (("W", (n_in, width)), ("b", (width,)))

    def shard(self, W, b):
        """This rank's columns of ``W`` and entries of ``b``."""
        return W[:, self.part], b[self.part]

    def forward(self, W, b, X):
        """This rank's block of output columns (no communication)."""
        return np.asarray(X @ W) + b

    def backward(self, W, X, dY, input_grad=True):
        """(dW, db, dX) from this rank's block of the output gradient; dX (all-reduced) only if ``input_grad``."""
        dX = self.allreduce(dY @ W.T) if input_grad else None
        return np.asarray(X.T @ dY), dY.sum(0), dX


class RowParallelLinear(ParallelLinear):
    """Y = sum_r X[:, i_r] W[i_r, :] + b: the input features split, partial products all-reduced."""

    def __init__(self, comm, n_in, n_out, algorithm=None):
        super().__init__(comm, n_in, n_out, "rows", algorithm)
        self.shapes = (("W", (self.part.stop - self.part.start, n_out)), ("b", (n_out,)))

    def shard(self, W, b):
        """This rank's rows of ``W``; ``b`` whole (replicated)."""
        return W[self.part], b

    def forward(self, W, b, X_part):
        """The whole output from this rank's input columns ``X_part``: one all-reduce."""
        return self.allreduce(np.asarray(X_part @ W)) + b

    def backward(self, W, X_part, dY, input_grad=True):
        """(dW, db, dX_part), all local; dX_part (this rank's input columns) only if ``input_grad``."""
        return np.asarray(X_part.T @ dY), dY.sum(0), (dY @ W.T if input_grad else None)


def _named(prefix, shapes):
    return [(name + prefix, shape) for name, shape in shapes]


class TensorParallelMLP(ShardedModel):
    """models.MLP (one hidden ReLU layer, softmax output) with its hidden units split across ``comm``.

    W1, b1 are column-parallel, W2 row-parallel, b2 replicated.  ``init`` draws the whole
    MLP's parameters as models.MLP does and keeps this rank's shard, so a run matches the
    single-process model's.
    """

    def __init__(self, comm, n_features, n_classes, hidden=64, algorithm=None):
        self.whole = MLP(n_features, n_classes, hidden)
        self.first = ColumnParallelLinear(comm, n_features, hidden, algorithm)
        self.second = RowParallelLinear(comm, hidden, n_classes, algorithm)
        super().__init__(comm, _named("1", self.first.shapes) + _named("2", self.second.shapes), ("W1", "W2"))

    def shard(self, w):
        """This rank's shard of the whole MLP's parameter vector ``w`` (models.MLP's layout)."""
        W1, b1 = self.first.shard(self.whole._view(w, "W1"), self.whole._view(w, "b1"))
        W2, b2 = self.second.shard(self.whole._view(w, "W2"), self.whole._view(w, "b2"))
        return self.pack(dict(W1=W1, b1=b1, W2=W2, b2=b2))

    def init(self, rng):
        """This rank's shard of models.MLP's initial parameters."""
        return self.shard(self.whole.init(rng))

    def _forward(self, w, X):
        A = self.first.forward(self.view(w, "W1"), self.view(w, "b1"), X)
        H = np.maximum(A, 0)
        return H, self.second.forward(self.view(w, "W2"), self.view(w, "b2"), H)

    def loss_grad(self, w, X, y):
        """Summed cross-entropy (the same on every rank) and this shard's gradient."""
        H, Z = self._forward(w, X)
        loss, D = cross_entropy(Z, y)
        dW2, db2, dH = self.second.backward(self.view(w, "W2"), H, D)
        # the first layer's input is the data: its gradient is not needed, so no backward all-reduce
        dW1, db1, _ = self.first.backward(self.view(w, "W1"), X, dH * (H > 0), input_grad=False)
        return loss, self.pack(dict(W1=dW1, b1=db1, W2=dW2, b2=db2))

    def predict(self, w, X):
        """Class index of the largest output."""
        return self._forward(w, X)[1].argmax(1)


class FeatureParallelSoftmax(ShardedModel):
    """models.Softmax with the features split across ``comm``: W by rows (row-parallel), the
    intercept replicated; the partial scores are all-reduced, the gradient is local."""

    def __init__(self, comm, n_features, n_classes, algorithm=None):
        self.whole = Softmax(n_features, n_classes)
        self.layer = RowParallelLinear(comm, n_features, n_classes, algorithm)
        super().__init__(comm, self.layer.shapes, ("W",))

    def shard(self, w):
        """This rank's shard of the whole model's parameter vector ``w`` (models.Softmax's layout)."""
        W, b = self.whole._split(w)
        W, b = self.layer.shard(W, b)
        return self.pack(dict(W=W, b=b))

    def init(self, rng):
        """Zeros, as models.Softmax starts."""
        return np.zeros(self.size)

    def scores(self, w, X):
        """The whole scores X W + b on every rank, from this rank's feature columns."""
        return self.layer.forward(self.view(w, "W"), self.view(w, "b"), X[:, self.layer.part])

    def loss_grad(self, w, X, y):
        """Summed cross-entropy (the same on every rank) and this shard's gradient."""
        loss, D = cross_entropy(self.scores(w, X), y)
        dW, db, _ = self.layer.backward(self.view(w, "W"), X[:, self.layer.part], D, input_grad=False)
        return loss, self.pack(dict(W=dW, b=db))

    def predict(self, w, X):
        """Class index of the largest score."""
        return self.scores(w, X).argmax(1)
