"""Shared by the collectives.ml tests: uneven shares of rows, the bundled corpus, fitted-state checks."""
import functools
import pickle

import numpy as np

from collectives.ml.corpus import CORPUS


def share(comm, n):
    """This rank's slice of ``n`` rows: uneven shares growing with the rank, and with more than
    one rank, the middle rank holds none."""
    p, r = comm.Get_size(), comm.Get_rank()
    weights = np.array([0 if p > 1 and q == p // 2 else q + 1 for q in range(p)], float)
    cuts = np.round(np.concatenate([[0], np.cumsum(weights)]) / weights.sum() * n).astype(int)
    return slice(cuts[r], cuts[r + 1])


@functools.cache
def _documents():
    """(label, text) of every line of the bundled corpus, read once per process."""
    with open(CORPUS, encoding="utf-8") as f:
        return tuple(tuple(line.rstrip("\n").split("\t", 1)) for line in f)


def corpus(n=None, labels=None):
    """(texts, labels) of the bundled corpus's first ``n`` documents with a label in ``labels``
    (default: all), as new object arrays; every rank reads the same."""
    chosen = [(label, text) for label, text in _documents() if labels is None or label in labels][:n]
    return (np.array([text for _, text in chosen], dtype=object),
            np.array([label for label, _ in chosen], dtype=object))


def fitted(stage):
    """The fitted attributes of ``stage`` (public, ending in ``_``), by name."""
    return {k: v for k, v in vars(stage).items() if k.endswith("_") and not k.startswith("_")}


def assert_like(ours, reference, names, rtol=1e-12, atol=0.0):
    """``ours``'s attributes ``names`` equal ``reference``'s: same type and value (arrays: same
    shape and dtype kind, values to ``rtol`` / ``atol``, NaN where it has NaN)."""
    for name in names:
        a, b = getattr(ours, name), getattr(reference, name)
        if b is None or np.isscalar(b):
            assert type(a) is type(b) or (np.isscalar(a) and np.asarray(a).dtype == np.asarray(b).dtype), (name, a, b)
            assert a == b or (a is None and b is None) or np.isclose(a, b, rtol=rtol, atol=atol), (name, a, b)
            continue
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype.kind == b.dtype.kind, (name, a.shape, a.dtype, b.shape, b.dtype)
        if b.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def same_everywhere(comm, stage):
    """Every rank of ``comm`` holds the same fitted state as rank 0, bit for bit."""
    def value(v):
        """``v`` as an array whose bytes are its value (strings rather than object pointers)."""
        v = np.asarray(v)
        return v.astype(str) if v.dtype == object else v

    state = pickle.dumps(sorted((k, value(v).tobytes(), str(value(v).dtype)) for k, v in fitted(stage).items()))
    assert comm.bcast(state) == state
