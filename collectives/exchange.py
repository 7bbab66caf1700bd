"""The checked exchange, and the fused collectives that are nothing but it.

Every checked collective starts with one exchange on ``TAG_EXCHANGE`` of the Comm's private
communicator (``collectives.agreement`` says what it compares and why that suffices).  A
message is a header of int64 words, the fingerprint vector folded so far (MAX and -MIN of
each field) and one word giving the payload's length, followed by that many payload bytes.
Receives are posted with room for the header and ``FUSED_BYTES`` of payload, more than any
rank ever sends, and the received length (MPI_Get_count) is checked against the header's
word before a byte of payload is used.

The exchange is recursive doubling over p ranks.  With p2 the largest power of two <= p
and rem = p - p2, ranks below 2 rem pair up first: even rank 2i sends its message to
2i + 1 and sits out; 2i + 1 takes part as rank i of the p2, the others (r >= 2 rem) as
r - rem.  In round k a rank trades messages with the rank whose new number differs in bit
k, folds the partner's header into its own (elementwise MAX) and, only if the partner's
header equals its own, combines the payload.  Finally each 2i + 1 sends its whole state to
2i.  Every rank then holds the fold of every rank's fingerprint.

Fused collectives (payload <= FUSED_BYTES, the ``<collective>_fused`` rows of
``registry.FUSED``, which ``auto`` takes under ``check``): the exchange carries the data and
is the collective.  They work on a copy of the data and write the caller's buffers only when
the fingerprints agree, so a mismatch leaves them untouched.  Cost for n payload bytes, with
ceil(lg p) rounds (+2 for p not a power of two), alpha the latency, beta per byte, gamma per
byte reduced, and h the header (8 (2 p + 14) bytes):

* ``allreduce_fused`` (kind REDUCE): the payloads are reduced at each round with the op's C
  kernel; any op, any dtype.  lg p alpha + lg p (n + h) beta + lg p n gamma.
* ``reduce_fused``: the same; the root keeps the result.  ``reduce_scatter_fused``: the
  same over all blocks; each rank keeps its block.
* ``bcast_fused`` (kind BCAST): a rank sends the payload once it holds the root's data (its
  length word says so).  ``scatter_fused``: the same with the root's whole send buffer;
  each rank keeps its block (equal blocks only).  lg p alpha + lg p (n + h) beta.
* ``allgather_fused`` (kind GATHER): each message carries the whole p-block buffer, into
  which a receiver copies the blocks its partner's group holds; ``gather_fused``: the same,
  the root keeps it (equal blocks only).  lg p alpha + lg p (n + h) beta, n the total.
* ``alltoall_fused`` (kind GATHER): the same over every rank's whole send buffer, p times
  the call's n bytes; each rank keeps the blocks meant for it.  lg p alpha + lg p (p n + h) beta.
* ``barrier_fused`` (kind HEADER): the header alone; every rank's exit depends on every
  rank's entry.  lg p alpha + lg p h beta.

Above FUSED_BYTES the exchange runs header-only before the collective's schedule (or, for
the fast path's all-reduce, beside its first step: ``agreement``'s "Overlap").  Whenever the
fold disagrees, every rank then settles (``settle``) before it raises, so that no message of
the call outlives it.

Each trade (a send and a receive, posted together and polled) is watched like a schedule's
step under the stall watchdog (``collectives.watchdog``): a trade that makes no progress for
the limit gives up its requests and raises StallError naming the round and the partner.
``exchange`` here is the pure-Python twin of ``collectives._exchange.exchange``
(COLLECTIVES_PUREPYTHON=1): the same messages, so ranks running either meet.
"""
import math

import numpy as np
from mpi4py import MPI

from .constants import TAG_EXCHANGE, TAGS

# Payload kinds: what a message carries after its header and how a receiver combines it.
HEADER, REDUCE, BCAST, GATHER = range(4)
# The room for payload in every message of the exchange (bytes), so the most a fused collective
# ever carries; on a communicator it may carry less (collectives.eager: MPICH on one node takes
# it all, in eager pieces; elsewhere FUSED_DEFAULT, small enough that a message stays eager).
FUSED_BYTES = 16384
FUSED_DEFAULT = 4096
# The all-reduce's schedules are the ones whose first step may overlap the exchange: ``settle``
# drains their tag.
SETTLE_TAG = TAGS["allreduce"]


def partners(rank, p):
    """The exchange's pattern for ``rank`` of ``p``: (fold, rounds) where ``fold`` is the
    paired rank below 2 rem (None above) and ``rounds`` lists (partner, original ranks whose
    blocks the partner holds) for each round; None for an even rank that sits out."""
    p2 = 1 << (p.bit_length() - 1)
    rem = p - p2

    def ranks(lo, n):
        return [r for m in range(lo, lo + n) for r in ((2 * m, 2 * m + 1) if m < rem else (m + rem,))]

    if rank < 2 * rem:
        if rank % 2 == 0:
            return rank + 1, None
        fold, new = rank - 1, rank // 2
    else:
        fold, new = None, rank - rem
    rounds = []
    mask = 1
    while mask < p2:
        other = new ^ mask
        rounds.append((2 * other + 1 if other < rem else other + rem, ranks(other & ~(mask - 1), mask)))
        mask <<= 1
    return fold, rounds


def exchange(comm, vec, kind=HEADER, data=None, block=0, dtype=0, op=0, has=True, timeout=0,
             collective="exchange", algorithm=None, piece=0):
    """Run the checked exchange on mpi4py ``comm``: ``vec`` (int64) becomes the fold of every
    rank's; ``data`` (uint8, a fused collective's payload, ``has`` False where it holds
    nothing yet) its result, valid where the folded fingerprint agrees.  ``timeout`` > 0
    seconds: StallError naming ``collective`` (and ``algorithm``) when a trade makes no
    progress for that long.  ``piece`` > 0: a longer message goes in pieces of that many
    bytes (the C side's Exchange.piece; every rank must give the same)."""
    from .kernels import reduce_into
    from .watchdog import watched

    nh = vec.size + 1
    cap = 8 * nh + FUSED_BYTES
    mine = np.zeros(cap, np.uint8)
    theirs = np.empty_like(mine)
    head = mine[:8 * nh].view(np.int64)
    head[:-1] = vec
    nbytes = 0 if data is None else data.size
    body = mine[8 * nh:8 * nh + nbytes]
    if kind != HEADER and has:
        body[:] = data
        head[-1] = nbytes
    clash = False
    rank = comm.Get_rank()
    limit = timeout if timeout > 0 else math.inf
    step = -1
    what = collective if algorithm is None else f"{collective} ({algorithm})"

    def wait(requests, peers, statuses):
        watched(requests, limit, peers, what, step, rank,
                test=lambda: MPI.Request.Testall(requests, statuses))

    def cuts(at, total):
        """(offset, length) of the pieces of a ``total``-byte message from byte ``at`` on."""
        size = piece if piece > 0 else max(total, 1)
        return [(o, min(size, total - o)) for o in range(at, total, size)] or [(at, 0)]

    def trade(to, source, send_first=False):
        """As the C side's x_trade: our message to ``to``, one from ``source`` (None: none);
        the received message's length."""
        nonlocal step
        step += 1
        requests, peers, statuses = [], [], []
        if to is not None:
            for at, n in cuts(0, 8 * nh + head[-1]):
                requests.append(comm.Isend(mine[at:at + n], to, TAG_EXCHANGE))
                peers.append((to, "send"))
                statuses.append(MPI.Status())
            if send_first:
                wait(requests, peers, statuses)
                requests, peers, statuses = [], [], []
        if source is None:
            wait(requests, peers, statuses)
            return None
        requests.append(comm.Irecv(theirs[:piece if piece > 0 else cap], source, TAG_EXCHANGE))
        peers.append((source, "receive"))
        statuses.append(MPI.Status())
        wait(requests, peers, statuses)
        got = statuses[-1].Get_count(MPI.BYTE)
        if piece > 0 and got == piece and got >= 8 * nh:
            # The rest, as long as the sender's header says (at most our room: no message of
            # the exchange is longer, so a longer one is a clash).
            total = 8 * nh + int(theirs[:8 * nh].view(np.int64)[-1])
            total = total if 8 * nh <= total <= cap else cap
            requests, peers, statuses = [], [], []
            for at, n in cuts(got, total):
                requests.append(comm.Irecv(theirs[at:at + n], source, TAG_EXCHANGE))
                peers.append((source, "receive"))
                statuses.append(MPI.Status())
            wait(requests, peers, statuses)
            got += sum(st.Get_count(MPI.BYTE) for st in statuses)
        return got

    def absorb(got, final, blocks):
        nonlocal clash
        other = theirs[:8 * nh].view(np.int64)
        size = other[-1] if got >= 8 * nh else -1
        if got != 8 * nh + size:
            clash = True  # not a message of the exchange: the sizes of ours always add up
            return
        if final:
            mine[:got] = theirs[:got]
            return
        clash = clash or not np.array_equal(other[:-1], head[:-1])
        np.maximum(head[:-1], other[:-1], out=head[:-1])
        if clash or size != nbytes:
            return  # a size differing from ours comes with a differing header (counts are in it)
        payload = theirs[8 * nh:8 * nh + size]
        if kind == REDUCE:
            reduce_into(body, payload, dtype, op)
        elif kind == BCAST and not head[-1]:
            body[:] = payload
            head[-1] = nbytes
        elif kind == GATHER:
            for r in blocks:
                body[r * block:(r + 1) * block] = payload[r * block:(r + 1) * block]

    fold, rounds = partners(rank, comm.Get_size())
    if rounds is None:
        absorb(trade(fold, fold, send_first=True), True, ())
    else:
        if fold is not None:
            absorb(trade(None, fold), False, (fold,))
        for partner, blocks in rounds:
            absorb(trade(partner, partner), False, blocks)
        if fold is not None:
            trade(fold, None)
    vec[:] = head[:-1]
    if not agrees(vec):
        settle(comm, limit, what, rank)
    if data is not None:
        data[:] = body


def agrees(vec):
    """Whether a folded vector [error, fields, -fields] says all ranks passed the same fields
    and none an error (the C side's x_agrees)."""
    half = (vec.size - 1) // 2
    return not vec[0] and np.array_equal(vec[1:1 + half], -vec[1 + half:1 + 2 * half])


def settle(comm, limit, what, rank):
    """After an exchange that disagreed, on every rank: receive and discard every message on
    the all-reduce's tag through a first barrier, then pass a second without receiving (the
    C side's ``settle``, which also finishes the overlapped requests this twin never starts)."""
    from .watchdog import StallError

    phase, since = 0, MPI.Wtime()
    barrier = comm.Ibarrier()
    status = MPI.Status()
    while phase < 2:
        message = comm.Improbe(MPI.ANY_SOURCE, SETTLE_TAG, status) if phase == 0 else None
        if message is not None:
            message.Recv(np.empty(status.Get_count(MPI.BYTE), np.uint8))
            since = MPI.Wtime()
        elif barrier.Test():
            phase += 1
            since = MPI.Wtime()
            if phase < 2:
                barrier = comm.Ibarrier()
        elif MPI.Wtime() - since > limit:
            barrier.Cancel()
            raise StallError(what, "settle", rank, [], MPI.Wtime() - since)
