"""Which executor runs a Comm's schedules, and the Comm-level services built on its order.

``NATIVE``: the native executor and checked exchange (collectives._executor,
collectives._exchange), unless COLLECTIVES_PUREPYTHON=1 selects their NumPy twins
(schedule.run_python, exchange.exchange).  ``TAG``: each collective's tag on the private
communicator.  ``run`` and ``buffer`` serve the collectives built on a Comm's own ones (the
compressed all-reduce): a job that must keep its place among the Comm's collectives, and
reused scratch.
"""
import numpy as np

from . import kernels
from .exchange import SCHEDULE_TAG
from .registry import ALGORITHMS

NATIVE = not kernels.PUREPYTHON
# One tag per collective on the private communicator.
TAG = {name: SCHEDULE_TAG + i for i, name in enumerate(ALGORITHMS)}


def run(comm, job):
    """Run ``job()`` on the collectives.Comm ``comm`` now, or after the nonblocking collectives
    still pending on it; ``job``'s result."""
    return comm._engine.run(job)


def buffer(comm, purpose, nbytes):
    """A reused, pre-touched scratch buffer of at least ``nbytes`` for ``purpose``."""
    buf = comm._scratch.get(purpose)
    if buf is None or buf.nbytes < nbytes:
        buf = np.zeros(max(nbytes, 64), np.uint8)
        comm._scratch[purpose] = buf
    return buf[:nbytes]


__all__ = ["NATIVE", "TAG", "buffer", "run"]
