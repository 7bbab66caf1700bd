"""StandardScaler and MinMaxScaler fitted over the ranks, each rank on an uneven share of the rows
(one rank on none), against scikit-learn's scalers fitted on all rows in one process."""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import preprocessing

from collectives.ml import MinMaxScaler, StandardScaler
from tests.ml_util import assert_like, same_everywhere, share

ROWS = 41


def data():
    """Every rank's copy of all rows: spread scales, a constant feature, NaNs, and a feature at
    1e9 with unit spread, whose variance a sum of squares less n mean^2 loses to rounding."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(ROWS, 6)) * [1, 10, 1e-3, 0, 5, 1] + [0, -3, 2, 4, 0, 1e9]
    X[rng.random(ROWS) < 0.2, 4] = np.nan
    return X


@pytest.mark.parametrize("with_mean,with_std", [(True, True), (False, True), (True, False), (False, False)])
def test_standard_scaler(mpi_comm, with_mean, with_std):
    X = data()
    mine = share(mpi_comm, ROWS)
    ours = StandardScaler(with_mean=with_mean, with_std=with_std, comm=mpi_comm).fit(X[mine])
    reference = preprocessing.StandardScaler(with_mean=with_mean, with_std=with_std).fit(X)
    assert_like(ours, reference, ["mean_", "var_", "scale_", "n_samples_seen_", "n_features_in_"], rtol=1e-12)
    if X[mine].shape[0]:  # scikit-learn refuses to transform no rows
        # a mean at 1e9 is rounded to 1.2e-7 (one ulp), whichever way it is summed
        np.testing.assert_allclose(ours.transform(X[mine]), reference.transform(X[mine]), rtol=1e-9, atol=1e-6)
    same_everywhere(mpi_comm, ours)


def test_standard_scaler_sparse(mpi_comm):
    X = data()[:, :5]
    X[np.abs(X) < 1] = 0
    X = sp.csr_matrix(X)
    mine = share(mpi_comm, ROWS)
    ours = StandardScaler(with_mean=False, comm=mpi_comm).fit(X[mine])
    reference = preprocessing.StandardScaler(with_mean=False).fit(X)
    assert_like(ours, reference, ["mean_", "var_", "scale_", "n_samples_seen_"], rtol=1e-9)
    out = ours.transform(X[mine])
    assert sp.issparse(out) and out.shape == X[mine].shape
    if out.shape[0]:
        np.testing.assert_allclose(out.toarray(), reference.transform(X[mine]).toarray(), rtol=1e-12)
    same_everywhere(mpi_comm, ours)


@pytest.mark.parametrize("feature_range,clip", [((0, 1), False), ((-1, 2), True)])
def test_min_max_scaler(mpi_comm, feature_range, clip):
    X = data()
    X[:, 2] = np.nan  # a feature with no value at all
    mine = share(mpi_comm, ROWS)
    ours = MinMaxScaler(feature_range=feature_range, clip=clip, comm=mpi_comm).fit(X[mine])
    reference = preprocessing.MinMaxScaler(feature_range=feature_range, clip=clip).fit(X)
    assert_like(ours, reference, ["data_min_", "data_max_", "data_range_", "scale_", "min_", "n_samples_seen_"])
    later = X[mine] * 1.5  # outside the fitted range, where clip matters
    if later.shape[0]:
        np.testing.assert_allclose(ours.transform(later), reference.transform(later), rtol=1e-12, equal_nan=True)
    same_everywhere(mpi_comm, ours)


SCALERS = [StandardScaler, MinMaxScaler]


@pytest.mark.parametrize("scaler", SCALERS)
def test_one_rank_other_width(mpi_comm, scaler):
    if mpi_comm.size == 1:
        pytest.skip("needs two ranks")
    X = data()[share(mpi_comm, ROWS)]
    if mpi_comm.rank == mpi_comm.size - 1:
        X = X[:, :4]
    with pytest.raises(ValueError, match="different widths: rank 0 has 6 features, rank .* has 4"):
        scaler(comm=mpi_comm).fit(X)


@pytest.mark.parametrize("scaler", SCALERS)
def test_no_rows_anywhere(mpi_comm, scaler):
    with pytest.raises(ValueError, match="0 sample"):
        scaler(comm=mpi_comm).fit(np.empty((0, 3)))


@pytest.mark.parametrize("scaler", SCALERS)
def test_bad_value_on_one_rank(mpi_comm, scaler):
    X = data()[share(mpi_comm, ROWS)]
    if mpi_comm.rank == 0:  # the one rank that always holds rows
        X[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        scaler(comm=mpi_comm).fit(X)
