"""The estimators are scikit-learn estimators: check_estimator, and scikit-learn's Pipeline,
cross_val_score and GridSearchCV in one process; fitted over the ranks (uneven shares, one rank
with none) they equal scikit-learn's fitted on all rows."""
import warnings

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler as SkStandardScaler

from collectives.ml import IDF, Classifier, MinMaxScaler, Regressor, StandardScaler
from tests.ml_util import same_everywhere, share

LAM = 1e-3

# Checks that may not run here, and why; every other check must pass.
MAY_SKIP = {
    "check_array_api_input": "runs only with SCIPY_ARRAY_API=1 set before SciPy is imported",
    "check_classifier_data_not_an_array": "needs pandas, which is not a dependency",
    "check_regressor_data_not_an_array": "needs pandas, which is not a dependency",
}
ESTIMATORS = [Classifier, Regressor, StandardScaler, MinMaxScaler, IDF]


@pytest.mark.serial
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_check_estimator(estimator):
    # imported here: the launches that skip serial tests need not load scikit-learn's checks
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator(comm=MPI.COMM_SELF), on_fail=None, on_skip=None)
    missed = {r["check_name"]: f"{r['status']}: {r['exception']!r}" for r in results if r["status"] != "passed"}
    assert len(results) > 40 and all(name in MAY_SKIP and why.startswith("skipped") for name, why in missed.items()), \
        missed


@pytest.mark.serial
def test_scikit_learn_tools():
    X, y = load_iris(return_X_y=True)
    ours = make_pipeline(StandardScaler(comm=MPI.COMM_SELF), Classifier(standardize=False, lam=LAM, comm=MPI.COMM_SELF))
    # 5 folds of 150 rows train on 120: Classifier's lam is LogisticRegression's 1 / (C n)
    theirs = make_pipeline(SkStandardScaler(), LogisticRegression(C=1 / (LAM * 120), tol=1e-10, max_iter=10000))
    np.testing.assert_array_equal(cross_val_score(ours, X, y), cross_val_score(theirs, X, y))
    search = GridSearchCV(ours, {"classifier__lam": [1.0, LAM]}, cv=3).fit(X, y)
    assert search.best_params_ == {"classifier__lam": LAM}
    assert search.best_estimator_.score(X, y) == pytest.approx(
        theirs.set_params(logisticregression__C=1 / (LAM * 150)).fit(X, y).score(X, y))


def test_classifier_over_ranks(mpi_comm):
    X, y = load_iris(return_X_y=True)
    mine = share(mpi_comm, len(y))
    ours = Classifier(lam=LAM, comm=mpi_comm).fit(X[mine], y[mine])
    scaled = SkStandardScaler().fit_transform(X)
    reference = LogisticRegression(C=1 / (LAM * len(y)), tol=1e-10, max_iter=10000).fit(scaled, y)
    W = ours.coef_.reshape(-1, 3)
    np.testing.assert_allclose(W[:-1].T, reference.coef_, atol=2e-5)
    np.testing.assert_array_equal(ours.classes_, reference.classes_)
    assert ours.score(X[mine], y[mine]) == pytest.approx(reference.score(scaled, y))
    same_everywhere(mpi_comm, ours)


def test_regressor_over_ranks(mpi_comm):
    X, y = load_diabetes(return_X_y=True)
    mine = share(mpi_comm, len(y))
    ours = Regressor(lam=LAM, comm=mpi_comm).fit(X[mine], y[mine])
    scaled = SkStandardScaler().fit_transform(X)
    # mean (1/2) r^2 + lam/2 |w|^2 is Ridge's |r|^2 + alpha |w|^2 over 2n with alpha = lam n
    reference = Ridge(alpha=LAM * len(y)).fit(scaled, y)
    np.testing.assert_allclose(ours.coef_[:-1], reference.coef_, rtol=1e-6)
    assert ours.coef_[-1] == pytest.approx(reference.intercept_, rel=1e-9)
    assert ours.score(X[mine], y[mine]) == pytest.approx(reference.score(scaled, y), rel=1e-9)
    same_everywhere(mpi_comm, ours)


def test_classifier_one_class_over_ranks(mpi_comm):
    X, y = load_iris(return_X_y=True)
    mine = share(mpi_comm, 50)  # the first 50 rows: one class
    with pytest.raises(ValueError, match="two classes or more, got one class"):
        Classifier(comm=mpi_comm).fit(X[mine], y[mine])
