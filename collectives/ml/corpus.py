"""Labelled text files for the ml command, read in parallel: each rank parses its own byte range.

One document per line, ``label<TAB>text`` in UTF-8 (blank lines skipped).  As in the LIBSVM
reader (collectives.train.libsvm), a line belongs to the rank whose byte range holds its
first byte, so every line is read once whatever the split, and lines are numbered globally
(an exclusive scan of per-rank line counts) so an error names the line as an editor would.

The bundled corpus, CORPUS, holds docstrings of NumPy, SciPy and scikit-learn labelled by the
module they document (collectives.ml.make_corpus made it; docs/pipelines.md says why).
"""
import os

import numpy as np

from ..train.data import Part
from ..train.errors import DataError, together
from ..train.estimator import mpi_comm
from ..train.libsvm import byte_range, range_lines

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "docstrings.tsv")


def read_range(path, start, end):
    """(labels, texts, lines read, first error as (line counted from the range's first, message) or None)
    of the lines of ``path`` whose first byte lies in ``[start, end)``."""
    labels, texts, nlines, error = [], [], 0, None
    for raw in range_lines(path, start, end):
        nlines += 1
        line = raw.rstrip(b"\r\n")
        if not line.strip() or error is not None:
            continue
        label, tab, text = line.partition(b"\t")
        try:
            if not tab or not label.strip():
                raise ValueError("expected a label, a tab, then the text")
            labels.append(label.decode("utf-8"))
            texts.append(text.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            error = (nlines, str(exc))
    return labels, texts, nlines, error


def read_documents(path=CORPUS, comm=None):
    """This rank's documents of ``path`` read over ``comm`` (default COMM_WORLD), as a Part:
    X the texts and y the labels (object arrays of str), rows their numbers among all documents
    (0 .. n - 1 in file order).

    DataError on every rank when any rank cannot read its part.
    """
    raw = mpi_comm(comm)
    with together(raw):
        if not os.path.isfile(path):
            raise DataError(f"{path}: {'not a regular file' if os.path.exists(path) else 'no such file'}")
        try:
            start, end = byte_range(os.path.getsize(path), raw.Get_rank(), raw.Get_size())
            labels, texts, nlines, error = read_range(path, start, end)
        except OSError as exc:
            raise DataError(f"{path}: {exc.strerror or exc}") from exc
    first_line = raw.exscan(nlines) or 0
    errors = [e for errs in raw.allgather([(first_line + error[0], error[1])] if error else []) for e in errs]
    if errors:
        line, message = min(errors)
        raise DataError(f"{path}, line {line}: {message}")
    offset = raw.exscan(len(labels)) or 0
    return Part(np.array(texts, dtype=object), np.array(labels, dtype=object), offset + np.arange(len(labels)))


__all__ = ["CORPUS", "read_documents"]
