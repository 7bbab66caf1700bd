"""Ring reduce-scatter, optionally pipelined in segments.

Steps: ranks form a ring r -> r+1.  In step k = 0 .. p-2 rank r sends block (r-k-1) mod p
of its partial sums to its right neighbour and receives block (r-k-2) mod p from its left
neighbour into scratch, then combines it into its own copy.  After p-1 steps block r has
passed through every rank and holds the full reduction at rank r.

With ``apart`` (IN and ACC are different memory: an out-of-place all-reduce, and every
reduce-scatter, whose ACC is scratch) a block is received straight into its place in ACC (the
rank's own into OUT, with ``out``) and IN's block combined into it there: no scratch, one
write stream per block fewer (at 16 MiB on two ranks the 8 MiB scratch block does not stay in
cache; without it the all-reduce ran 1.1-1.3x faster, same launch, machine loaded).  In place
the received block would overwrite the rank's own contribution before the combine, so it goes
through scratch.

With ``segment`` elements per message, each block goes as a train of segments received
alternately into two scratch slots: segment j is combined while segment j+1 is on the wire,
and the combine reads a segment that has just arrived, still in cache.

Restrictions: none; blocks may be uneven or empty (empty blocks send no message).  Each
block's reduction order is fixed by the ring, so results do not depend on which rank reads
them.

Input: IN, the caller's buffer, never written, read where each block is first touched (the
raw block sent in step 0 and the left operand of every combine), so neither the
reduce-scatter nor the all-reduce copies its input into ACC: one pass over memory fewer.
Output: with ``out``, the last step's combine writes block r into OUT, the caller's receive
buffer, instead of ACC, so nothing is copied out either.

Cost: (p-1) alpha + ((p-1)/p) n beta + ((p-1)/p) n gamma; in segments of m elements,
(p-1) ceil(n / (p m)) alpha, with the gamma term hidden behind the beta term.

Bytes sent per rank: ((p-1)/p) n by every rank.
"""
from ..schedule import ACC, IN, OUT, TMP, displacements


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * alpha + (p - 1) / p * n * (beta + gamma)


def segments(off, cnt, segment):
    """The (offset, count) pieces of ``cnt`` elements at ``off`` cut every ``segment`` elements."""
    return [(at, min(segment, off + cnt - at)) for at in range(off, off + cnt, segment)]


def reduce_scatter_ring(s, counts, out=False, apart=False, segment=None):
    """Reduce-scatter IN into ACC (this rank's block into OUT with ``out``) around the ring, in
    messages of at most ``segment`` elements; ``apart``: IN and ACC do not overlap, so blocks
    are received where they end (ACC, or OUT for this rank's) and IN combined into them."""
    p, r = s.size, s.rank
    displs = displacements(counts)
    segment = segment or max(counts, default=0) or 1
    right, left = (r + 1) % p, (r - 1) % p
    for k in range(p - 1):
        sent, into = (r - k - 1) % p, (r - k - 2) % p
        sends = segments(displs[sent], counts[sent], segment)
        recvs = segments(displs[into], counts[into], segment)
        pending = None
        for j in range(max(len(sends), len(recvs))):
            arrived = None
            if j < len(recvs):
                off, cnt = recvs[j]
                # Block r arrives last, complete after its combine.
                dst = (OUT, off - displs[r], cnt) if out and into == r else (ACC, off, cnt)
                if apart:
                    arrived = (dst, (IN, off, cnt))
                    s.irecv(left, *dst)
                else:
                    arrived = (dst, (TMP, (j % 2) * segment, cnt), (IN, off))
                    s.irecv(left, *arrived[1])
            if j < len(sends):
                s.isend(right, IN if k == 0 else ACC, *sends[j])
            if pending:
                s.reduce(*pending)
            s.waitall()
            pending = arrived
        if pending:
            s.reduce(*pending)
