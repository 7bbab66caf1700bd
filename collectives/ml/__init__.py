"""Pipelines as the lectures draw them: stages fitted in order, each over every rank's rows.

``Pipeline([Tokenizer(), HashingTF(), IDF(), LabelIndexer(), Classifier(standardize=False)])
.fit(documents, labels)`` runs the stages in order on each rank's partition and returns a
``PipelineModel``, used at test time (``transform``, ``predict``, ``score``) and saved and
loaded without pickle.  A stage whose fit needs global statistics (StandardScaler,
MinMaxScaler, IDF, LabelIndexer, the trainers of collectives.train) gets them through this
library's collectives, so every rank ends with the same fitted state; the fitted state is
scikit-learn's, attribute for attribute.  ``python -m collectives ml`` runs the text example
on the bundled corpus (collectives.ml.corpus).  docs/pipelines.md says what runs on each
rank and what across ranks, and where Spark's stages differ.

This package needs scikit-learn; ``collectives`` and ``collectives.train`` do not import it.
"""
from ..train.estimator import Classifier, Regressor
from .labels import LabelIndexer
from .pipeline import Pipeline, PipelineModel
from .scalers import MinMaxScaler, StandardScaler
from .text import IDF, HashingTF, Tokenizer

__all__ = ["Classifier", "HashingTF", "IDF", "LabelIndexer", "MinMaxScaler", "Pipeline", "PipelineModel",
           "Regressor", "StandardScaler", "Tokenizer"]
