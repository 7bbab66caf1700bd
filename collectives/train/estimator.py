"""scikit-learn style estimators: every rank calls ``fit`` with its own rows (X, y).

``Classifier().fit(X, y).score(X, y)`` works in one process like any scikit-learn
estimator; under mpiexec the rows of all ranks form the training set, and ``score``
is the accuracy (or R^2) over all ranks' rows.
"""
import inspect

import numpy as np
from mpi4py import MPI

from .. import Comm
from . import data as D
from .models import make_model
from .trainer import Trainer


class _Estimator:
    classify = True

    def __init__(self, model=None, optimizer="lbfgs", sync="sync", lam=1e-3, epochs=None, batch=64,
                 lr=None, allreduce=None, compress="none", hidden=64, standardize=True, seed=0, comm=None):
        self.model, self.optimizer, self.sync, self.lam = model, optimizer, sync, lam
        self.epochs, self.batch, self.lr = epochs, batch, lr
        self.allreduce, self.compress, self.hidden = allreduce, compress, hidden
        self.standardize, self.seed, self.comm = standardize, seed, comm

    def get_params(self, deep=True):
        """The constructor's arguments, by name."""
        return {k: getattr(self, k) for k in inspect.signature(_Estimator.__init__).parameters if k != "self"}

    def set_params(self, **params):
        """Set constructor arguments; returns self."""
        valid = self.get_params()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}")
            setattr(self, k, v)
        return self

    def _scale(self, X):
        if not self.standardize:
            return X
        X = X.toarray() if D.issparse(X) else np.asarray(X, np.float64)
        return (X - self.mean_) / self.std_

    def fit(self, X, y):
        """Fit on this rank's rows ``X`` (dense or sparse, n x d) and targets ``y``."""
        if getattr(self, "_comm", None) is not None:
            self._comm.Free()
        self._comm = Comm(self.comm)
        raw = self._comm.comm
        X = X if D.issparse(X) else np.asarray(X, np.float64)
        y = np.asarray(y)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        offset = raw.exscan(X.shape[0]) or 0
        if self.classify:
            self.classes_ = D.classes(raw, y)
            y = np.searchsorted(self.classes_, y)
        part = D.Part(X, y if self.classify else y.astype(np.float64), offset + np.arange(X.shape[0]))
        if self.standardize:
            (part,), self.mean_, self.std_ = D.standardize(raw, [part])
        name = self.model or ("softmax" if self.classify else "linear")
        self.net_ = make_model(name, X.shape[1], len(self.classes_) if self.classify else 0, self.hidden)
        options = dict(optimizer=self.optimizer, sync=self.sync, lam=self.lam, epochs=self.epochs,
                       batch=self.batch, lr=self.lr, allreduce=self.allreduce, compress=self.compress,
                       seed=self.seed, progress=False, log_every=10 ** 9)
        trainer = Trainer(self._comm, self.net_, part, None, is_classifier=self.classify, **options)
        self.coef_ = trainer.fit()
        self.objective_ = trainer.final[0]
        return self

    def _predict(self, X):
        return self.net_.predict(self.coef_, self._scale(X))


class Classifier(_Estimator):
    """Softmax (or binary logistic, or MLP) classification trained over MPI ranks."""

    def predict(self, X):
        """Predicted labels of ``X``'s rows."""
        return self.classes_[self._predict(X)]

    def score(self, X, y):
        """Accuracy over every rank's rows."""
        counts = np.array([(self.predict(X) == np.asarray(y)).sum(), len(y)], np.float64)
        self._comm.Allreduce(MPI.IN_PLACE, counts)
        return counts[0] / counts[1]


class Regressor(_Estimator):
    """Least-squares linear regression with L2 regularisation, trained over MPI ranks."""

    classify = False

    def predict(self, X):
        """Fitted values of ``X``'s rows."""
        return self._predict(X)

    def score(self, X, y):
        """Coefficient of determination R^2 over every rank's rows."""
        y = np.asarray(y, np.float64)
        r = self.predict(X) - y
        sums = np.array([r @ r, y.sum(), y @ y, len(y)])
        self._comm.Allreduce(MPI.IN_PLACE, sums)
        total = sums[2] - sums[1] ** 2 / sums[3]
        return 1 - sums[0] / total
