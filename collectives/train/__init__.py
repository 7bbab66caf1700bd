"""Distributed training over collectives: LIBSVM data, linear models and an MLP, SGD / Adam /
L-BFGS / Newton, and synchronous, bucketed, local, federated, parameter-server and gossip
synchronisation.  ``python -m collectives train --help`` runs it from the command line;
``Classifier`` / ``Regressor`` serve Python programs.
"""
from .data import DIGITS
from .estimator import Classifier, Regressor
from .libsvm import read_libsvm
from .trainer import Trainer

__all__ = ["DIGITS", "Classifier", "Regressor", "Trainer", "read_libsvm"]
