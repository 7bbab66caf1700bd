"""Tokenizer, HashingTF, IDF and LabelIndexer over the ranks, each rank on an uneven share of the
bundled corpus's documents (one rank on none, and the documents in file order, so ranks see
different labels), against scikit-learn's HashingVectorizer, TfidfTransformer and LabelEncoder
fitted on all documents in one process."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import murmurhash3_32

from collectives.ml import IDF, HashingTF, LabelIndexer, Tokenizer
from tests.ml_util import assert_like, corpus, same_everywhere, share

DOCS = 90
FEATURES = 2 ** 10


def counts(texts):
    """scikit-learn's hashed term counts of ``texts``: the reference of Tokenizer + HashingTF."""
    return HashingVectorizer(n_features=FEATURES, alternate_sign=False, norm=None).transform(texts)


@pytest.mark.parametrize("binary,alternate_sign", [(False, False), (True, False), (False, True)])
def test_hashing_tf(mpi_comm, binary, alternate_sign):
    texts, _ = corpus(DOCS)
    mine = share(mpi_comm, DOCS)
    hashing = HashingTF(FEATURES, binary=binary, alternate_sign=alternate_sign)
    ours = hashing.transform(Tokenizer().transform(texts[mine]))
    # scikit-learn refuses no documents: the rows of this rank's from all of them
    reference = HashingVectorizer(n_features=FEATURES, binary=binary, alternate_sign=alternate_sign,
                                  norm=None).transform(texts)[mine]
    assert ours.format == "csr" and ours.shape == reference.shape
    assert (ours != reference).nnz == 0


@pytest.mark.serial
def test_hash_is_murmurhash3():
    tokens = ["pipeline", "déjà", "x1", "ß" * 40]
    X = HashingTF(FEATURES).transform([tokens])
    expected = sorted(abs(murmurhash3_32(t, seed=0)) % FEATURES for t in tokens)
    assert X.indices.tolist() == expected


@pytest.mark.parametrize("smooth_idf,sublinear_tf,norm", [(True, False, "l2"), (False, True, None), (True, True, "l1")])
def test_idf(mpi_comm, smooth_idf, sublinear_tf, norm):
    texts, _ = corpus(DOCS)
    X = counts(texts)
    mine = share(mpi_comm, DOCS)
    ours = IDF(norm=norm, smooth_idf=smooth_idf, sublinear_tf=sublinear_tf, comm=mpi_comm).fit(X[mine])
    reference = TfidfTransformer(norm=norm, smooth_idf=smooth_idf, sublinear_tf=sublinear_tf).fit(X)
    assert_like(ours, reference, ["idf_", "n_features_in_"])
    out = ours.transform(X[mine])
    assert out.format == "csr" and out.shape == X[mine].shape
    if out.shape[0]:
        np.testing.assert_allclose(out.toarray(), reference.transform(X[mine]).toarray(), rtol=1e-12)
    same_everywhere(mpi_comm, ours)


def test_label_indexer(mpi_comm):
    _, labels = corpus()
    mine = labels[share(mpi_comm, len(labels))]
    ours = LabelIndexer(comm=mpi_comm).fit(mine)
    reference = LabelEncoder().fit(labels)
    assert_like(ours, reference, ["classes_"])
    codes = ours.transform(mine)
    np.testing.assert_array_equal(codes, reference.transform(mine))
    np.testing.assert_array_equal(ours.inverse_transform(codes), mine)
    same_everywhere(mpi_comm, ours)


@pytest.mark.serial
def test_unseen_label():
    with pytest.raises(ValueError, match=r"previously unseen labels: \['c'\]"):
        LabelIndexer(comm=MPI.COMM_SELF).fit(["a", "b"]).transform(["a", "c"])


def test_unsortable_labels_on_one_rank(mpi_comm):
    labels = np.array(["a", 1, "b"] if mpi_comm.rank == 0 else ["a", "b"], dtype=object)
    with pytest.raises(TypeError):
        LabelIndexer(comm=mpi_comm).fit(labels)


@pytest.mark.parametrize("stage", [IDF, LabelIndexer])
def test_empty_corpus(mpi_comm, stage):
    empty = sp.csr_matrix((0, FEATURES)) if stage is IDF else []
    with pytest.raises(ValueError, match="0 sample"):
        stage(comm=mpi_comm).fit(empty)


def test_one_rank_other_vocabulary_width(mpi_comm):
    if mpi_comm.size == 1:
        pytest.skip("needs two ranks")
    texts, _ = corpus(DOCS)
    X = counts(texts)[share(mpi_comm, DOCS)]
    if mpi_comm.rank == mpi_comm.size - 1:
        X = X[:, :FEATURES // 2]
    with pytest.raises(ValueError, match=f"rank 0 has {FEATURES} features, rank .* has {FEATURES // 2}"):
        IDF(comm=mpi_comm).fit(X)


@pytest.mark.serial
@pytest.mark.parametrize("stage,bad", [(Tokenizer(), "one string"), (Tokenizer(), [b"bytes"]),
                                       (HashingTF(), ["not", "token", "lists"])])
def test_bad_documents(stage, bad):
    with pytest.raises((ValueError, TypeError)):
        stage.transform(bad)
