"""PipelineModel.save / load: every stage's parameters and fitted attributes come back with the same
types and bits, from a file read without pickle; files that are not a saved model are refused."""
import json
import zipfile

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler as SkStandardScaler

from collectives.ml import (IDF, Classifier, HashingTF, LabelIndexer, MinMaxScaler, Pipeline, PipelineModel,
                            Regressor, StandardScaler, Tokenizer)
from tests.ml_util import corpus, fitted

pytestmark = pytest.mark.serial
SELF = MPI.COMM_SELF


def assert_identical(a, b):
    """Stages ``a`` and ``b`` have equal parameters (but the communicator) and identical fitted attributes."""
    assert type(a) is type(b)
    assert {k: v for k, v in a.get_params().items() if k != "comm"} == \
           {k: v for k, v in b.get_params().items() if k != "comm"}
    assert fitted(a).keys() == fitted(b).keys()
    for name, value in fitted(a).items():
        other = fitted(b)[name]
        assert type(other) is type(value), (name, type(value), type(other))
        if isinstance(value, np.ndarray):
            assert (other.dtype, other.shape) == (value.dtype, value.shape), name
            if value.dtype == object:
                assert list(other) == list(value), name
            else:
                assert other.tobytes() == value.tobytes(), name
        else:
            assert other == value or (value != value and other != other), name


def round_trip(model, tmp_path):
    path = str(tmp_path / "model.npz")
    model.save(path)
    loaded = PipelineModel.load(path, comm=SELF)
    for a, b in zip(model.stages, loaded.stages, strict=True):
        assert_identical(a, b)
    return loaded


def test_numeric_stages(tmp_path):
    X, y = load_iris(return_X_y=True)
    model = Pipeline([StandardScaler(), MinMaxScaler(feature_range=(-2, 3), clip=True), Classifier(lam=0.01)],
                     comm=SELF).fit(X, y)
    loaded = round_trip(model, tmp_path)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    X[::7, 1] = np.nan  # per-feature counts: n_samples_seen_ an array
    scalers = [StandardScaler(), StandardScaler(with_std=False), StandardScaler(with_mean=False, with_std=False),
               MinMaxScaler()]
    round_trip(PipelineModel([scaler.set_params(comm=SELF).fit(X) for scaler in scalers], SELF), tmp_path)


def test_text_stages(tmp_path):
    texts, labels = corpus(60)
    model = Pipeline([LabelIndexer(), Tokenizer(pattern=r"\w+", lowercase=False), HashingTF(256, binary=True),
                      IDF(norm=None, sublinear_tf=True), Classifier(standardize=False, epochs=20)],
                     comm=SELF).fit(texts, labels)
    assert model.stages[0].classes_.dtype == object
    loaded = round_trip(model, tmp_path)
    np.testing.assert_array_equal(loaded.predict(texts), model.predict(texts))


def test_regressor(tmp_path):
    X, y = load_iris(return_X_y=True)
    model = Pipeline([Regressor(lam=np.float64(0.5))], comm=SELF).fit(X, X[:, 0] + y)
    loaded = round_trip(model, tmp_path)
    assert type(loaded.stages[0].lam) is np.float64


def test_refuses(tmp_path):
    X, _ = load_iris(return_X_y=True)
    with pytest.raises(TypeError, match="cannot save stage 0, a StandardScaler"):
        PipelineModel([SkStandardScaler().fit(X)], SELF).save(str(tmp_path / "sk.npz"))
    not_zip = tmp_path / "text.npz"
    not_zip.write_text("hello")
    with pytest.raises(ValueError, match="not a saved PipelineModel"):
        PipelineModel.load(str(not_zip), comm=SELF)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{"pipeline.json": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="not a saved PipelineModel"):
        PipelineModel.load(str(pickled), comm=SELF)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, **{"pipeline.json": np.array(json.dumps(
        {"format": "collectives.ml.PipelineModel 1", "stages": [{"class": "os.system", "params": {}, "fitted": {}}]}))})
    with pytest.raises(ValueError, match="'os.system', which does not load"):
        PipelineModel.load(str(foreign), comm=SELF)
    with pytest.raises(FileNotFoundError):
        PipelineModel.load(str(tmp_path / "missing.npz"), comm=SELF)
    assert zipfile.is_zipfile(pickled)
