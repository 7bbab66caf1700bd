"""Collectives as functions of arrays: ``y = allreduce(comm, x)``.

Each function takes a communicator and a NumPy array (or anything ``np.asarray`` accepts),
leaves its input untouched and returns a new array, or fills and returns ``out`` when given.
Shapes are kept: ``allgather`` of shape ``s`` returns shape ``(p, *s)``; ``reduce_scatter``
splits axis 0.  Ops are names (``"sum"``, ``"max"``, ...) or ``MPI.Op``; ``algorithm`` is a
name from ``collectives.names(collective)`` or ``"auto"``, which defers to the communicator's
choice and then to the COLLECTIVES_<COLLECTIVE> environment variable.

``comm`` is a ``collectives.Comm`` or an mpi4py intracommunicator.  An mpi4py communicator
is wrapped in a Comm on first use and the wrapper is cached on it (``collectives.comm.wrap``);
wrapping duplicates the communicator, which is collective, so every rank of it must make
that first call, as it must for any collective anyway.
"""
import numpy as np
from mpi4py import MPI

from .agreement import joined
from ._comm import Functional
from .comm import wrap
from .schedule import blocks

# What scatter's root tells the others, in int64s: dtype string length (-1: the root's
# array is unusable), number of dimensions of a row, the dtype string, a row's shape.
_DESCR_BYTES = 16
_MAX_DIMS = 64
_HEADER = 2 + _DESCR_BYTES // 8 + _MAX_DIMS


def _input(array, like=None):
    """``array`` as an ndarray laid out like ``like`` (C order unless ``like`` is Fortran-only)."""
    array = np.asarray(array)
    if like is not None and like.flags.f_contiguous and not like.flags.c_contiguous:
        return np.asarray(array, order="F")
    return np.asarray(array, order="C")


def _output(out, shape, dtype, name):
    """``out`` checked against the result's shape and dtype, or a new array for it."""
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: out must be a NumPy array, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"{name}: out has shape {out.shape} and dtype {out.dtype}, "
                         f"the result has shape {tuple(shape)} and dtype {np.dtype(dtype)}")
    return out


def _send(array, out):
    """The send argument for a result going to ``out``: IN_PLACE when they are the same array."""
    if array is out:
        return MPI.IN_PLACE
    if np.shares_memory(array, out):
        return array.copy()
    return _input(array, out)


allreduce = Functional(wrap).allreduce


def iallreduce(comm, array, op="sum", algorithm="auto", out=None):
    """Start an allreduce; the returned Request's ``wait()`` returns the result."""
    c = wrap(comm)
    with joined(c, "allreduce"):
        array = np.asarray(array)
        out = _output(out, array.shape, array.dtype, "iallreduce")
    req = c.Iallreduce(_send(array, out), out, op=op, algorithm=algorithm)
    req.result = out
    return req


def bcast(comm, array, root=0, algorithm="auto", out=None):
    """Rank ``root``'s ``array`` on every rank.

    Every rank passes an array of the same shape and dtype; only the root's contents matter.
    """
    c = wrap(comm)
    with joined(c, "bcast"):
        array = np.asarray(array)
        out = _output(out, array.shape, array.dtype, "bcast")
        if c.rank == root and array is not out:
            np.copyto(out, array)
    c.Bcast(out, root=root, algorithm=algorithm)
    return out


def reduce(comm, array, op="sum", root=0, algorithm="auto", out=None):
    """Combine ``array`` of every rank with ``op``; the result at ``root``, None elsewhere."""
    c = wrap(comm)
    with joined(c, "reduce"):
        array = np.asarray(array)
        if c.rank != root:
            array = _input(array)
        else:
            out = _output(out, array.shape, array.dtype, "reduce")
    if c.rank != root:
        c.Reduce(array, None, op=op, root=root, algorithm=algorithm)
        return None
    c.Reduce(_send(array, out), out, op=op, root=root, algorithm=algorithm)
    return out


def allgather(comm, array, algorithm="auto", out=None):
    """Every rank's ``array`` stacked in rank order: shape ``(p, *array.shape)``."""
    c = wrap(comm)
    with joined(c, "allgather"):
        array = np.asarray(array, order="C")
        out = _output(out, (c.size, *array.shape), array.dtype, "allgather")
    c.Allgather(array, out, algorithm=algorithm)
    return out


def reduce_scatter(comm, array, op="sum", counts=None, algorithm="auto"):
    """Combine ``array`` of every rank with ``op`` and return this rank's block of axis 0.

    Rank i gets ``counts[i]`` rows; by default axis 0 is split as evenly as possible, the
    first ranks taking one row more.
    """
    c = wrap(comm)
    with joined(c, "reduce_scatter"):
        array = np.asarray(array, order="C")
        if array.ndim == 0:
            raise ValueError("reduce_scatter: a 0-d array has no axis to split")
        rows = blocks(array.shape[0], c.size)[0] if counts is None else tuple(int(k) for k in counts)
        if len(rows) != c.size or any(k < 0 for k in rows) or sum(rows) != array.shape[0]:
            raise ValueError(f"reduce_scatter: counts {rows} must be {c.size} non-negative row counts "
                             f"adding up to {array.shape[0]}")
    row = int(np.prod(array.shape[1:], dtype=np.int64))
    out = np.empty((rows[c.rank], *array.shape[1:]), array.dtype)
    c.Reduce_scatter(array, out, recvcounts=[k * row for k in rows], op=op, algorithm=algorithm)
    return out


def gather(comm, array, root=0, algorithm="auto"):
    """Every rank's ``array`` stacked in rank order at ``root`` (shape ``(p, *shape)``); None elsewhere."""
    c = wrap(comm)
    array = np.asarray(array, order="C")
    out = np.empty((c.size, *array.shape), array.dtype) if c.rank == root else None
    c.Gather(array, out, root=root, algorithm=algorithm)
    return out


def _describe(array, size):
    """The header scatter broadcasts: dtype string, ndim and shape of one row; or why not."""
    descr = np.zeros(_HEADER, np.int64)
    code = array.dtype.str.encode()
    descr[0] = -1
    if array.ndim == 0 or array.shape[0] != size:
        return descr, f"the root's array must have {size} rows (one per rank), got shape {array.shape}"
    if array.dtype.hasobject or array.dtype.fields or len(code) > _DESCR_BYTES:
        return descr, f"unsupported dtype {array.dtype}"
    descr[0], descr[1] = len(code), array.ndim - 1
    descr[2:2 + _DESCR_BYTES // 8].view(np.uint8)[:len(code)] = np.frombuffer(code, np.uint8)
    descr[2 + _DESCR_BYTES // 8:][:array.ndim - 1] = array.shape[1:]
    return descr, None


def scatter(comm, array, root=0, algorithm="auto"):
    """Row i of ``array`` at ``root`` (shape ``(p, ...)``) to rank i; other ranks may pass None."""
    c = wrap(comm)
    descr, problem = np.zeros(_HEADER, np.int64), None
    if c.rank == root:
        try:
            array = np.asarray(array, order="C")
        except (ValueError, TypeError) as exc:
            descr[0], problem = -1, f"the root's array: {exc}"
        else:
            descr, problem = _describe(array, c.size)
    # Non-roots learn dtype and shape from the root, so they need not pass an array; a bad
    # array at the root is reported on every rank instead of leaving the others waiting.
    c.Bcast(descr, root=root)
    length, ndim = int(descr[0]), int(descr[1])
    if length < 0:
        raise ValueError(f"scatter: {problem or f'rank {root} passed an array it cannot scatter'}")
    dtype = np.dtype(descr[2:2 + _DESCR_BYTES // 8].view(np.uint8)[:length].tobytes().decode())
    out = np.empty(tuple(int(d) for d in descr[2 + _DESCR_BYTES // 8:][:ndim]), dtype)
    c.Scatter(array if c.rank == root else None, out, root=root, algorithm=algorithm)
    return out


def barrier(comm, algorithm="auto"):
    """Return once every rank of ``comm`` has called barrier."""
    wrap(comm).Barrier(algorithm=algorithm)


__all__ = ["allreduce", "iallreduce", "bcast", "reduce", "allgather", "reduce_scatter",
           "gather", "scatter", "barrier"]
