"""Preparing distributed data: classes, a seeded train/test split, standardisation, partitions.

Every function is collective over an mpi4py communicator and works from global row
numbers, so the result does not depend on how many ranks read the file: a row lands in
the test set, or in a federated client, by its number and the seed alone.
"""
import os
import re
import sys

import numpy as np
from mpi4py import MPI

from .errors import UsageError

DIGITS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "digits.svm")
# --data synthetic:<rows>x<features>x<classes>[:seed], a problem generated in memory (synthetic)
SYNTHETIC = re.compile(r"synthetic:(\d+)x(\d+)x(\d+)(?::(\d+))?")
# Rows are drawn in blocks of this many, each from its own seed, so a rank draws only the
# blocks its rows fall in and the rows do not depend on the rank count.
SYNTHETIC_BLOCK = 256
# Reproducible mode: the training rows are cut into this many shards by row number, whatever
# the rank count; every sum over rows is a sum per shard, then a fixed tree over the shards.
SHARDS = 8


def issparse(X):
    """Whether ``X`` is a SciPy sparse matrix, without importing SciPy where nothing has."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(X)


class Part:
    """Rows held by this rank: features X (dense or CSR), targets y and their global row numbers."""

    def __init__(self, X, y, rows):
        self.X, self.y, self.rows = X, y, np.asarray(rows, np.int64)

    def __len__(self):
        return self.X.shape[0]

    def take(self, index):
        """The rows at local positions ``index``."""
        return Part(self.X[index], self.y[index], self.rows[index])


def synthetic_spec(name):
    """(rows, features, classes, seed) of a ``synthetic:RxFxC[:seed]`` data name, or None for a file name."""
    m = SYNTHETIC.fullmatch(name)
    if m is None:
        if name.startswith("synthetic:"):
            raise UsageError(f"bad synthetic data {name!r}; want synthetic:<rows>x<features>x<classes>[:seed]")
        return None
    rows, features, n_classes, seed = (int(g) if g else 0 for g in m.groups())
    if rows < 1 or features < 1 or n_classes < 2:
        raise UsageError(f"{name}: needs at least 1 row, 1 feature and 2 classes")
    return rows, features, n_classes, seed


def synthetic(comm, rows, features, n_classes, seed=0):
    """This rank's contiguous share of a seeded Gaussian-mixture classification problem, as a Part.

    Row i is of class i mod classes (every class present, in equal shares); its features are
    the class's mean plus standard normal noise.
    The means have entries N(0, 64 / features), so any two are about 11 noise standard
    deviations apart: learnable, though not from a few rows per class in many dimensions.  A
    softmax model has (features + 1) x classes parameters.  The means and each block of
    SYNTHETIC_BLOCK rows come from their own seeds, so row i is the same at any rank count.
    """
    start, end = rows * comm.Get_rank() // comm.Get_size(), rows * (comm.Get_rank() + 1) // comm.Get_size()
    means = np.random.default_rng([seed, 0]).normal(0, 8 / np.sqrt(features), (n_classes, features))
    X, y = [np.empty((0, features))], [np.empty(0)]
    for block in range(start // SYNTHETIC_BLOCK, -(-end // SYNTHETIC_BLOCK)):
        rng = np.random.default_rng([seed, 1, block])
        first = block * SYNTHETIC_BLOCK
        n = min(SYNTHETIC_BLOCK, rows - first)
        yb = np.arange(first, first + n) % n_classes
        Xb = means[yb] + rng.standard_normal((n, features))
        keep = slice(max(start - first, 0), min(end - first, n))
        X.append(Xb[keep])
        y.append(yb[keep].astype(np.float64))
    return Part(np.concatenate(X), np.concatenate(y), np.arange(start, end))


def classes(comm, labels):
    """Sorted distinct labels over every rank."""
    return np.unique(np.concatenate(comm.allgather(np.unique(labels))))


def split(comm, part, test_fraction, seed):
    """(train, test) Parts: a seeded random ``test_fraction`` of the global rows goes to test.

    Rows are renumbered within each set (0 .. n_train - 1 in file order), which is what
    global minibatches are drawn from.
    """
    n = comm.allreduce(len(part))
    if not 0 <= test_fraction < 1:
        raise UsageError(f"test fraction must be in [0, 1), got {test_fraction}")
    is_test = np.zeros(n, bool)
    is_test[np.random.default_rng(seed).permutation(n)[:int(round(test_fraction * n))]] = True
    number = np.where(is_test, np.cumsum(is_test) - 1, np.cumsum(~is_test) - 1)
    mask = is_test[part.rows]
    out = []
    for keep in (~mask, mask):
        sub = part.take(np.flatnonzero(keep))
        sub.rows = number[sub.rows]
        out.append(sub)
    return tuple(out)


def redistribute(comm, part, dest):
    """Send local row i to rank ``dest[i]``; the rows received, ordered by row number."""
    outgoing = [part.take(np.flatnonzero(dest == r)) for r in range(comm.Get_size())]
    incoming = comm.alltoall([(q.X, q.y, q.rows) for q in outgoing])
    y = np.concatenate([y for _, y, _ in incoming])
    rows = np.concatenate([r for _, _, r in incoming])
    keep = np.argsort(rows, kind="stable")
    xs = [x for x, _, _ in incoming]
    X = sys.modules["scipy.sparse"].vstack(xs).tocsr() if issparse(part.X) else np.vstack(xs)
    return Part(X[keep], y[keep], rows[keep])


def shard_of(rows, n):
    """The shard (0 .. SHARDS - 1) of each of the global row numbers ``rows`` out of ``n``: contiguous blocks."""
    return np.asarray(rows, np.int64) * SHARDS // max(n, 1)


def by_shard(comm, part):
    """``part``'s rows moved so each shard lives on one rank (shard s on rank s * size // SHARDS).

    Returns ``part`` itself when every rank already holds whole shards only there.
    """
    n = comm.allreduce(len(part))
    dest = shard_of(part.rows, n) * comm.Get_size() // SHARDS
    if comm.allreduce(bool(np.any(dest != comm.Get_rank())), op=MPI.LOR):
        return redistribute(comm, part, dest)
    return part


def tree_sum(partials):
    """Sum of ``partials`` over axis 0 in a fixed pairwise tree: the same bits on every rank."""
    a = np.asarray(partials)
    while a.shape[0] > 1:
        half = a.shape[0] // 2
        a = np.concatenate([a[:half] + a[half:2 * half], a[2 * half:]])
    return a[0]


def shard_partials(shard, size, partial):
    """[SHARDS, size] array: row s is ``partial(local index of shard s's rows)``, zero for shards not held here.

    ``shard`` gives each local row's shard; each rank must hold whole shards (by_shard).  Summed
    over ranks, each row is non-zero on one rank alone, and x + 0 is exact whatever the
    all-reduce algorithm; tree_sum then adds the shards up.  So the total's bits depend on
    neither the rank count nor the algorithm.
    """
    out = np.zeros((SHARDS, size))
    for s in np.unique(shard):
        out[s] = partial(np.flatnonzero(shard == s))
    out += 0.0  # -0.0 becomes +0.0, so adding another rank's +0.0 cannot flip a sign bit
    return out


def standardize(comm, parts, dense=True, reproducible=False):
    """(parts, mean, std): features scaled to zero mean, unit variance by ``parts[0]``'s statistics.

    Statistics are over every rank's rows.  Constant features are centred and left
    unscaled.  ``dense=False`` keeps sparse rows sparse by scaling without centring.
    ``reproducible`` sums shard by shard (shard_sums; ``parts[0]`` must be by_shard).
    """
    X = parts[0].X
    n = comm.allreduce(X.shape[0])

    def sums_of(index):
        Xi = X[index]
        return np.concatenate([np.asarray(Xi.sum(0)).ravel(),
                               np.asarray(Xi.multiply(Xi).sum(0) if issparse(Xi) else (Xi * Xi).sum(0)).ravel()])

    if reproducible:
        total = shard_partials(shard_of(parts[0].rows, n), 2 * X.shape[1], sums_of)
        comm.Allreduce(MPI.IN_PLACE, total)
        total = tree_sum(total).reshape(2, -1)
    else:
        sums = sums_of(slice(None)).reshape(2, -1)
        total = np.empty_like(sums)
        comm.Allreduce(sums, total)
    mean = total[0] / max(n, 1)
    var = np.maximum(total[1] / max(n, 1) - mean * mean, 0)
    std = np.sqrt(var)
    std[std == 0] = 1
    out = []
    for p in parts:
        if dense:
            Xs = ((p.X.toarray() if issparse(p.X) else p.X) - mean) / std
        else:
            import scipy.sparse as sp  # only the sparse scaling needs SciPy

            Xs = sp.csr_matrix(p.X @ sp.diags(1 / std))
        out.append(Part(Xs, p.y, p.rows))
    return out, mean, std


def label_skew(comm, part, shards_per_client, seed):
    """Re-partition rows so each rank holds ``shards_per_client`` label-sorted shards (non-IID).

    Rows are ordered globally by (label, row number) and cut into ``size * shards_per_client``
    equal shards, dealt to ranks by a seeded permutation (McMahan et al.'s pathological split).
    """
    p = comm.Get_size()
    labels = classes(comm, part.y)
    code = np.searchsorted(labels, part.y)
    counts = np.bincount(code, minlength=len(labels))
    total = np.empty_like(counts)
    comm.Allreduce(counts, total)
    before = comm.exscan(counts)
    if before is None:  # rank 0
        before = np.zeros_like(counts)
    order = np.lexsort((part.rows, code))
    rank_in_label = np.empty(len(part), np.int64)
    for c in range(len(labels)):
        idx = order[code[order] == c]
        rank_in_label[idx] = np.arange(len(idx))
    position = np.concatenate(([0], np.cumsum(total)[:-1]))[code] + before[code] + rank_in_label
    nshards = p * shards_per_client
    n = int(total.sum())
    shard = position * nshards // max(n, 1)
    owner = np.empty(nshards, np.int64)
    owner[np.random.default_rng(seed).permutation(nshards)] = np.arange(nshards) // shards_per_client
    return redistribute(comm, part, owner[shard])
