"""LabelIndexer: labels as indices 0 .. k-1 into the sorted labels of every rank.

Each rank finds its distinct labels; they travel pickled in one all-gather of bytes
(Allgatherv over collectives.Comm), and every rank takes the sorted union, so every rank
holds the same ``classes_``, as scikit-learn's LabelEncoder fitted on all labels.  Spark's
StringIndexer orders labels by frequency instead (most frequent first).
"""
import pickle

import numpy as np
from sklearn.utils import InputTags
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .. import functional
from ..comm import wrap
from ..train.estimator import errors_together, rows_together
from .stage import Stage


def allgather_objects(comm, obj):
    """Every rank's picklable ``obj`` in rank order, over mpi4py ``comm`` by this library's Allgatherv."""
    mine = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = functional.allgather(comm, np.array(mine.size, np.int64))
    out = np.empty(int(sizes.sum()), np.uint8)
    wrap(comm).Allgatherv(mine, [out, sizes])
    ends = np.cumsum(sizes)
    return [pickle.loads(out[end - size:end].tobytes()) for size, end in zip(sizes, ends)]


class LabelIndexer(Stage):
    """Labels as their index in the sorted labels of every rank's rows.

    A pipeline applies it to the labels, not the features, and maps predictions back through
    ``inverse_transform``.

    Parameters
    ----------
    comm : mpi4py communicator or collectives.Comm, optional
        The ranks that fit together (default COMM_WORLD).
    """

    on_labels = True

    def __init__(self, comm=None):
        self.comm = comm

    def fit(self, y, _=None):
        """The sorted distinct labels of every rank's ``y``; collective."""
        raw = self._mpi()
        with errors_together(raw):
            y = column_or_1d(y, warn=True)
            mine = np.unique(y)  # TypeError for labels that do not sort together
        rows_together(raw, y.shape[0], 1)
        found = allgather_objects(raw, mine) if raw.Get_size() > 1 else [mine]
        # a rank without labels has an empty float array, which would not join strings
        self.classes_ = np.unique(np.concatenate([labels for labels in found if labels.size]))
        return self

    def transform(self, y):
        """Indices of this rank's labels ``y``; ValueError for a label not seen in fit."""
        check_is_fitted(self)
        y = column_or_1d(y, warn=True)
        unseen = np.setdiff1d(y, self.classes_)
        if unseen.size:
            raise ValueError(f"y contains previously unseen labels: {unseen.tolist()}")
        return np.searchsorted(self.classes_, y)

    def inverse_transform(self, codes):
        """The labels of indices ``codes``."""
        check_is_fitted(self)
        codes = column_or_1d(codes, warn=True)
        if codes.size and (codes.min() < 0 or codes.max() >= len(self.classes_)):
            raise ValueError(f"indices must lie in 0 .. {len(self.classes_) - 1}")
        return self.classes_[codes]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags = InputTags(two_d_array=False, one_d_array=True)
        return tags
