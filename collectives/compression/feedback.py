"""Error feedback: the residual of what compression dropped, compressed again with the next gradient.

``ErrorFeedback`` (on by default for the biased compressors) keeps the residual e of what
compression dropped and compresses g + e next time, leaving
e = g + e - decompress(compress(g + e)), fused into the compression kernel's pass.  What it
guarantees: nothing is lost, only delayed -- after T steps the sum of what was sent equals
the sum of the gradients minus the current residual, and the residual stays bounded
(by the compressor's per-call error: a bucket's step for int8/qsgd, |v| - mean|v| for sign,
the dropped entries for the sparsifiers), which is what lets EF-SGD converge like SGD.
"""
import numpy as np


class ErrorFeedback:
    """Residual state of error feedback for one gradient: what compression has not yet sent.

    ``residual`` is this rank's, of the whole gradient; ``server`` is what the re-quantization
    of the chunk [``server_span``) this rank sums in the reduce-scatter has not yet sent.
    The node-aware shape keeps the residual of this rank's shard [``shard``) only, zero
    elsewhere; ``shard`` is None while all of it may be nonzero.
    """

    def __init__(self):
        self.residual = self.server = self.server_span = self.shard = None

    def residual_for(self, x):
        """The residual matching ``x`` (zeros on first use or when x's shape or dtype changed)."""
        if self.residual is None or self.residual.shape != x.shape or self.residual.dtype != x.dtype:
            self.residual = np.zeros_like(x)
        return self.residual

    def server_for(self, lo, hi, dtype):
        """The residual of this rank's re-quantization of the summed chunk [lo, hi)."""
        if self.server is None or self.server_span != (lo, hi) or self.server.dtype != dtype:
            self.server, self.server_span = np.zeros(hi - lo, dtype), (lo, hi)
        return self.server
