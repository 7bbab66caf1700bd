"""Make the bundled corpus, collectives/data/docstrings.tsv, from the installed NumPy, SciPy and
scikit-learn: ``python -m collectives.ml.make_corpus [OUT]``.

A document is the docstring of a public function, class or ufunc of one of MODULES, labelled
by that module: real prose with real labels, BSD-3-licensed, and on every machine that has
this package's requirements, so nothing is downloaded.  The text stops before the docstring's
Examples section (whose import lines would name the label), runs on one line, and is cut to
MAX_CHARS at a word boundary; docstrings shorter than MIN_CHARS, an object listed by two
modules and a text seen before are left out.  Modules come in MODULES' order and names in
sorted order within a module, so a byte range of the file holds a few labels only.

The three projects' licences, which cover their docstrings, go to docstrings.LICENSE beside
it.  The file in the repository was made with numpy 2.4.6, scipy 1.17.1 and scikit-learn
1.9.1 (requirements.txt); other versions give other documents.
"""
import importlib
import importlib.metadata
import inspect
import os
import re
import sys
import warnings

import numpy as np

from .corpus import CORPUS

MODULES = ("numpy.linalg", "numpy.random", "numpy.ma", "numpy.char", "numpy",
           "scipy.stats", "scipy.signal", "scipy.sparse", "scipy.optimize", "scipy.special", "scipy.interpolate",
           "scipy.linalg", "scipy.ndimage", "scipy.fft",
           "sklearn.linear_model", "sklearn.metrics", "sklearn.datasets")
MAX_CHARS = 1000
MIN_CHARS = 200
# (distribution, licence file in its metadata)
LICENCES = (("numpy", "licenses/LICENSE.txt"), ("scipy", "LICENSE.txt"), ("scikit-learn", "licenses/COPYING"))
_EXAMPLES = re.compile(r"\n\s*Examples\s*\n\s*-{3,}")


def _public(module):
    """(name, object) of ``module``'s public functions, classes and ufuncs, by name."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in sorted(names):
        try:
            obj = getattr(module, name, None)
        except ImportError:  # scikit-learn's experimental names raise until enabled
            continue
        if inspect.isclass(obj) or inspect.isroutine(obj) or isinstance(obj, np.ufunc):
            yield name, obj


def _text(obj):
    """The docstring of ``obj`` before its Examples section, on one line and cut to MAX_CHARS."""
    doc = obj.__doc__ if isinstance(obj, np.ufunc) else inspect.getdoc(obj)
    text = " ".join(_EXAMPLES.split(doc or "")[0].split())
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rsplit(" ", 1)[0]
    return text


def documents():
    """(label, text) of every document, in file order."""
    seen, texts = set(), set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated names warn when looked up
        for label in MODULES:
            for _, obj in _public(importlib.import_module(label)):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                text = _text(obj)
                if len(text) >= MIN_CHARS and text not in texts:
                    texts.add(text)
                    yield label, text


def licences():
    """The licence texts of the projects whose docstrings the corpus holds."""
    parts = []
    for dist, name in LICENCES:
        meta = importlib.metadata.distribution(dist)
        # the projects' own licence, before the notices of libraries bundled in their wheels
        own = meta.read_text(name).split("\n----")[0].strip()
        parts.append(f"{dist} {meta.version}:\n\n{own}\n")
    head = "docstrings.tsv holds text from the docstrings of the following projects, under their licences:\n\n"
    return head + "\n\n".join(parts)


def main(argv=None):
    """Write the corpus to OUT (default: the bundled one) and its licences beside it."""
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0] if argv else CORPUS
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for label, text in documents():
            f.write(f"{label}\t{text}\n")
    with open(os.path.splitext(out)[0] + ".LICENSE", "w", encoding="utf-8") as f:
        f.write(licences())
    return 0


if __name__ == "__main__":
    sys.exit(main())
