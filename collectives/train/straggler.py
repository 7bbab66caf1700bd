"""Simulated stragglers: chosen ranks compute slower by a factor (``--straggler``).

A spec is ``RANK:FACTOR`` (rank RANK's every gradient computation takes FACTOR times as
long) or ``random:P:FACTOR`` (each gradient computation of every rank, independently, takes
FACTOR times as long with probability P, drawn from a generator seeded by the seed and the
rank, so a run is repeatable).  Both kinds may be given; their factors multiply.

The slowdown is a sleep of (factor - 1) times the measured compute time of that
computation, so it scales with the problem and leaves the core to the other ranks, as a
slower machine would.  The sleep counts as compute time.
"""
import time

import numpy as np

from .errors import UsageError

# A larger factor would stall a job rather than slow it (and time.sleep overflows on huge ones).
MAX_FACTOR = 100


def parse(spec, size=None):
    """(rank or None for random, probability, factor) of one spec; UsageError naming what is wrong.

    ``size``, when given, is the number of ranks a fixed rank must be below.
    """
    parts = str(spec).split(":")
    try:
        if parts[0] == "random" and len(parts) == 3:
            rank, prob, factor = None, float(parts[1]), float(parts[2])
        elif len(parts) == 2:
            rank, prob, factor = int(parts[0]), 1.0, float(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise UsageError(f"straggler {spec!r}: expected RANK:FACTOR or random:P:FACTOR") from None
    if not 1 <= factor <= MAX_FACTOR:
        raise UsageError(f"straggler {spec!r}: the factor must be in [1, {MAX_FACTOR}]")
    if not 0 <= prob <= 1:
        raise UsageError(f"straggler {spec!r}: the probability must be in [0, 1]")
    if rank is not None and (rank < 0 or (size is not None and rank >= size)):
        raise UsageError(f"straggler {spec!r}: rank {rank} is not in 0 .. {(size or 1) - 1}")
    return rank, prob, factor


def check(specs, size):
    """The specs (None for none) as a tuple of strings, checked against ``size`` ranks (UsageError on a bad one)."""
    specs = tuple(str(s) for s in specs or ())
    ranks = [r for r, _, _ in (parse(s, size) for s in specs)]
    fixed = [r for r in ranks if r is not None]
    if len(set(fixed)) != len(fixed) or ranks.count(None) > 1:
        raise UsageError(f"straggler: each rank, and the random mode, may be given once ({', '.join(specs)})")
    return specs


class Stragglers:
    """This rank's slowdown: ``stretch(slowdown(), start)`` slows the computation begun at ``start``."""

    def __init__(self, specs, rank, seed):
        self.factor, self.random = 1.0, None
        for r, prob, factor in map(parse, specs):
            if r is None:
                self.random = (prob, factor)
            elif r == rank:
                self.factor = factor
        self.rng = np.random.default_rng([seed, rank, 0x5354])  # a stream of its own, not the batches'

    def __bool__(self):
        return self.factor != 1 or self.random is not None

    def slowdown(self):
        """The factor of the next computation (draws from the random mode's generator)."""
        factor = self.factor
        if self.random is not None and self.rng.random() < self.random[0]:
            factor *= self.random[1]
        return factor

    def stretch(self, factor, since):
        """Make the computation since perf_counter() was ``since`` take ``factor`` times as long:
        sleep (factor - 1) times its time so far; perf_counter() after.

        A computation timed in pieces (a backward pass layer by layer) stretches each piece by
        one ``slowdown()``.
        """
        extra = (factor - 1) * (time.perf_counter() - since)
        if extra > 0:
            time.sleep(extra)
        return time.perf_counter()
