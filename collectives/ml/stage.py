"""What the stages of this package share: scikit-learn's transformer protocol over ranks."""
from sklearn.utils import TransformerTags

from ..train.estimator import ParallelEstimator


class Stage(ParallelEstimator):
    """A transformer whose ``fit`` is collective over its ``comm`` (when it has one) and whose
    ``transform`` works on this rank's rows alone."""

    def fit_transform(self, X, y=None):
        """``fit`` on this rank's rows, then their ``transform``."""
        return self.fit(X, y).transform(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags = TransformerTags()
        return tags
