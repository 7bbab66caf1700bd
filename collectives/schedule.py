"""Schedules: what one rank does in one collective, as data.

An algorithm module never talks to MPI.  It appends steps to a ``Schedule`` for one rank,
communicator size, element count and root; the result is cached and run by an executor:
the native one (collectives._executor, Cython on mpi4py's C API, no Python between steps)
or ``run_python`` below (mpi4py calls and NumPy), selected with COLLECTIVES_PUREPYTHON.

Buffers are named, never addressed: ACC is the buffer that ends up holding the result
(the user's receive buffer when it can be), TMP is scratch the executor owns, IN is the
caller's read-only input, OUT is a reduce-scatter's own block of the user's receive buffer
(offset 0 at the block's first element), where the final combine writes the result instead
of into ACC, saving the copy out.  Offsets and counts are in elements; the executor scales them by
the item size, so one schedule serves every dtype and op.

Large counts: MPI takes a message's count as a C int, so a send or receive of more than
``MAX_COUNT`` elements (INT_MAX) becomes several rows of at most that many, in the same
order on both sides: MPI matches messages between two ranks in the order they were sent,
so piece k meets piece k.  The executors count in elements of a contiguous type of the
item size, so the limit is on elements whatever the dtype, and they refuse a row over
INT_MAX instead of narrowing it.  A one-way row splits into blocking pieces: each waits
only for the same peer to take the piece before it, a wait the unsplit row had too.  A
two-way row splits into nonblocking pieces completed together, which is what MPI_Sendrecv
is: no piece waits for a third rank, so the split adds no dependency that could deadlock.
"""
import numpy as np

from . import config
from .constants import ACC, COPY, IN, IRECV, ISEND, NCOLS, NONE, OUT, REDUCE, SENDRECV, TMP, WAITALL

# The step kinds and buffers are collectives.constants'; each row is [kind, buf_a, off_a, cnt_a,
# peer_a, buf_b, off_b, cnt_b, peer_b].  A REDUCE row is [REDUCE, dst buf, dst off, cnt, left
# buf, src buf, src off, cnt, left off]: dst = op(left, src) in one pass, so an algorithm can
# read the caller's input where it first touches a block instead of copying it into ACC up
# front, and write a result where it is wanted (OUT) instead of copying it there after.
INT_MAX = 2**31 - 1

# The largest count of one send or receive row.  COLLECTIVES_MAX_COUNT lowers it so tests
# reach the split rows with small messages; a Comm plans its calls under the value it finds.
MAX_COUNT = config.get("COLLECTIVES_MAX_COUNT")


def displacements(counts):
    """Offsets of blocks of ``counts`` elements laid end to end."""
    displs, at = [], 0
    for c in counts:
        displs.append(at)
        at += c
    return tuple(displs)


def blocks(count, parts):
    """Split ``count`` elements into ``parts`` near-equal blocks: (counts, displs) tuples."""
    q, r = divmod(count, parts)
    counts = tuple(q + (i < r) for i in range(parts))
    return counts, displacements(counts)


def pieces(off, cnt, limit):
    """(offset, count) pieces of at most ``limit`` elements covering ``cnt`` from ``off``."""
    return [(off + at, min(limit, cnt - at)) for at in range(0, cnt, limit)] or [(off, 0)]


def check_counts(steps):
    """Raise ValueError if a send or receive row of ``steps`` moves more than INT_MAX elements."""
    moves = steps[np.isin(steps[:, 0], (SENDRECV, ISEND, IRECV))]
    if moves.size and moves[:, [3, 7]].max() > INT_MAX:
        raise ValueError(f"schedule moves {moves[:, [3, 7]].max()} elements in one message, "
                         f"over MPI's limit of {INT_MAX}")


class Schedule:
    """The steps of one rank in one collective, built by an algorithm module."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size
        self.rows = []
        self.tmp_count = 0
        self.nreq = 0
        self._pending = 0
        self.limit = MAX_COUNT
        if not 1 <= self.limit <= INT_MAX:
            raise ValueError(f"COLLECTIVES_MAX_COUNT must be 1..{INT_MAX}, got {self.limit}")

    def _use(self, buf, off, cnt):
        if buf == TMP:
            self.tmp_count = max(self.tmp_count, off + cnt)

    def sendrecv(self, dest, send, source, recv):
        """Send ``send = (buf, off, cnt)`` to ``dest`` while receiving ``recv`` from ``source``."""
        if dest == NONE and source == NONE:
            return
        sb, so, sc = send if dest != NONE else (NONE, 0, 0)
        rb, ro, rc = recv if source != NONE else (NONE, 0, 0)
        if dest != NONE and source != NONE and self._pending:
            # Its split form ends in a waitall, which would complete the pending requests early.
            raise RuntimeError("sendrecv while nonblocking requests are pending; waitall first")
        self._use(sb, so, sc)
        self._use(rb, ro, rc)
        if max(sc, rc) <= self.limit:
            self.rows.append((SENDRECV, sb, so, sc, dest, rb, ro, rc, source))
        elif source == NONE:
            for o, c in pieces(so, sc, self.limit):
                self.rows.append((SENDRECV, sb, o, c, dest, NONE, 0, 0, NONE))
        elif dest == NONE:
            for o, c in pieces(ro, rc, self.limit):
                self.rows.append((SENDRECV, NONE, 0, 0, NONE, rb, o, c, source))
        else:
            self.irecv(source, rb, ro, rc)
            self.isend(dest, sb, so, sc)
            self.waitall()

    def send(self, dest, buf, off, cnt):
        """Blocking send of ``cnt`` elements of ``buf`` at ``off`` to ``dest``."""
        self.sendrecv(dest, (buf, off, cnt), NONE, None)

    def recv(self, source, buf, off, cnt):
        """Blocking receive of ``cnt`` elements from ``source`` into ``buf`` at ``off``."""
        self.sendrecv(NONE, None, source, (buf, off, cnt))

    def isend(self, dest, buf, off, cnt):
        """Start a send; completed by the next ``waitall``."""
        self._use(buf, off, cnt)
        for o, c in pieces(off, cnt, self.limit):
            self._start((ISEND, buf, o, c, dest, NONE, 0, 0, NONE))

    def irecv(self, source, buf, off, cnt):
        """Start a receive; completed by the next ``waitall``."""
        self._use(buf, off, cnt)
        for o, c in pieces(off, cnt, self.limit):
            self._start((IRECV, NONE, 0, 0, NONE, buf, o, c, source))

    def _start(self, row):
        self.rows.append(row)
        self._pending += 1
        self.nreq = max(self.nreq, self._pending)

    def waitall(self):
        """Complete every started send and receive."""
        if self._pending:
            self.rows.append((WAITALL, NONE, 0, 0, NONE, NONE, 0, 0, NONE))
            self._pending = 0

    def reduce(self, dst, src, left=None):
        """dst = op(dst, src) over ``cnt`` elements; both are (buf, off, cnt).

        With ``left``, dst = op(left, src) instead: ``left`` is a (buf, off) pair, or a
        buffer alone for the same offset as ``dst``.
        """
        if dst[2] != src[2]:
            raise ValueError("reduce: regions differ in length")
        lb, lo = dst[:2] if left is None else left if isinstance(left, tuple) else (left, dst[1])
        if dst[2]:
            self._use(*dst)
            self._use(*src)
            self._use(lb, lo, dst[2])
            self.rows.append((REDUCE, *dst, lb, *src, lo))

    def copy(self, dst, src):
        """dst = src; both are (buf, off, cnt)."""
        if dst[2] != src[2]:
            raise ValueError("copy: regions differ in length")
        if dst[2] and dst[:2] != src[:2]:
            self._use(*dst)
            self._use(*src)
            self.rows.append((COPY, *dst, NONE, *src, NONE))

    def finish(self):
        """The steps as a C-contiguous int64 array of shape (nsteps, 9)."""
        if self._pending:
            raise RuntimeError("schedule ends with requests still pending")
        return np.array(self.rows, dtype=np.int64).reshape(-1, NCOLS)


_ELEMENT_TYPES = {}


def _element_type(size):
    """A committed contiguous MPI type of ``size`` bytes, made once: counts stay in elements."""
    from mpi4py import MPI

    if size not in _ELEMENT_TYPES:
        _ELEMENT_TYPES[size] = MPI.BYTE.Create_contiguous(size).Commit()
    return _ELEMENT_TYPES[size]


def run_python(comm, steps, bufs, dtype_code, op_code, tag, timeout=0, name="schedule"):
    """Execute ``steps`` with mpi4py and NumPy; ``bufs`` are flat uint8 views indexed by ACC/TMP/IN/OUT.

    With ``timeout`` > 0 seconds every wait is polled (``collectives.watchdog``), and a wait
    that makes no progress for that long raises StallError naming ``name``.
    """
    from mpi4py import MPI

    from .kernels import reduce_into
    from .ops import DTYPES
    from .watchdog import watched

    size = np.dtype(DTYPES[dtype_code]).itemsize
    check_counts(steps)
    element = _element_type(size)

    empty = np.empty(0, np.uint8)

    def region(b, off, cnt):
        return bufs[b][off * size:(off + cnt) * size] if cnt else empty

    def message(b, off, cnt):
        return [region(b, off, cnt), cnt, element]

    requests, peers = [], []

    def start(recv, b, off, cnt, peer):
        call = comm.Irecv if recv else comm.Isend
        requests.append(call(message(b, off, cnt), peer, tag))
        peers.append((peer, "receive" if recv else "send"))

    def wait(step, first=0):
        if timeout:
            # Given all pending requests, a stall cancels the earlier ones too.
            watched(requests, timeout, peers, name, step, comm.Get_rank(),
                    lambda: MPI.Request.Testall(requests[first:]))
        else:
            MPI.Request.Waitall(requests)
        del requests[first:], peers[first:]

    for i, (kind, ab, ao, ac, ap, bb, bo, bc, bp) in enumerate(steps.tolist()):
        if kind == SENDRECV and timeout:
            first = len(requests)
            if bp != NONE:
                start(True, bb, bo, bc, bp)
            if ap != NONE:
                start(False, ab, ao, ac, ap)
            wait(i, first)
        elif kind == SENDRECV:
            if ap == NONE:
                comm.Recv(message(bb, bo, bc), bp, tag)
            elif bp == NONE:
                comm.Send(message(ab, ao, ac), ap, tag)
            else:
                comm.Sendrecv(message(ab, ao, ac), ap, tag, message(bb, bo, bc), bp, tag)
        elif kind == REDUCE:
            # As in the native executor, a combine's and a copy's length is the row's first count.
            dst = region(ab, ao, ac)
            if (ap, bp) != (ab, ao):
                dst[:] = region(ap, bp, ac)
            reduce_into(dst, region(bb, bo, ac), dtype_code, op_code)
        elif kind == COPY:
            region(ab, ao, ac)[:] = region(bb, bo, ac)
        elif kind == ISEND:
            start(False, ab, ao, ac, ap)
        elif kind == IRECV:
            start(True, bb, bo, bc, bp)
        else:
            wait(i)
