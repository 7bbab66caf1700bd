"""Text stages: Tokenizer and HashingTF (each document on its own, no communication), and IDF,
whose document frequencies are all-reduced over the ranks.

They follow scikit-learn's text conventions, so that ``HashingVectorizer(alternate_sign=False,
norm=None)`` followed by ``TfidfTransformer()`` is their exact reference:

* Tokenizer: lower case, then the tokens of two or more word characters, ``(?u)\\b\\w\\w+\\b``;
* HashingTF: MurmurHash3 (x86, 32 bits, seed 0) of each token's UTF-8 bytes, index
  ``|h| mod n_features`` (scikit-learn's FeatureHasher), counts summed, in scipy.sparse CSR;
  the same on every rank and in every run, unlike Python's salted ``hash``;
* IDF: ``idf = ln((1 + n) / (1 + df)) + 1`` with smoothing (``ln(n / df) + 1`` without),
  then each row scaled to unit L2 norm.

docs/pipelines.md lists where Spark's Tokenizer, HashingTF and IDF differ.
"""
import re

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction import FeatureHasher
from sklearn.preprocessing import normalize
from sklearn.utils import InputTags
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import functional
from ..train.estimator import errors_together, rows_together
from .stage import Stage

TOKEN = r"(?u)\b\w\w+\b"


def _documents(docs, what):
    """``docs`` as a list, or ValueError when it is one string instead of many."""
    if isinstance(docs, (str, bytes)):
        raise ValueError(f"{what}: expected an iterable of documents, got a single {type(docs).__name__}")
    return list(docs)


class _StatelessText(Stage):
    """A stage with nothing to fit whose input is documents or token lists, not a 2-D array."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags = InputTags(two_d_array=False, string=True)
        return tags


class Tokenizer(_StatelessText):
    """Each document (a string) as its list of tokens; stateless.

    Parameters
    ----------
    pattern : str
        Regular expression of a token (default: two or more word characters, as scikit-learn).
    lowercase : bool
        Lower-case each document first.
    """

    def __init__(self, pattern=TOKEN, lowercase=True):
        self.pattern, self.lowercase = pattern, lowercase

    def fit(self, X, y=None):
        """Nothing to learn; returns self."""
        return self

    def transform(self, X):
        """The token lists of this rank's documents ``X``."""
        docs = _documents(X, "Tokenizer")
        find = re.compile(self.pattern).findall
        out = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, str):
                raise TypeError(f"Tokenizer: document {i} is a {type(doc).__name__}, not a string")
            out.append(find(doc.lower() if self.lowercase else doc))
        return out


class HashingTF(_StatelessText):
    """Term frequencies of token lists in ``n_features`` hashed columns (CSR); stateless.

    Parameters
    ----------
    n_features : int
        Number of columns; different tokens may share one.
    binary : bool
        1 for a token present instead of its count.
    alternate_sign : bool
        Give a token's count the sign of its hash, so collisions cancel on average
        (scikit-learn's default for HashingVectorizer; Spark has no such option).
    """

    def __init__(self, n_features=2 ** 18, binary=False, alternate_sign=False):
        self.n_features, self.binary, self.alternate_sign = n_features, binary, alternate_sign

    def fit(self, X, y=None):
        """Nothing to learn; returns self."""
        return self

    def transform(self, X):
        """This rank's token lists ``X`` as a CSR matrix of hashed counts."""
        docs = _documents(X, "HashingTF")
        for i, doc in enumerate(docs):
            if isinstance(doc, (str, bytes)):
                raise ValueError(f"HashingTF: document {i} is a string; it takes token lists (a Tokenizer's output)")
        hasher = FeatureHasher(n_features=self.n_features, input_type="string", dtype=np.float64,
                               alternate_sign=self.alternate_sign)
        if not docs:  # FeatureHasher refuses an empty list, and a rank may hold no documents
            return sp.csr_matrix((0, self.n_features))
        counts = sp.csr_matrix(hasher.transform(docs))
        if self.binary:
            counts.data.fill(1)
        return counts


class IDF(Stage):
    """Term frequencies weighted by inverse document frequency over every rank's documents.

    Parameters
    ----------
    norm : {"l2", "l1", None}
        Scale each weighted row to unit norm (scikit-learn's TfidfTransformer; Spark's IDF
        does not).
    smooth_idf : bool
        Count one more document that holds every term, so no term has df = 0.
    sublinear_tf : bool
        Use 1 + ln(tf) for tf.
    comm : mpi4py communicator or collectives.Comm, optional
        The ranks that fit together (default COMM_WORLD).
    """

    def __init__(self, norm="l2", smooth_idf=True, sublinear_tf=False, comm=None):
        self.norm, self.smooth_idf, self.sublinear_tf, self.comm = norm, smooth_idf, sublinear_tf, comm

    def fit(self, X, y=None):
        """Document frequencies over every rank's rows ``X`` (term counts); collective."""
        raw = self._mpi()
        with errors_together(raw):
            X = validate_data(self, X, accept_sparse=("csr", "csc"), ensure_min_samples=0)
            if self.norm not in ("l2", "l1", None):
                raise ValueError(f"IDF: norm must be 'l2', 'l1' or None, got {self.norm!r}")
        n = rows_together(raw, *X.shape)
        X = X if sp.issparse(X) else sp.csr_matrix(X)
        dtype = X.dtype if X.dtype in (np.float64, np.float32) else np.float64
        # a stored entry counts, as in scikit-learn (which never stores zeros it makes itself)
        local = np.bincount(X.indices, minlength=X.shape[1]) if X.format == "csr" else np.diff(X.indptr)
        df = functional.allreduce(raw, local.astype(np.int64)).astype(dtype)
        df += float(self.smooth_idf)
        idf = np.full_like(df, n + int(self.smooth_idf), dtype=dtype)
        idf /= df
        np.log(idf, out=idf)
        idf += 1.0
        self.idf_ = idf
        return self

    def transform(self, X):
        """This rank's term counts ``X`` weighted by ``idf_`` (CSR), rows normalised by ``norm``."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], copy=True, reset=False,
                          ensure_min_samples=0)
        X = sp.csr_matrix(X, dtype=X.dtype)
        if self.sublinear_tf:
            np.log(X.data, X.data)
            X.data += 1.0
        X.data *= self.idf_[X.indices]
        # normalize refuses no rows, which a rank may hold
        return X if self.norm is None or not X.shape[0] else normalize(X, norm=self.norm, copy=False)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
