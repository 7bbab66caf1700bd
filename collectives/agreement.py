"""The cross-rank argument agreement: every rank raises the same ValueError on a mismatch.

What is compared.  Before a checked collective runs, each rank contributes the collective's
index, the chosen algorithm (or ``native`` for a call delegated to MPI) and the fields of its
call that must match: counts (per rank for the v-variants and reduce-scatter), dtype,
itemsize, op and root.  The vector holds each field twice, once as is and once negated, and
one native all-reduce with MAX gives every rank both the maximum and the minimum of each
field: a field agrees when the two are equal, and the error names every field whose range is
not a single value.  The vector's length depends only on the communicator's size, so ranks
that call different collectives still meet in the same all-reduce.  A field a rank cannot
know (a Gatherv count away from the root) is sent as the neutral value, which leaves the
others' range unchanged.  The fast path (``_engine.Fast``) builds the same vector in C and
reports through ``disagreement``, so a rank on either path meets the others.

A rank with bad arguments.  Its own ValueError or TypeError is kept; it still takes part in
the agreement with the error flag set (the ``agreed`` decorator), so the others learn that
something was wrong and raise "invalid arguments on another rank" instead of waiting for it
in the schedule, while it raises its own, detailed error.

Plan: a check with no round trip.  The all-reduce above costs a round trip that, at 8 bytes,
dominates the collective.  The same fingerprint (the fields above, each kept as MAX and as
-MIN) can instead ride in the messages the schedule already sends: every message carries
the sender's running MAX/-MIN vector, every receive folds the incoming one into its own,
and the count is part of it, so a receive posted for the expected size and checked against
the message's size (MPI_Get_count) before its data is used turns a size mismatch into this
error, never a truncation or an overrun.  In schedules where every rank's result depends
on every rank's input (all-reduce by recursive doubling, ring or Rabenseifner, all-gather,
the dissemination barrier) the folded vector at the end is the global one on every rank:
MAX equal to MIN everywhere means all ranks agree, and a mismatch raises the same error on
every rank.  Rooted collectives (bcast, reduce, gather, scatter) lack that property: a
binomial tree informs the root, or the leaves, not everyone.  For them, at small sizes,
the schedule itself becomes a universal exchange by recursive doubling: in each of lg p
rounds a rank sends its fingerprint with the (small) payload gathered so far, the root's
data for bcast, partial results for reduce, blocks for gather and scatter, so that after
lg p message latencies, the binomial tree's own depth, every rank holds the global
agreement and the root's result is complete.  At large sizes the extra traffic of such an
exchange would cost more than one round trip, and the all-reduce of the fingerprint before
the schedule stays: it is cheap beside the payload.  Open: ranks whose schedules differ in
structure (a different collective, algorithm or root) may never exchange the messages
that would carry the fingerprint and then wait on each other forever; they need a
matching rule on the envelope (collective and algorithm in the tag, a message with a
foreign tag found by a probe and reported) before the all-reduce can be dropped.  And a
mismatch found on receipt is found after earlier steps wrote into the caller's buffers,
which are then undefined, as MPI leaves them after an error.  Until both are settled this
module keeps the all-reduce, which covers every case.
"""
import functools

import numpy as np
from mpi4py import MPI

from .registry import ALGORITHMS, names
from .watchdog import agree_max

# Collective indices, as in collectives._engine, which runs the same agreement in C.
COLLECTIVE_INDEX = {name: i for i, name in enumerate(ALGORITHMS)}


def agree(comm, collective, algo, error=False, **fields):
    """Raise the same ValueError on every rank of ``comm`` unless all passed equal ``fields``.

    ``comm`` is a collectives.Comm.  A field may be None on ranks that cannot know it.
    ``algo`` is an Algorithm, ``"native"`` for a call delegated to MPI, or None with
    ``error`` (this rank's own arguments were invalid; it raises its own error afterwards).
    """
    width = 4 + comm.size
    if len(fields) > width:
        raise RuntimeError(f"{collective}: {len(fields)} fields to agree on, room for {width}")
    unknown = 1 << 62
    head = [int(error), COLLECTIVE_INDEX[collective],
            0 if algo is None else _choices(collective).index(getattr(algo, "name", algo))]
    values = list(fields.values()) + [0] * (width - len(fields))
    hi = head + [-unknown if v is None else int(v) for v in values]
    lo = head[1:] + [unknown if v is None else int(v) for v in values]
    both = np.array(hi + [-v for v in lo], dtype=np.int64)
    if comm.timeout:
        agree_max(comm, both, collective)
    else:
        comm._coll.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
    hi, lo = both[1:len(hi)], -both[len(hi):]
    if both[0]:
        if error:
            return
        raise ValueError(f"{collective}: invalid arguments on another rank (it raised the details)")
    message = disagreement(collective, ["collective", "algorithm"] + list(fields), lo, hi)
    if message:
        raise ValueError(message)


def _choices(collective):
    """The algorithm indices the agreement uses: the table's names, then "native"."""
    return names(collective) + ["native"]


def disagreement(collective, keys, lo, hi):
    """What the argument agreement reports, or None when all ranks agree: ``lo`` and ``hi``
    are, per key, the least and greatest value over the ranks (the first two keys are the
    collective and the algorithm).  Shared by ``agree`` and the fast path's agreement."""
    # Fields mean something only between ranks running the same collective and algorithm
    # (a native call agrees on none), and ranks differing there may have different keys.
    if lo[0] != hi[0] or lo[1] != hi[1]:
        keys = keys[:2]
    bad = [f"{k} ranges {lo[i]}..{hi[i]}" for i, k in enumerate(keys) if lo[i] != hi[i]]
    if lo[0] == hi[0] and lo[1] != hi[1]:
        choices = _choices(collective)
        bad[0] += (f" ({choices[lo[1]]}..{choices[hi[1]]}; 'native' is MPI's own call, "
                   "taken for arguments no algorithm covers)")
    if not bad:
        return None
    return f"{collective}: arguments differ across ranks: " + ", ".join(bad)


def agreed(collective):
    """Decorate a job builder ``builder(comm, ...)`` so that, with ``comm.check``, a rank whose
    arguments are invalid still takes part in the agreement before raising: the others raise
    too instead of waiting for it."""
    def decorate(builder):
        @functools.wraps(builder)
        def wrapper(comm, *args, **kwargs):
            try:
                return builder(comm, *args, **kwargs)
            except (ValueError, TypeError) as exc:
                if not comm.check or comm.size == 1:
                    raise
                error = exc

            def job():
                agree(comm, collective, None, error=True)
                raise error
            return job
        return wrapper
    return decorate


__all__ = ["COLLECTIVE_INDEX", "agree", "agreed", "disagreement"]
