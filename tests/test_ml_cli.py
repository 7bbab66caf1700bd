"""``python -m collectives ml`` as a user runs it: the lectures' text pipeline on the bundled corpus
under ``mpiexec -n 4`` agrees with scikit-learn's pipeline of the same stages fitted in one process,
and bad input is one error line with status 1 (2 for a bad option), every rank ending.

Each test launches its own job, so the file runs in the suite's 1-rank launch only.
"""
import json

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import LabelEncoder

from collectives.ml import PipelineModel
from collectives.ml.corpus import CORPUS, read_documents
from collectives.train import data as D
from tests.launch import mpiexec, own_jobs

pytestmark = own_jobs
PREFIX = "collectives ml: error: "
STAGES = ["LabelIndexer", "Tokenizer", "HashingTF", "IDF", "Classifier", "score (test)"]


def test_text_example_matches_scikit_learn(tmp_path):
    metrics, saved = tmp_path / "metrics.json", tmp_path / "model.npz"
    done = mpiexec(4, ["-m", "collectives", "ml", "--metrics", str(metrics), "--save", str(saved)], timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("docstrings.tsv: 1837 documents, 17 labels; ") and lines[0].endswith("; 4 ranks")
    for stage in STAGES:
        assert any(line.startswith(stage) and float(line.split()[-1]) >= 0 for line in lines), (stage, lines)
    ours = json.loads(metrics.read_text())
    assert lines[-1] == f"test accuracy: {ours['accuracy']:.4f}"

    # scikit-learn's stages on the same split, in one process
    train, test = D.split(MPI.COMM_SELF, read_documents(CORPUS, MPI.COMM_SELF), 0.2, 0)
    assert (ours["train"], ours["test"]) == (len(train), len(test))
    hashing = HashingVectorizer(n_features=ours["options"]["features"], alternate_sign=False, norm=None)
    counts = hashing.transform(train.X)
    tfidf = TfidfTransformer().fit(counts)
    labels = LabelEncoder().fit(train.y)
    # mean loss + lam/2 |W|^2 is C sum loss + 1/2 |W|^2 over n lam C
    logistic = LogisticRegression(C=1 / (ours["options"]["lam"] * len(train)), tol=1e-8, max_iter=1000)
    logistic.fit(tfidf.transform(counts), labels.transform(train.y))
    test_features = tfidf.transform(hashing.transform(test.X))
    theirs = np.mean(labels.inverse_transform(logistic.predict(test_features)) == test.y)
    assert abs(ours["accuracy"] - theirs) <= 0.005, (ours["accuracy"], theirs)

    model = PipelineModel.load(str(saved), comm=MPI.COMM_SELF)
    indexer, _, _, idf, classifier = model.stages
    np.testing.assert_array_equal(indexer.classes_, labels.classes_)
    np.testing.assert_allclose(idf.idf_, tfidf.idf_, rtol=1e-13)
    predicted = model.predict(test.X)
    assert np.mean(predicted == test.y) == pytest.approx(ours["accuracy"], abs=1e-12)
    assert np.mean(predicted == labels.inverse_transform(logistic.predict(test_features))) >= 0.99


def one_error(done, status, what):
    """The job failed with ``status`` and stderr is exactly one error line containing ``what``."""
    assert done.returncode == status, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX) and what in lines[0], done.stderr


def lonely_label_file(tmp_path):
    """A corpus whose label 'lonely' falls in the test split (--test-fraction 0.2, seed 0) alone."""
    n = 30
    test_rows = np.random.default_rng(0).permutation(n)[:round(0.2 * n)]  # as collectives.train.data.split
    labels = ["even" if i % 2 else "odd" for i in range(n)]
    labels[test_rows[0]] = "lonely"
    path = tmp_path / "lonely.tsv"
    path.write_text("".join(f"{label}\tdocument number {i} is {label}\n" for i, label in enumerate(labels)))
    return path


@pytest.mark.parametrize("text,what", [
    ("", "no documents"),
    ("numpy\tfine\nno tab on this line\n", "line 2: expected a label, a tab, then the text"),
    (None, "unseen labels: ['lonely']"),
], ids=["empty", "malformed", "label-only-in-test"])
def test_bad_corpus(tmp_path, text, what):
    if text is None:
        path = lonely_label_file(tmp_path)
    else:
        path = tmp_path / "corpus.tsv"
        path.write_text(text)
    one_error(mpiexec(2, ["-m", "collectives", "ml", "--data", str(path), "--epochs", "5"]), 1, what)


def test_bad_option():
    one_error(mpiexec(2, ["-m", "collectives", "ml", "--features", "0"]), 2, "--features: must be at least 1")
