"""Pipeline and PipelineModel: stages fitted in order over the ranks, then used at test time.

``Pipeline(stages).fit(X, y)`` goes through the stages in order on this rank's rows: a stage
that applies to the labels (``on_labels``, the LabelIndexer) is fitted on ``y`` and replaces
it by its transform; any other stage is fitted on ``(X, y)`` and, unless it is the last,
replaces ``X`` by its transform.  Each stage fitted is a clone, so the Pipeline itself stays
unfitted, as Spark's does; a stage whose ``comm`` is None takes the Pipeline's.  What a
stage computes across ranks is its own business (scalers, IDF, indexer and trainers use
this library's collectives); stages from scikit-learn see this rank's rows alone, so under
mpiexec they fit for stateless steps only.

Every step (a stage's fit and transform, or a PipelineModel call) runs inside
``errors_together``: an error one rank meets is raised on every rank, so none is left
waiting in the next collective.  ``transform``, ``predict``, ``score``, ``save`` and ``load``
are therefore collective too: every rank calls them, with its own rows.
"""
import time

import numpy as np
from sklearn.base import clone, is_classifier

from .. import functional
from ..train.estimator import errors_together, mpi_comm
from . import persist


def _labels_stage(stage):
    return getattr(stage, "on_labels", False)


class Pipeline:
    """Stages (transformers, then usually an estimator) to fit in order over the ranks.

    Parameters
    ----------
    stages : list
        scikit-learn style transformers and estimators; a stage with ``on_labels`` set (the
        LabelIndexer) applies to the labels.
    comm : mpi4py communicator or collectives.Comm, optional
        The ranks that fit together (default COMM_WORLD), given to stages without their own.
    """

    def __init__(self, stages, comm=None):
        self.stages, self.comm = list(stages), comm

    def fit(self, X, y=None):
        """Fit the stages in order on this rank's rows ``X`` and labels ``y``; a PipelineModel.  Collective."""
        raw = mpi_comm(self.comm)
        fitted, seconds = [], []
        for i, template in enumerate(self.stages):
            start = time.perf_counter()
            with errors_together(raw):
                stage = clone(template)
                if "comm" in stage.get_params() and stage.get_params()["comm"] is None:
                    stage.set_params(comm=self.comm)
                if _labels_stage(stage):
                    y = stage.fit(y).transform(y)
                elif i + 1 == len(self.stages):
                    stage.fit(X, y)
                else:
                    X = stage.fit_transform(X, y)
            fitted.append(stage)
            seconds.append(time.perf_counter() - start)
        return PipelineModel(fitted, self.comm, seconds)


class PipelineModel:
    """Fitted stages, applied in order at test time to each rank's own rows.

    ``seconds`` holds, when the model comes from Pipeline.fit, this rank's time in each
    stage's fit (and transform of the training rows).
    """

    def __init__(self, stages, comm=None, seconds=None):
        self.stages, self.comm, self.seconds = list(stages), comm, seconds

    def _features(self, X, stages):
        for stage in stages:
            if not _labels_stage(stage):
                X = stage.transform(X)
        return X

    def _label_stages(self):
        return [stage for stage in self.stages if _labels_stage(stage)]

    def transform(self, X):
        """This rank's rows ``X`` through every feature stage; collective."""
        with errors_together(mpi_comm(self.comm)):
            return self._features(X, self.stages)

    def predict(self, X):
        """Predictions of the last stage for this rank's rows ``X``, as labels of the training
        data (mapped back through the label stages); collective."""
        with errors_together(mpi_comm(self.comm)):
            out = self.stages[-1].predict(self._features(X, self.stages[:-1]))
            for stage in reversed(self._label_stages()):
                out = stage.inverse_transform(out)
            return out

    def score(self, X, y):
        """Accuracy (classifier) or R^2 (regressor) of the last stage over every rank's rows ``X``
        and labels ``y``; collective.  A label the label stages did not see raises ValueError."""
        raw = mpi_comm(self.comm)
        last = self.stages[-1]
        with errors_together(raw):
            for stage in self._label_stages():
                y = stage.transform(y)
            y = np.asarray(y)
            out = last.predict(self._features(X, self.stages[:-1]))
            if is_classifier(last):
                sums = np.array([(out == y).sum(), y.size], np.float64)
            else:
                y = y.astype(np.float64)
                sums = np.array([((out - y) ** 2).sum(), y.sum(), (y * y).sum(), y.size])
        sums = functional.allreduce(raw, sums)
        if is_classifier(last):
            return sums[0] / sums[1]
        return 1 - sums[0] / (sums[2] - sums[1] ** 2 / sums[3])

    def save(self, path):
        """Write the fitted stages to ``path`` (rank 0 writes); collective.  No pickle: see persist."""
        raw = mpi_comm(self.comm)
        with errors_together(raw):
            if raw.Get_rank() == 0:
                persist.write(path, self.stages)

    @classmethod
    def load(cls, path, comm=None):
        """The PipelineModel saved in ``path``, read by every rank of ``comm``; collective."""
        with errors_together(mpi_comm(comm)):
            return cls(persist.read(path, comm), comm)
