"""A fitted pipeline's stages in one .npz file, read back with ``allow_pickle=False``.

The file holds ``pipeline.json``, and an array per fitted NumPy value.  For each stage the
JSON gives its class name, its constructor parameters (but the communicator) and its fitted
attributes, which are its public attributes ending in ``_`` (scikit-learn's mark of fitted
state): None, Python numbers and strings are in the JSON (a float as its shortest repr, which
reads back to the same bits), NumPy arrays and scalars are arrays of the file (an array of
strings with dtype object is stored as Unicode and comes back as object).  So a loaded stage
has the same attributes, of the same types and values, as the saved one.

Only the classes of STAGES load: the file names a class, never code to run.
"""
import json
import zipfile

import numpy as np

from ..train.checkpoint import write_file
from ..train.estimator import Classifier, Regressor
from .labels import LabelIndexer
from .scalers import MinMaxScaler, StandardScaler
from .text import IDF, HashingTF, Tokenizer

FORMAT = "collectives.ml.PipelineModel 1"
STAGES = {cls.__name__: cls for cls in (StandardScaler, MinMaxScaler, Tokenizer, HashingTF, IDF, LabelIndexer,
                                        Classifier, Regressor)}


def _encode_param(value, where):
    """``value`` of a constructor parameter as JSON."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":  # before float: np.float64 is a float
        return {"dtype": value.dtype.str, "value": value.item()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        items = [_encode_param(v, where) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    raise TypeError(f"cannot save {where}: a {type(value).__name__}")


def _decode_param(value):
    if isinstance(value, list):
        return [_decode_param(v) for v in value]
    if isinstance(value, dict):
        if "tuple" in value:
            return tuple(_decode_param(v) for v in value["tuple"])
        return np.dtype(value["dtype"]).type(value["value"])
    return value


def _fitted(stage):
    """The fitted attributes of ``stage``, by name."""
    return {k: v for k, v in vars(stage).items() if k.endswith("_") and not k.startswith("_")}


def write(path, stages):
    """Write ``stages`` (fitted) to ``path`` as it is named (replacing it whole, or DataError)."""
    arrays, described = {}, []
    for i, stage in enumerate(stages):
        name = type(stage).__name__
        if STAGES.get(name) is not type(stage):
            raise TypeError(f"cannot save stage {i}, a {name}: one of {', '.join(STAGES)} can be saved")
        params = {k: _encode_param(v, f"{name}.{k}") for k, v in stage.get_params().items() if k != "comm"}
        fitted = {}
        for attr, value in _fitted(stage).items():
            key = f"s{i}.{attr}"
            if isinstance(value, np.generic):  # before float: np.float64 is a float
                arrays[key], fitted[attr] = np.asarray(value), {"kind": "scalar"}
            elif value is None or isinstance(value, (bool, int, float, str)):
                fitted[attr] = {"kind": "json", "value": value}
            elif isinstance(value, np.ndarray) and value.dtype != object:
                arrays[key], fitted[attr] = value, {"kind": "array"}
            elif isinstance(value, np.ndarray) and all(isinstance(v, str) for v in value.flat):
                arrays[key], fitted[attr] = value.astype(str), {"kind": "array", "object": True}
            else:
                raise TypeError(f"cannot save {name}.{attr}: a {type(value).__name__}")
        described.append({"class": name, "params": params, "fitted": fitted})
    structure = json.dumps({"format": FORMAT, "stages": described})
    write_file(path, lambda f: np.savez(f, **arrays, **{"pipeline.json": np.array(structure)}))


def read(path, comm=None):
    """The stages saved in ``path``; those with a communicator get ``comm``."""
    try:
        with np.load(path, allow_pickle=False) as z:
            structure = json.loads(str(z["pipeline.json"]))
            if structure.get("format") != FORMAT:
                raise ValueError(f"format {structure.get('format')!r}, not {FORMAT!r}")
            stages = [_stage(i, s, z) for i, s in enumerate(structure["stages"])]
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a saved PipelineModel ({exc})") from exc
    for stage in stages:
        if "comm" in stage.get_params():
            stage.set_params(comm=comm)
    return stages


def _stage(i, described, z):
    """Stage ``i`` rebuilt from its ``described`` entry and the arrays of the open file ``z``."""
    cls = STAGES.get(described["class"])
    if cls is None:
        raise ValueError(f"stage {i} is a {described['class']!r}, which does not load")
    stage = cls(**{k: _decode_param(v) for k, v in described["params"].items()})
    for attr, how in described["fitted"].items():
        if how["kind"] == "json":
            value = how["value"]
        else:
            value = z[f"s{i}.{attr}"]
            value = value[()] if how["kind"] == "scalar" else value.astype(object) if how.get("object") else value
        setattr(stage, attr, value)
    return stage
