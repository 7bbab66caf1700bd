"""The compressor interface, its seeds, and the identity compressor.

A compressor turns a flat float32/float64 gradient into a payload, a tuple of arrays, and
back: ``compress(x) -> (payload, ctx)``, ``decompress(payload, ctx)`` and
``decompress_add(dst, payload, ctx)`` (a receiver adds straight into its sum).  ``ctx``
describes the layout (length, dtype, seed, scale), is the same on every rank, and is not
sent.  With a ``residual`` (error feedback, collectives.compression.feedback) ``compress``
compresses x + residual and leaves in the residual what the payload does not carry.

Seeds are a SplitMix64 mix of the compressor's seed, its call counter and (unless every
rank must draw the same numbers) the rank, so a run is a function of the seed and the step.
"""
import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1


def _mix64(z):
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & MASK
    return z ^ (z >> 31)


def chunk_seed(seed, j):
    """The seed of chunk ``j`` of a call seeded ``seed``."""
    return _mix64((seed + (j + 1) * _GOLDEN) & MASK)


def flat(x):
    """``x`` as a flat float32 or float64 array; TypeError or ValueError when it cannot be one."""
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"compressors take float32 or float64 gradients, not {x.dtype}")
    if not x.flags.c_contiguous:
        raise ValueError("compressors take contiguous gradients")
    return x.reshape(-1)


class Compressor:
    """Base class: identity compression, and the seed and error-feedback plumbing."""

    name = "none"
    unbiased = True
    feedback = False        # error feedback on by default
    shape = "sum"           # the all-reduce's shape: "requantize", "sum" or "sparse" (allreduce)
    unit = 1                # chunks of the reduce-scatter hold multiples of this many elements
    overflows = False       # a payload can overflow (fp16): the all-reduce checks and falls back
    shared_seed = False     # every rank must draw the same random numbers

    def __init__(self, seed=0, error_feedback=None):
        self.seed = int(seed)
        self.error_feedback = self.feedback if error_feedback is None else bool(error_feedback)
        self.step = 0
        self.ratios = {}        # dtype -> payload bytes per input byte (node_policy.node_aware_pays)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"

    def seed_for(self, step, rank):
        """Seed of call ``step`` on ``rank`` (rank ignored when ranks share the stream)."""
        return _mix64((self.seed * _GOLDEN + step + 1) & MASK) ^ (0 if self.shared_seed else _mix64(rank + 1))

    def next_seed(self, rank):
        """Seed of the next call on ``rank``; every rank advances in step."""
        s = self.seed_for(self.step, rank)
        self.step += 1
        return s

    def compress(self, x, residual=None, seed=0):
        """(payload, ctx) for flat ``x``; with ``residual``, compress x + residual and update it."""
        x = flat(x)
        if residual is not None:
            residual += x
            payload = (residual.copy(),)
            residual[...] = 0
        else:
            payload = (x.copy(),)
        return payload, self._ctx(x, seed)

    def decompress(self, payload, ctx):
        """The approximation of x that ``payload`` stands for."""
        out = np.zeros(ctx["n"], ctx["dtype"])
        self.decompress_add(out, payload, ctx)
        return out

    def decompress_add(self, dst, payload, ctx):
        """dst += decompress(payload, ctx), without a temporary."""
        dst += payload[0]

    def _ctx(self, x, seed, **extra):
        return dict(n=len(x), dtype=x.dtype, seed=seed, **extra)
