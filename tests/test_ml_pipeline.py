"""Pipeline and PipelineModel over the ranks, each rank on an uneven share of the rows (one rank on
none): fitted stages against scikit-learn's fitted on all rows in one process, save and load,
and bad input raising the same error on every rank instead of leaving ranks waiting."""
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import LabelEncoder, StandardScaler as SkStandardScaler

from collectives.ml import (IDF, Classifier, HashingTF, LabelIndexer, Pipeline, PipelineModel, StandardScaler,
                            Tokenizer)
from tests.ml_util import assert_like, corpus, fitted, share

LABELS = {"numpy.linalg", "numpy.random", "scipy.fft", "sklearn.datasets"}
FEATURES = 2 ** 10
LAM = 1e-3


def text_stages():
    """The lectures' text pipeline, small."""
    return [LabelIndexer(), Tokenizer(), HashingTF(FEATURES), IDF(), Classifier(standardize=False, lam=LAM)]


def logistic(n):
    """scikit-learn's logistic regression with the same objective as Classifier(lam=LAM) on ``n`` rows:
    mean loss + lam/2 |W|^2 is C sum loss + 1/2 |W|^2 over n lam C."""
    return LogisticRegression(C=1 / (LAM * n), tol=1e-10, max_iter=10000)


def assert_same_model(ours, reference):
    """Classifier ``ours`` has scikit-learn LogisticRegression ``reference``'s weights; intercepts
    up to a common shift, which softmax does not see and the penalty leaves free."""
    W = ours.coef_.reshape(-1, len(ours.classes_))
    np.testing.assert_allclose(W[:-1].T, reference.coef_, atol=2e-5)
    b = W[-1] - W[-1].mean()
    np.testing.assert_allclose(b, reference.intercept_ - reference.intercept_.mean(), atol=2e-5)


@pytest.fixture(scope="module")
def text(mpi_comm):
    """(texts, labels, this rank's share, the text pipeline fitted over mpi_comm)."""
    texts, labels = corpus(labels=LABELS)
    mine = share(mpi_comm, len(labels))
    return texts, labels, mine, Pipeline(text_stages(), comm=mpi_comm).fit(texts[mine], labels[mine])


def test_text_pipeline(text):
    texts, labels, mine, model = text
    indexer, _, _, idf, classifier = model.stages
    encoder = LabelEncoder().fit(labels)
    counts = HashingVectorizer(n_features=FEATURES, alternate_sign=False, norm=None).transform(texts)
    tfidf = TfidfTransformer().fit(counts)
    assert_like(indexer, encoder, ["classes_"])
    assert_like(idf, tfidf, ["idf_"])
    reference = logistic(len(labels)).fit(tfidf.transform(counts), encoder.transform(labels))
    assert_same_model(classifier, reference)
    if texts[mine].size:
        np.testing.assert_array_equal(model.predict(texts[mine]),
                                      encoder.inverse_transform(reference.predict(tfidf.transform(counts[mine]))))
    else:
        assert model.predict(texts[mine]).size == 0
    assert model.score(texts, labels) > 0.95 and model.score(texts[mine], labels[mine]) > 0.95


def test_numeric_pipeline(mpi_comm):
    X, y = load_iris(return_X_y=True)
    mine = share(mpi_comm, len(y))
    model = Pipeline([StandardScaler(), Classifier(standardize=False, lam=LAM)], comm=mpi_comm).fit(X[mine], y[mine])
    scaler = SkStandardScaler().fit(X)
    assert_like(model.stages[0], scaler, ["mean_", "var_", "scale_"])
    assert_same_model(model.stages[1], logistic(len(y)).fit(scaler.transform(X), y))
    assert model.score(X, y) > 0.9


def test_save_load(text, mpi_comm, tmp_path):
    texts, labels, mine, model = text
    path = mpi_comm.bcast(str(tmp_path / "model.npz"))  # rank 0 writes; every rank reads its file
    model.save(path)
    loaded = PipelineModel.load(path, comm=mpi_comm)
    assert [type(s) for s in loaded.stages] == [type(s) for s in model.stages]
    for saved, back in zip(model.stages, loaded.stages):
        assert {k: v for k, v in saved.get_params().items() if k != "comm"} == \
               {k: v for k, v in back.get_params().items() if k != "comm"}
        assert fitted(saved).keys() == fitted(back).keys()
        for name, value in fitted(saved).items():
            other = fitted(back)[name]
            assert type(other) is type(value), name
            if isinstance(value, np.ndarray):
                assert other.dtype == value.dtype and other.shape == value.shape, name
                assert other.tobytes() == value.tobytes() if value.dtype != object else list(other) == list(value)
            else:
                assert other == value, name
    np.testing.assert_array_equal(loaded.predict(texts[mine]), model.predict(texts[mine]))


def test_label_seen_only_at_test_time(text, mpi_comm):
    texts, labels, mine, model = text
    test_labels = labels[mine].copy()
    if mpi_comm.rank == 0:  # the one rank that always holds rows
        test_labels[0] = "scipy.nope"
    with pytest.raises(ValueError, match=r"unseen labels: \['scipy.nope'\]"):
        model.score(texts[mine], test_labels)


def test_bad_document_on_one_rank(mpi_comm):
    texts, labels = corpus(40, labels=LABELS)
    mine = share(mpi_comm, len(labels))
    texts = list(texts[mine])
    if mpi_comm.rank == 0:
        texts[0] = 42
    with pytest.raises(TypeError, match="Tokenizer: document 0 is a int, not a string"):
        Pipeline(text_stages(), comm=mpi_comm).fit(texts, labels[mine])


def test_empty_corpus(mpi_comm):
    with pytest.raises(ValueError, match="0 sample"):
        Pipeline(text_stages(), comm=mpi_comm).fit([], [])


def test_one_rank_other_width(mpi_comm):
    if mpi_comm.size == 1:
        pytest.skip("needs two ranks")
    X, y = load_iris(return_X_y=True)
    mine = share(mpi_comm, len(y))
    X = X[mine][:, :3] if mpi_comm.rank == mpi_comm.size - 1 else X[mine]
    with pytest.raises(ValueError, match="different widths: rank 0 has 4 features"):
        Pipeline([StandardScaler(), Classifier(standardize=False)], comm=mpi_comm).fit(X, y[mine])
