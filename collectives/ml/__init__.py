"""Pipelines as the lectures draw them: stages fitted in order, each over every rank's rows.

A stage whose fit needs global statistics (StandardScaler, MinMaxScaler, IDF, LabelIndexer)
gets them through this library's collectives, so every rank ends with the same fitted
state; the fitted state is scikit-learn's, attribute for attribute.  ``python -m
collectives ml`` runs the text example on the bundled corpus (collectives.ml.corpus).

This package needs scikit-learn; ``collectives`` and ``collectives.train`` do not import it.
"""
from ..train.estimator import Classifier, Regressor
from .labels import LabelIndexer
from .scalers import MinMaxScaler, StandardScaler
from .text import IDF, HashingTF, Tokenizer

__all__ = ["Classifier", "HashingTF", "IDF", "LabelIndexer", "MinMaxScaler", "Regressor", "StandardScaler",
           "Tokenizer"]
