"""LIBSVM / svmlight text files, read in parallel: each rank parses its own byte range.

A line belongs to the rank whose byte range holds the line's first byte, so every line is
parsed exactly once whatever the split.  Ranks then agree (one all-reduce) on whether
indices are zero- or one-based and on the number of features, and number lines globally
(an exclusive scan of per-rank line counts) so an error names the line as an editor would.

Accepted: ``label [qid:N] index:value ...`` with ``#`` comments, CRLF, tabs, trailing
spaces, label-only rows, blank lines and a missing final newline.  Indices within a row
may come in any order but not twice.
"""
import os

import numpy as np
from mpi4py import MPI

from .errors import DataError, together


class Chunk:
    """The rows parsed from one byte range: CSR pieces with indices as written in the file."""

    def __init__(self, labels, qids, indptr, indices, values, nlines, error):
        self.labels, self.qids = labels, qids
        self.indptr, self.indices, self.values = indptr, indices, values
        self.nlines = nlines
        # (line number counted from this range's first line, message) or None
        self.error = error


# Feature indices are C ints in LIBSVM's own tools; a larger one is a corrupt file, not a
# model with billions of weights.
MAX_INDEX = 2**31 - 1
_QID_RANGE = range(-2**63, 2**63)


def _number(text, what):
    """``text`` as a finite float; ValueError naming ``what`` otherwise."""
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"{what} {text!r} is not a finite number")
    return value


def _parse_line(text):
    """(label, qid or -1, indices, values) of one line; raise ValueError on malformed input."""
    # Split the bytes, not the decoded text: str.split also breaks at \x1c-\x1f, which C's
    # isspace (LIBSVM's own reader) does not count as blanks.
    tokens = [tok.decode("ascii") for tok in text.split()]
    label = _number(tokens[0], "label")
    qid = -1
    idx, val = [], []
    for k, tok in enumerate(tokens[1:]):
        key, sep, value = tok.partition(":")
        if not sep:
            raise ValueError(f"expected index:value, found {tok!r}")
        if key == "qid":
            if k:
                raise ValueError("qid: must come right after the label")
            qid = int(value)
            if qid not in _QID_RANGE:
                raise ValueError(f"qid {value} does not fit in 64 bits")
            continue
        i = int(key)
        if not 0 <= i <= MAX_INDEX:
            raise ValueError(f"feature index {i} outside 0..{MAX_INDEX}")
        idx.append(i)
        val.append(_number(value, f"value of feature {i}"))
    if len(set(idx)) != len(idx):
        raise ValueError("a feature index appears twice")
    return label, qid, idx, val


def line_start(f, start):
    """Offset of the first line whose first byte is at or after ``start`` in the open file ``f``."""
    if start == 0:
        return 0
    f.seek(start - 1)
    if f.read(1) == b"\n":
        return start
    f.readline()
    return f.tell()


def range_lines(path, start, end):
    """The lines of ``path`` (bytes, line ends kept) whose first byte lies in ``[start, end)``:
    a line belongs to the rank whose byte range holds its first byte."""
    with open(path, "rb") as f:
        pos = line_start(f, start)
        f.seek(pos)
        while pos < end:
            raw = f.readline()
            if not raw:
                return
            pos += len(raw)
            yield raw


def read_range(path, start, end):
    """Parse the lines of ``path`` whose first byte lies in ``[start, end)``; returns a Chunk."""
    labels, qids, indptr, indices, values = [], [], [0], [], []
    nlines = 0
    error = None
    for raw in range_lines(path, start, end):
        nlines += 1
        text = raw.split(b"#", 1)[0].strip()
        if not text or error is not None:
            continue
        try:
            label, qid, idx, val = _parse_line(text)
        except (ValueError, UnicodeDecodeError) as exc:
            error = (nlines, str(exc))
            continue
        if idx != sorted(idx):
            idx, val = zip(*sorted(zip(idx, val)))
        labels.append(label)
        qids.append(qid)
        indices.extend(idx)
        values.extend(val)
        indptr.append(len(indices))
    return Chunk(np.asarray(labels, np.float64), np.asarray(qids, np.int64),
                 np.asarray(indptr, np.int64), np.asarray(indices, np.int64),
                 np.asarray(values, np.float64), nlines, error)


def byte_range(size, rank, nranks):
    """The ``[start, end)`` byte range of ``rank`` when ``size`` bytes are split over ``nranks``."""
    return size * rank // nranks, size * (rank + 1) // nranks


class Dataset:
    """This rank's rows: X (CSR, n_local x n_features), y, qid, and their global row numbers."""

    def __init__(self, X, y, qid, offset, n_total):
        self.X, self.y, self.qid = X, y, qid
        self.offset = offset
        self.n_total = n_total

    @property
    def rows(self):
        """Global row numbers of the local rows (contiguous in file order)."""
        return np.arange(self.offset, self.offset + self.X.shape[0])


def _matrix(chunk, base, n_features, dense):
    """The rows of ``chunk`` as a dense array or a CSR matrix with ``n_features`` columns."""
    shape = (chunk.labels.size, n_features)
    if dense:
        X = np.zeros(shape)
        X[np.repeat(np.arange(shape[0]), np.diff(chunk.indptr)), chunk.indices - base] = chunk.values
        return X
    import scipy.sparse as sp  # only sparse results pay for SciPy's import

    return sp.csr_matrix((chunk.values, chunk.indices - base, chunk.indptr), shape=shape)


def assemble(chunks, path, zero_based="auto", n_features=None, comm=None, dense=False):
    """Turn per-range Chunks (one per rank, or all of them in one process) into Datasets.

    ``comm`` is an mpi4py communicator when each rank passes its own single chunk; without
    it, ``chunks`` are every range of the file and a list of Datasets comes back.
    ``dense`` gives X as a NumPy array instead of CSR.
    """
    def allreduce(arr, op):
        if comm is None:
            return arr
        out = np.empty_like(arr)
        comm.Allreduce(arr, out, op=op)
        return out

    def exscan(values):
        values = np.asarray(values, np.int64)
        before = np.concatenate(([0], np.cumsum(values)[:-1]))
        if comm is None:
            return before, int(values.sum())
        local = int(values.sum())
        total = comm.allreduce(local)
        return before + (comm.exscan(local) or 0), total

    firsts, _ = exscan([c.nlines for c in chunks])
    errors = [(first + c.error[0], c.error[1]) for c, first in zip(chunks, firsts) if c.error]
    if comm is not None:
        errors = [e for errs in comm.allgather(errors) for e in errs]
    if errors:
        line, msg = min(errors)
        raise DataError(f"{path}, line {line}: {msg}")

    lo = min((int(c.indices.min()) for c in chunks if c.indices.size), default=np.iinfo(np.int64).max)
    hi = max((int(c.indices.max()) for c in chunks if c.indices.size), default=-1)
    lo, hi = allreduce(np.array([-lo, hi], np.int64), MPI.MAX) * (-1, 1)
    if zero_based == "auto":
        zero_based = bool(lo == 0)
    base = 0 if zero_based else 1
    if hi >= 0 and lo < base:
        raise DataError(f"{path}: feature index 0 in a file read as one-based")
    needed = int(hi) + 1 - base
    if n_features is None:
        n_features = max(needed, 0)
    elif needed > n_features:
        raise DataError(f"{path}: feature index {hi} needs {needed} features, more than n_features={n_features}")

    offsets, n_total = exscan([c.labels.size for c in chunks])
    out = [Dataset(_matrix(c, base, n_features, dense), c.labels, c.qids, int(off), n_total)
           for c, off in zip(chunks, offsets)]
    return out if comm is None else out[0]


def read_libsvm(path, comm=None, zero_based="auto", n_features=None, dense=False):
    """Read ``path`` in parallel over mpi4py ``comm`` (default COMM_WORLD); this rank's Dataset.

    Parameters
    ----------
    zero_based : "auto", True or False
        "auto" reads indices as zero-based if index 0 appears anywhere, else one-based.
    n_features : int, optional
        Width of X; default one past the largest index in the file.
    dense : bool
        X as a NumPy array instead of a CSR matrix.

    Raises DataError on every rank when any rank cannot read the file (each reads its own
    part, and a file may be missing or unreadable on some nodes only).
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    comm = getattr(comm, "comm", comm)  # a collectives.Comm wraps an mpi4py one
    with together(comm):
        if not os.path.isfile(path):
            raise DataError(f"{path}: {'not a regular file' if os.path.exists(path) else 'no such file'}")
        try:
            start, end = byte_range(os.path.getsize(path), comm.Get_rank(), comm.Get_size())
            chunk = read_range(path, start, end)
        except OSError as exc:
            raise DataError(f"{path}: {exc.strerror or exc}") from exc
    return assemble([chunk], path, zero_based, n_features, comm, dense)
