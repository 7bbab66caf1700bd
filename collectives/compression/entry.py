"""The compressed all-reduce's entry point: its arguments, the agreement across ranks, and
the choice of shape (flat or node-aware) for a compressor."""
import zlib

import numpy as np

from ..agreement import COMPRESSED as AGREEMENT, agree, joined
from ..comm import run, wrap
from .base import flat
from .compressors import COMPRESSORS
from .feedback import ErrorFeedback
from .node_policy import across_nodes, node_aware_pays
from .shapes import SHAPES
from .stats import Stats


def allreduce(comm, grad, compressor, state=None, average=False, report=None, out=None):
    """Sum (or average) ``grad`` over ``comm`` through ``compressor``; returns (result, state).

    Parameters
    ----------
    comm : collectives.Comm or mpi4py.MPI.Intracomm
        The communicator.  Point-to-point messages on its private duplicates (and, for the
        threshold sparsifier, an Allgather of the counts) carry the payloads, so every byte
        sent is one this call counts.
    grad : ndarray of float32 or float64
        This rank's gradient (any shape, contiguous).  Not modified.
    compressor : Compressor or str
        An instance, or a name from COMPRESSORS (constructed with its defaults).
    state : ErrorFeedback or None
        The error-feedback state from the previous call; created when the compressor uses
        error feedback and None is passed.  Pass back what this call returns.
    average : bool
        Divide the sum by the number of ranks.
    report : callable, optional
        Called with this call's ``Stats``, which is also left in ``compressor.last``.
    out : ndarray, optional
        Where the result goes (contiguous, grad's dtype and size, apart from grad), returned
        as the result; by default a new array.  A reused ``out`` spares the call a fresh
        vector's page faults (and the caller a copy).

    The shape follows ``compressor.shape`` (collectives.compression.shapes), node-aware
    across nodes (collectives.compression.node_policy).  Every rank decodes the same payloads
    in the same order, so all ranks hold the same bits.
    """
    c = wrap(comm)
    with joined(c, AGREEMENT):
        if isinstance(compressor, str):
            if compressor not in COMPRESSORS:
                raise ValueError(f"unknown compressor {compressor!r}; one of {', '.join(COMPRESSORS)}")
            compressor = COMPRESSORS[compressor]()
        grad = np.asarray(grad)
        g = flat(np.ascontiguousarray(grad))
        result = np.empty_like(grad) if out is None else _out(out, grad)
    if c.check and c.size > 1:
        # Before any payload moves: a rank whose count (or compressor) differs would otherwise
        # truncate a receive on one rank and leave another waiting.  Behind the Comm's pending
        # nonblocking collectives (``run``), whose agreements use the same exchange and tag.
        settings = _fingerprint(compressor, average)
        run(c, lambda: agree(c, AGREEMENT, None, count=g.size, dtype=g.dtype.num,
                             compressor_settings=settings))
    p, rank = comm.Get_size(), comm.Get_rank()
    if state is None and compressor.error_feedback:
        state = ErrorFeedback()
    nodes = across_nodes(comm)
    if nodes is not None and compressor.shape == "requantize" and not node_aware_pays(comm, nodes, compressor, g.dtype):
        nodes = None
    stats = Stats(compressor.shape + ("/node" if nodes is not None else ""))
    seed = compressor.next_seed(rank)
    flat_result = result.reshape(-1)
    SHAPES[compressor.shape](comm, nodes, g, compressor, state, seed, stats, flat_result)
    if average and p > 1:
        flat_result /= flat_result.dtype.type(p)
    compressor.last = stats
    if report is not None:
        report(stats)
    return result, state


def _fingerprint(compressor, average):
    """What every rank's call must share besides count and dtype, as a 31-bit number: the
    compressor's class and settings, ``average``, and, when the ranks draw the same random
    numbers, its seed and step (a seed of its own per rank is fine otherwise)."""
    private = () if compressor.shared_seed else ("seed", "step")
    settings = sorted((k, v) for k, v in vars(compressor).items()
                      if isinstance(v, (bool, int, float, str)) and k not in private)
    return zlib.crc32(repr((type(compressor).__name__, settings, bool(average))).encode()) >> 1


def _out(out, grad):
    """``out`` if it can take the all-reduce of ``grad``, else a ValueError or TypeError naming
    what is wrong."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array, not {type(out).__name__}")
    if out.dtype != grad.dtype or out.size != grad.size:
        raise ValueError(f"out holds {out.size} {out.dtype}; the gradient {grad.size} {grad.dtype}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be contiguous and writeable")
    if np.shares_memory(out, grad):
        raise ValueError("out overlaps the gradient")
    return out
