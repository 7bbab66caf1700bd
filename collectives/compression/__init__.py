"""Gradient compressors for all-reduce, in the style of Horovod and PyTorch DDP comm hooks.

A compressor turns a flat float32/float64 gradient into a payload, a tuple of arrays, and
back: ``compress(x) -> (payload, ctx)``, ``decompress(payload, ctx)`` and
``decompress_add(dst, payload, ctx)`` (a receiver adds straight into its sum).  ``ctx``
describes the layout (length, dtype, seed, scale), is the same on every rank, and is not
sent.  ``allreduce(comm, grad, compressor, state)`` sums a gradient over the ranks through a
compressor.  Every kernel is from collectives.kernels (native C, or the NumPy twin).

=============  ===============================================  ========  ==============  ============
name           payload                                          unbiased  error feedback  shape
=============  ===============================================  ========  ==============  ============
none           the values                                       yes       -               sum
fp16           float16(x * scale)                               no [1]    off             requantize
int8           int8 per element + one scale per bucket          yes [2]   off             requantize
qsgd           s-level int8 per element + L2 norm per bucket    yes       off             requantize
sign           1 bit per element + mean ``|x|`` per bucket      no        on              requantize
topk           k (index, value) pairs of largest ``|x|``        no        on              sparse
dgc            <= k pairs above a sampled threshold             no        on              sparse
threshold      (index, value) pairs with ``|x|`` >= t           no        on              sparse
randk          ~k values at indices drawn from a shared seed;   no [3]    on              sum
               indices never sent
=============  ===============================================  ========  ==============  ============

* [1] round to nearest: error at most 2^-11 relative, not zero-mean in general.
* [2] with ``stochastic=True`` (the default); round-to-nearest int8 is biased.
* [3] with ``error_feedback=False`` values are scaled by 1/p, p the keep probability, which
  makes it unbiased but multiplies the variance by about 1/p (100x at 1%); by default it
  sends unscaled values and keeps the rest in the error-feedback residual.

Unbiased means E[decompress(compress(x))] = x over the seed, so the all-reduced sum is an
unbiased estimate of the true sum, with the variance the tests bound.

The modules, each of one concern, imported in this order (none imports the package):

* ``base``: the compressor interface, seeds, the identity compressor;
* ``quantizers`` (fp16, int8, qsgd, sign) and ``sparsifiers`` (topk, dgc, threshold,
  randk); ``compressors``: the table of them by name;
* ``feedback``: error feedback's residuals; ``stats``: what one call did;
* ``wire``: the sparse wire format; ``pipeline``: the segmented reduce-scatter/all-gather of
  nonblocking messages, flat or node-aware; ``pairs``: the sparse all-gather;
* ``shapes``: requantize, sum and sparse, built from the pipeline and the pairs;
* ``node_policy``: when the node-aware shapes run;
* ``entry``: ``allreduce``, its agreement across ranks and its choice of shape.

``NODE_RATIO`` (unless a Comm's COLLECTIVES_NODE_RATIO sets it), ``SEGMENT_BYTES`` and
``BLOCK_BYTES`` are read at every call from the module that uses them; setting one here
(``compression.SEGMENT_BYTES = 1 << 20``) sets it there.
"""
import sys
import types

from . import node_policy, pipeline, shapes
from .base import Compressor
from .compressors import COMPRESSORS
from .entry import allreduce
from .feedback import ErrorFeedback
from .node_policy import node_ratio
from .pipeline import chunks, pieces, segments
from .quantizers import FP16, QSGD, Int8, Sign
from .sparsifiers import DGC, RandK, Threshold, TopK
from .stats import Stats

__all__ = ["COMPRESSORS", "DGC", "FP16", "QSGD", "Compressor", "ErrorFeedback", "Int8", "RandK", "Sign", "Stats",
           "Threshold", "TopK", "allreduce", "chunks", "node_ratio", "pieces", "segments"]


def _knob(home, name):
    """A package attribute that reads and sets ``name`` of ``home``, the module that uses it."""
    return property(lambda self: getattr(home, name), lambda self, value: setattr(home, name, value))


class _Package(types.ModuleType):
    """collectives.compression, whose tuning constants live in the modules that read them."""

    NODE_RATIO = _knob(node_policy, "NODE_RATIO")
    SEGMENT_BYTES = _knob(pipeline, "SEGMENT_BYTES")
    BLOCK_BYTES = _knob(shapes, "BLOCK_BYTES")


sys.modules[__name__].__class__ = _Package
