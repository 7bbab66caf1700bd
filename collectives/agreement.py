"""The cross-rank argument agreement: every rank raises the same ValueError on a mismatch.

What is compared.  Before a checked collective runs, or as it runs, each rank contributes
the collective's index, the chosen algorithm (or ``native`` for a call delegated to MPI) and
the fields of its call that must match: counts (per rank for the v-variants and
reduce-scatter), dtype, itemsize, op and root.  The vector holds each field twice, once as
is and once negated, so folding two vectors with an elementwise MAX gives both the maximum
and the minimum of each field.  A field agrees when the two are equal, and the error names
every field whose range is not a single value.  The vector's length depends only on the
communicator's size.  A field a rank cannot know (a Gatherv count away from the root) is
sent as the neutral value, which leaves the others' range unchanged.

How it travels: the checked exchange (``collectives.exchange``).  Every checked collective,
whatever its collective, algorithm, root or call form (the engine ``_engine.Engine``
with the exchange in C or its NumPy twin), starts with the same exchange on the same tag: recursive
doubling over the ranks in which each message is the sender's folded vector plus an
optional payload, and each receive folds the incoming vector into the receiver's.  After
it every rank holds the fold over all ranks, because recursive doubling is an all-reduce:
each rank's final state depends on every rank's input.  Equal maximum and minimum of every
field then means that every rank passed the same value, and a mismatch is seen, and the
same error raised, on every rank.  Ranks that called different collectives still meet:
the exchange's pattern depends only on the communicator's size, so it cannot hang on a
structural mismatch; the difference shows in the collective's field and all raise.

No truncation.  Every receive is posted with room for the header and ``FUSED_BYTES`` of
payload, more than any rank sends in the exchange, so MPI can never truncate a message nor
write past the buffer.  The received size (MPI_Get_count) is compared with the size word
of the header before any payload is used, and a payload is combined only when the sender's
header equals the receiver's: between ranks whose calls differ, payloads are never mixed.

No extra round trip at small sizes.  Up to ``FUSED_BYTES`` of payload the exchange carries
the data and is the collective (the ``<collective>_fused`` algorithms, taken by ``auto``
under the check): the check costs a few header bytes per message.  Fused collectives work
on a copy and write the caller's buffers only once the fingerprints agree, so a mismatch
leaves them untouched.  Above it the exchange runs with headers only, before the schedule
or overlapped with its first step (below).

Counts that differ per rank.  In an Alltoallv rank i's send count to j must equal rank j's
receive count from i: no field is the same on every rank, and comparing every pair exactly
would take p^2 fields.  Each rank instead contributes one word, the sum over its peers j of
H(i, j, its send bytes to j) minus H(j, i, its receive bytes from j), with H a 64-bit mix of
the three (splitmix64's finalizer); the exchange carries it as a summed payload (a phase of
the shared segment on a Comm with one).  Every pair (i, j) enters the total once as sent and
once as received, so matching counts sum to 0 and a mismatch leaves it nonzero except with
probability about 2^-64.  The check costs what the other collectives' costs, one exchange of
the header and one word, and every rank sees the same sum.  Only then, when it is nonzero, do
the ranks all-gather their counts to name a pair that differs (``_engine.Engine.unmatched``);
a correct call never pays for that.  The dtype and item size are compared as fields.

Overlap (the Cython fast path of the all-reduce above ``FUSED_BYTES``; ``plans.leading``
says which plans).  The schedule's first step (its leading receives and sends, a first
send-receive row split into them) starts before the exchange, then the exchange runs while
that data moves, and the rest of the schedule runs only once the fold has agreed: the check
then costs about the latency of the first step, not a round trip more.  It stays safe:

* Receives are posted with this rank's own sizes, so a disagreeing peer's longer message is
  truncated (an error, which ``settle`` absorbs); a short one or a truncation only matters
  if the fold agreed, and it cannot then, since the counts, dtype and algorithm are in it.
  That is safe only where MPI keeps a truncated message within the receive buffer, which
  MPICH does: there (``plans.EARLY_RECEIVES``) the leading receives start before the
  exchange.  Open MPI 5.0.11's ob1 writes a truncated rendezvous message past the buffer's
  end (the evidence is at EARLY_RECEIVES: it corrupts the heap behind the scratch buffer, and
  the next call aborts), so under Open MPI, and any MPI not known to be
  safe, only the leading sends start before the exchange and their receives are posted once
  it agrees: no receive then meets a message of another size.  The overlap there hides the
  start of the sends (an eager message's transfer, a rendezvous message's handshake), not
  the whole first step; what that saves under Open MPI has not been measured.  So the
  overlap runs under every MPI: sends and receives under MPICH (tested: 5.0.2), sends only
  under any other (tested: Open MPI 5.0.11).
* No leading receive lands in a buffer that carries input (scratch, or the output when it
  is apart from the input), nothing is combined, and an algorithm that would copy the input
  to the output first gets the copy as a row after the leading ones (whose sends read the
  input instead), so on a mismatch the input, in place or not, is untouched.  An output
  buffer apart from the input may hold part of a peer's data after the ValueError.
* A mismatch leaves no request and no message behind (``_exchange.settle``, run by every rank
  whose exchange disagreed, which is every rank of the call, whatever path it took).  The
  leading sends are synchronous, so a completed one has been matched.  Each rank cancels its
  unmatched leading receives (if any), then receives and discards every message on the
  all-reduce's tag (the only schedule that overlaps; point-to-point traffic on its own tags
  stays) until its own sends complete, then through a first barrier: when that completes,
  every rank's sends have matched, so none of the call's messages is left in flight.  A
  second barrier, passed without receiving, keeps a rank that left the first from starting
  its next call (whose messages a slower rank, still draining, would otherwise take).

The NumPy twins (COLLECTIVES_PUREPYTHON=1) keep the sequential order (no overlap: their
per-call cost is not where the check matters); they settle the same way on a mismatch
(``exchange.settle``), so ranks on either side meet.  What the overlap saves is in
docs/results/.

What stays out.  ``check=False`` (COLLECTIVES_CHECK=0) skips the exchange altogether (a
forced fused algorithm still runs it: it is that algorithm).  The exchange checks the
arguments that every rank must share, not the data: it cannot tell a wrong buffer of the
right size.  The nonblocking forms run the same calls, so they use the same exchange.

Under the stall watchdog (``comm.timeout``; every rank of a communicator sets the same limit)
each trade of the exchange is watched like a schedule's step: a rank that never arrives is
named by the ranks that trade with it, and each other rank names the partner it waits for.

A rank with bad arguments.  Its own ValueError or TypeError is kept; it still takes part in
the agreement with the error flag set (``_engine.Engine.refuse``), so the others learn that
something was wrong and raise "invalid arguments on another rank" instead of waiting for it
in the schedule, while it raises its own, detailed error.
"""
import contextlib

from .constants import AGREED, COMPRESSED, COUNTS
from .registry import ALGORITHMS, choices

# What the agreement compares by index (collectives.constants.AGREED): the collectives, then
# the compressed all-reduce and Reduce_scatter's count exchange, which have no algorithm table,
# so their algorithm index is always 0.
COLLECTIVE_INDEX = {name: i for i, name in enumerate(AGREED)}


class Disagreement(ValueError):
    """The agreement's error, raised on every rank of the call."""


def agree(comm, collective, algo, error=False, **fields):
    """Raise the same ValueError on every rank of ``comm`` unless all passed equal ``fields``;
    return the agreed value of each field (a field that only one rank knows: that rank's).

    ``comm`` is a collectives.Comm.  A field may be None on ranks that cannot know it.
    ``algo`` is an Algorithm or its name, ``"native"`` for a call delegated to MPI, or None
    with ``error`` (this rank's own arguments were invalid; it raises its own error afterwards).
    """
    name = None if algo is None else getattr(algo, "name", algo)
    return comm._engine.agree_fields(collective, name, tuple(fields), list(fields.values()), error)


def disagreement(collective, keys, lo, hi):
    """What the argument agreement reports when the ranks' vectors differ: ``lo`` and ``hi``
    are, per key, the least and greatest value over the ranks (the first two keys are the
    collective and the algorithm)."""
    if lo[0] != hi[0]:
        # Each rank knows only its own collective: name the range, the same on every rank.
        called = list(COLLECTIVE_INDEX)
        return (f"arguments differ across ranks: collective ranges {called[lo[0]]}..{called[hi[0]]} "
                "(ranks called different collectives)")
    known = choices(collective) if collective in ALGORITHMS else [collective]
    # Every algorithm of a collective compares the same fields; a native call compares none,
    # so fields count only when no rank took it (it is the last index of ``choices``).
    if known[hi[1]] == "native" and lo[1] != hi[1]:
        keys = keys[:2]
    bad = [f"{k} ranges {lo[i]}..{hi[i]}" for i, k in enumerate(keys) if lo[i] != hi[i]]
    if lo[0] == hi[0] and lo[1] != hi[1]:
        native = ("; 'native' is MPI's own call, taken for arguments no algorithm covers"
                  if known[hi[1]] == "native" else "")
        bad[0] += f" ({known[lo[1]]}..{known[hi[1]]}{native})"
    return f"{collective}: arguments differ across ranks: " + ", ".join(bad)


@contextlib.contextmanager
def joined(comm, collective):
    """Around a call's own checks before it runs ``collective`` on the collectives.Comm
    ``comm``: a ValueError or TypeError raised on this rank alone first takes part in the
    other ranks' agreement (behind the Comm's pending nonblocking calls), as the Comm's
    collectives do, so they raise too instead of waiting."""
    try:
        yield
    except (ValueError, TypeError):
        if comm.check and comm.size > 1:
            comm._engine.run(lambda: agree(comm, collective, None, error=True))
        raise


__all__ = ["COLLECTIVE_INDEX", "COMPRESSED", "COUNTS", "Disagreement", "agree", "disagreement", "joined"]
