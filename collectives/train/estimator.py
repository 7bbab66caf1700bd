"""scikit-learn estimators whose ``fit`` is collective: every rank calls it with its own rows.

``Classifier().fit(X, y).score(X, y)`` works in one process like any scikit-learn estimator
(in its Pipeline, cross_val_score, GridSearchCV, and it passes check_estimator but for the
checks tests/test_ml_estimator.py names); under mpiexec the rows of all ranks form the
training set, every rank ends with the same fitted state, and ``score`` is the accuracy
(or R^2) over all ranks' rows.  ``comm`` is the mpi4py communicator (or collectives.Comm)
of the ranks that fit together; None means COMM_WORLD.

scikit-learn is imported by the methods that need it (fit, predict, tags, clone), not by
this module: ``import collectives.train`` and ``python -m collectives train`` go without.

A fit's collectives would leave ranks waiting if only some of them raised first, so every
check a rank makes alone runs inside ``errors_together``: a ValueError, TypeError or OSError
raised on any rank is raised on every rank.
"""
import contextlib
import inspect
import io

import numpy as np
from mpi4py import MPI

from ..comm import wrap
from . import data as D
from .models import make_model
from .trainer import Trainer


def mpi_comm(comm):
    """The mpi4py communicator behind ``comm``: COMM_WORLD for None, the wrapped one of a collectives.Comm."""
    comm = MPI.COMM_WORLD if comm is None else comm
    return getattr(comm, "comm", comm)


# What errors_together agrees on: errors of the input or its files, not bugs.
AGREED = (ValueError, TypeError, OSError)


@contextlib.contextmanager
def errors_together(comm):
    """Run the block on every rank of mpi4py ``comm``; a ValueError, TypeError or OSError it
    raised on any rank is raised on every rank (this rank's own, else the lowest failing
    rank's, of the same kind and named by its rank)."""
    error = None
    try:
        yield
    except AGREED as exc:
        error = exc
    if comm.Get_size() > 1:
        kind = None if error is None else next(i for i, k in enumerate(AGREED) if isinstance(error, k))
        seen = comm.allgather(None if error is None else (kind, str(error)))
        first = next(((rank, what) for rank, what in enumerate(seen) if what is not None), None)
        if error is None and first is not None:
            rank, (kind, message) = first
            raise AGREED[kind](f"rank {rank}: {message}")
    if error is not None:
        raise error


def rows_together(comm, n_rows, n_features):
    """Rows over every rank of mpi4py ``comm``; ValueError on every rank when ranks hold
    different numbers of features or no rank holds a row."""
    shapes = comm.allgather((n_rows, n_features)) if comm.Get_size() > 1 else [(n_rows, n_features)]
    widths = {}
    for rank, (_, width) in enumerate(shapes):
        widths.setdefault(width, rank)
    if len(widths) > 1:
        (a, ra), (b, rb) = sorted(widths.items(), key=lambda item: item[1])[:2]
        raise ValueError(f"ranks hold rows of different widths: rank {ra} has {a} features, rank {rb} has {b}")
    total = sum(rows for rows, _ in shapes)
    if total == 0:
        raise ValueError(f"Found array with 0 sample(s) on every rank (shape=(0, {n_features})) "
                         "while a minimum of 1 is required.")
    return total


class ParallelEstimator:
    """scikit-learn's estimator protocol (parameters, clone, repr, tags) for estimators whose
    ``fit`` is collective over their ``comm`` parameter."""

    def get_params(self, deep=True):
        """The constructor's arguments, by name."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params):
        """Set constructor arguments; returns self."""
        valid = self.get_params()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                                 f"Valid parameters are: {sorted(valid)!r}.")
            setattr(self, name, value)
        return self

    def __repr__(self):
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{name}={value!r}" for name, value in self.get_params().items()
                   if not (value is defaults[name] or (np.isscalar(value) and value == defaults[name]))]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_clone__(self):
        # scikit-learn's clone deep-copies parameters, and a communicator cannot be copied (an
        # mpi4py one raises, a collectives.Comm owns threads): the clone shares it.
        from sklearn.base import clone

        params = self.get_params()
        return type(self)(**{name: value if name == "comm" else clone(value, safe=False)
                             for name, value in params.items()})

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False), input_tags=InputTags(sparse=True))

    def _mpi(self):
        return mpi_comm(self.comm)


class _Trained(ParallelEstimator):
    classify = True

    def __init__(self, model=None, optimizer="lbfgs", sync="sync", lam=1e-3, epochs=None, batch=64,
                 lr=None, allreduce=None, compress="none", hidden=64, standardize=True, seed=0, comm=None):
        self.model, self.optimizer, self.sync, self.lam = model, optimizer, sync, lam
        self.epochs, self.batch, self.lr = epochs, batch, lr
        self.allreduce, self.compress, self.hidden = allreduce, compress, hidden
        self.standardize, self.seed, self.comm = standardize, seed, comm

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags

    def _model_name(self):
        return self.model or ("softmax" if self.classify else "linear")

    def _net(self):
        """The model object of the fitted parameters ``coef_``."""
        k = len(self.classes_) if self.classify else 0
        return make_model(self._model_name(), self.n_features_in_, k, self.hidden)

    def _scale(self, X):
        if not self.standardize:
            return X
        X = X.toarray() if D.issparse(X) else X
        return (X - self.mean_) / self.std_

    def fit(self, X, y):
        """Fit on this rank's rows ``X`` (dense or sparse, n x d) and targets ``y``; collective."""
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import validate_data

        raw = self._mpi()
        with errors_together(raw):
            # a rank may hold no rows; rows_together refuses none on every rank
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, ensure_min_samples=0,
                                 y_numeric=not self.classify)
            if self.classify:
                check_classification_targets(y)
        rows_together(raw, *X.shape)
        offset = raw.exscan(X.shape[0]) or 0
        if self.classify:
            self.classes_ = D.classes(raw, y)
            if len(self.classes_) < 2:
                raise ValueError(f"a classifier needs two classes or more, got one class: {self.classes_[0]!r}")
            y = np.searchsorted(self.classes_, y)
        part = D.Part(X, y if self.classify else y.astype(np.float64), offset + np.arange(X.shape[0]))
        if self.standardize:
            (part,), self.mean_, self.std_ = D.standardize(raw, [part])
        net = self._net()
        options = dict(optimizer=self.optimizer, sync=self.sync, lam=self.lam, epochs=self.epochs,
                       batch=self.batch, lr=self.lr, allreduce=self.allreduce, compress=self.compress,
                       seed=self.seed, progress=False, log_every=10 ** 9)
        trainer = Trainer(wrap(raw), net, part, None, is_classifier=self.classify, **options)
        with contextlib.redirect_stdout(io.StringIO()):  # the trainer's table is for the command line
            self.coef_ = trainer.fit()
        self.objective_ = trainer.final[0]
        return self

    def _predict(self, X):
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False, ensure_min_samples=0)
        return self._net().predict(self.coef_, self._scale(X))


class Classifier(_Trained):
    """Softmax (or binary logistic, or MLP) classification trained over MPI ranks."""

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        tags.classifier_tags = ClassifierTags()
        return tags

    def predict(self, X):
        """Predicted labels of ``X``'s rows."""
        codes = self._predict(X)
        return self.classes_[codes]

    def score(self, X, y):
        """Accuracy over every rank's rows; collective."""
        raw = self._mpi()
        with errors_together(raw):
            counts = np.array([(self.predict(X) == np.asarray(y)).sum(), len(y)], np.float64)
        wrap(raw).Allreduce(MPI.IN_PLACE, counts)
        return counts[0] / counts[1]


class Regressor(_Trained):
    """Least-squares linear regression with L2 regularisation, trained over MPI ranks."""

    classify = False

    def __sklearn_tags__(self):
        from sklearn.utils import RegressorTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "regressor"
        tags.regressor_tags = RegressorTags()
        return tags

    def predict(self, X):
        """Fitted values of ``X``'s rows."""
        return self._predict(X)

    def score(self, X, y):
        """Coefficient of determination R^2 over every rank's rows; collective."""
        raw = self._mpi()
        with errors_together(raw):
            y = np.asarray(y, np.float64).ravel()
            r = self.predict(X) - y
            sums = np.array([r @ r, y.sum(), y @ y, len(y)])
        wrap(raw).Allreduce(MPI.IN_PLACE, sums)
        total = sums[2] - sums[1] ** 2 / sums[3]
        return 1 - sums[0] / total
