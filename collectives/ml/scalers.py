"""StandardScaler and MinMaxScaler whose statistics cover every rank's rows.

StandardScaler: each rank computes its per-feature count, mean and sum of squared
deviations from that mean (M2, two-pass with the rounding correction, as scikit-learn),
one all-gather shares them, and every rank combines them in the same pairwise tree by
Chan, Golub and LeVeque's update

    n = na + nb,  delta = mb - ma,  mean = ma + delta nb / n,  M2 = M2a + M2b + delta^2 na nb / n,

which, unlike a sum of squares less n mean^2, does not cancel when the mean is large
against the spread.  Each mean travels with the residual of its rounding (what the
deviations from it still sum to), so ``delta`` keeps its digits too: at mean 1e9 and unit
spread the variance matches scikit-learn's in one process to 1e-15, where the plain update
loses 1e-8 and a sum of squares all of it.  NaNs are left out of a feature's statistics, as
scikit-learn does.  Cost: one all-gather of 4 d doubles per rank.

MinMaxScaler: one all-reduce (MIN) of the per-feature minima and negated maxima.

Fitted attributes, their names, dtypes and rules (the population variance, near-constant
features scaled by 1) are scikit-learn's, so its scalers fitted on all rows are the
reference.
"""
import numpy as np
import scipy.sparse as sp
from sklearn.utils.sparsefuncs import inplace_column_scale
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import functional
from ..train.estimator import errors_together, rows_together
from .stage import Stage

FLOATS = (np.float64, np.float32)


def _moments(X):
    """Per-feature (count, mean, residual of the mean, M2) of this rank's rows of ``X`` (dense or
    CSR/CSC), NaNs left out; all 0 for a feature with no values.

    The mean is the rounded sum / count, and the residual what the deviations from it still
    sum to, over the count: mean + residual is the mean to twice the precision, which keeps
    Chan's ``delta`` exact-ish when the means are large against the spread.
    """
    if sp.issparse(X):
        X = X.tocsc()
        nan = np.isnan(X.data)
        cols = np.repeat(np.arange(X.shape[1]), np.diff(X.indptr))[~nan]
        values = X.data[~nan].astype(np.float64)
        n = X.shape[0] - np.bincount(np.repeat(np.arange(X.shape[1]), np.diff(X.indptr))[nan], minlength=X.shape[1])
        zeros = n - np.bincount(cols, minlength=X.shape[1])  # implicit zeros deviate by -mean each
        mean = np.divide(np.bincount(cols, weights=values, minlength=X.shape[1]), n, out=np.zeros(X.shape[1]),
                         where=n > 0)
        dev = values - mean[cols]
        dev_sum = np.bincount(cols, weights=dev, minlength=X.shape[1]) - zeros * mean
        dev_squares = np.bincount(cols, weights=dev * dev, minlength=X.shape[1]) + zeros * mean * mean
    else:
        X = np.asarray(X, np.float64)
        n = X.shape[0] - np.isnan(X).sum(0)
        mean = np.divide(np.nansum(X, 0), n, out=np.zeros(X.shape[1]), where=n > 0)
        dev = X - mean
        dev_sum, dev_squares = np.nansum(dev, 0), np.nansum(dev * dev, 0)
    residual = np.divide(dev_sum, n, out=np.zeros(X.shape[1]), where=n > 0)
    # the two-pass sum of squares, less the rounding error of the mean (as scikit-learn's)
    return n.astype(np.float64), mean, residual, dev_squares - dev_sum * residual


def _chan(a, b):
    """(n, mean, residual, M2) of the union of two disjoint row sets given as such each."""
    na, ma, ra, m2a = a
    nb, mb, rb, m2b = b
    n = na + nb
    share = np.divide(nb, n, out=np.zeros_like(n), where=n > 0)
    delta = (mb - ma) + (rb - ra)
    step = delta * share
    mean = ma + step
    # what rounding ma + step lost (Knuth's two-sum), kept in the residual
    back = mean - ma
    residual = ra + ((ma - (mean - back)) + (step - back))
    m2 = m2a + m2b + delta * delta * na * share
    # a side without values contributes nothing, not even rounding
    union = np.stack([n, mean, residual, m2])
    return np.where(na > 0, np.where(nb > 0, union, np.stack(a)), np.stack(b))


def combine(parts):
    """Chan's update over ``parts`` ([(n, mean, residual, M2)], rank order) in a fixed pairwise
    tree, so every rank that combines the same parts gets the same bits."""
    parts = list(parts)
    while len(parts) > 1:
        paired = [_chan(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        parts = paired + parts[len(parts) - len(parts) % 2:]
    return parts[0]


def _zeros_to_one(scale, constant=None):
    """``scale`` with its (near-)zero entries, or those of ``constant``, set to 1."""
    scale = scale.copy()
    scale[(scale < 10 * np.finfo(scale.dtype).eps) if constant is None else constant] = 1.0
    return scale


class StandardScaler(Stage):
    """Zero mean and unit variance per feature, by statistics over every rank's rows.

    Parameters
    ----------
    with_mean, with_std : bool
        Centre, and scale, as scikit-learn's StandardScaler (sparse input needs
        ``with_mean=False``).
    comm : mpi4py communicator or collectives.Comm, optional
        The ranks that fit together (default COMM_WORLD).
    """

    def __init__(self, with_mean=True, with_std=True, comm=None):
        self.with_mean, self.with_std, self.comm = with_mean, with_std, comm

    def fit(self, X, y=None):
        """Mean and variance of every feature over every rank's rows ``X``; collective."""
        raw = self._mpi()
        with errors_together(raw):
            X = validate_data(self, X, accept_sparse=("csr", "csc"), dtype=FLOATS, ensure_all_finite="allow-nan",
                              ensure_min_samples=0)
            if sp.issparse(X) and self.with_mean:
                raise ValueError("Cannot center sparse matrices: pass `with_mean=False` instead.")
        rows_together(raw, *X.shape)
        gathered = functional.allgather(raw, np.stack(_moments(X)))
        n, mean, residual, m2 = combine(gathered)
        mean = mean + residual
        # scikit-learn's types: counts are float64 where it computes statistics, int64 otherwise,
        # one number when every feature has the same
        seen = n if self.with_mean or self.with_std else n.astype(np.int64)
        self.n_samples_seen_ = seen[0] if seen.min() == seen.max() else seen
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, mean, np.nan)
            var = m2 / n
        self.mean_ = mean if self.with_mean or self.with_std else None
        self.var_ = var if self.with_std else None
        self.scale_ = None
        if self.with_std:
            eps = np.finfo(np.float64).eps
            constant = var <= n * eps * var + (n * mean * eps) ** 2
            self.scale_ = _zeros_to_one(np.sqrt(var), constant)
        return self

    def transform(self, X):
        """This rank's rows ``X`` centred and scaled."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=("csr", "csc"), dtype=FLOATS, ensure_all_finite="allow-nan",
                          reset=False, ensure_min_samples=0, copy=True)
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError("Cannot center sparse matrices: pass `with_mean=False` instead.")
            if self.scale_ is not None:
                inplace_column_scale(X, 1 / self.scale_)
            return X
        if self.with_mean:
            X -= self.mean_
        if self.with_std:
            X /= self.scale_
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = not self.with_mean
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


class MinMaxScaler(Stage):
    """Each feature mapped linearly onto ``feature_range`` by its minimum and maximum over every
    rank's rows (dense input).

    Parameters
    ----------
    feature_range : (min, max)
        The range of the transformed features.
    clip : bool
        Clip transformed values of later rows to ``feature_range``.
    comm : mpi4py communicator or collectives.Comm, optional
        The ranks that fit together (default COMM_WORLD).
    """

    def __init__(self, feature_range=(0, 1), clip=False, comm=None):
        self.feature_range, self.clip, self.comm = feature_range, clip, comm

    def fit(self, X, y=None):
        """Minimum and maximum of every feature over every rank's rows ``X``; collective."""
        raw = self._mpi()
        with errors_together(raw):
            if self.feature_range[0] >= self.feature_range[1]:
                raise ValueError("Minimum of desired feature range must be smaller than maximum. "
                                 f"Got {self.feature_range}.")
            if sp.issparse(X):
                raise TypeError("MinMaxScaler does not support sparse input. Consider using MaxAbsScaler instead.")
            X = validate_data(self, X, dtype=FLOATS, ensure_all_finite="allow-nan", ensure_min_samples=0)
        n = rows_together(raw, *X.shape)
        # a feature with no value on a rank (no rows, or NaNs only) gives +inf there, which MIN skips
        local = np.concatenate([np.fmin.reduce(X, 0, initial=np.inf), -np.fmax.reduce(X, 0, initial=-np.inf)])
        low, high = np.split(functional.allreduce(raw, local, op="min"), 2)
        high = -high
        empty = np.isinf(low)
        low[empty] = high[empty] = np.nan
        low_range, high_range = (np.asarray(v, X.dtype) for v in self.feature_range)
        self.n_samples_seen_ = n
        self.data_min_, self.data_max_ = low, high
        self.data_range_ = high - low
        self.scale_ = (high_range - low_range) / _zeros_to_one(self.data_range_)
        self.min_ = low_range - low * self.scale_
        return self

    def transform(self, X):
        """This rank's rows ``X`` mapped onto ``feature_range``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOATS, ensure_all_finite="allow-nan", reset=False, ensure_min_samples=0,
                          copy=True)
        X *= self.scale_
        X += self.min_
        if self.clip:
            np.clip(X, self.feature_range[0], self.feature_range[1], out=X)
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
