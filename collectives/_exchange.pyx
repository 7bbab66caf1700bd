# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The checked exchange in C: the same messages as ``collectives.exchange.exchange``, its
NumPy twin, which documents the pattern, the fold and the fused collectives it carries.

``settle`` lets no message of a call that disagreed outlive it, on every rank of the call.
"""
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._csrc cimport ck_reduce, ck_itemsize
from collectives._requests cimport (TIMED_OUT, element_type, give_up, monotonic, sched_yield,
                                    start_request, stall_error, wait_requests)
from collectives.exchange import SETTLE_TAG

cdef int _settle_tag = SETTLE_TAG  # the all-reduce's: the schedule that overlaps the exchange


cdef int settle(MPI_Comm comm, int tag, MPI_Request *reqs, const char *is_recv, int nreq,
                MPI_Datatype junk_t, double limit) noexcept nogil:
    """After an exchange that disagreed, on every rank (collectives.agreement's "Overlap"):
    finish this rank's ``nreq`` overlapped requests and let no message of the call outlive it.

    Receives are cancelled (or, if already matched, completed into scratch or an output-only
    buffer).  Then every message arriving on ``tag`` (the all-reduce's: the point-to-point
    primitives' messages on other tags are left alone) is received into scratch (``junk_t``: a
    16-byte type, so any size fits an int count) until this rank's synchronous sends have
    matched, and on through a first barrier: when it completes every rank's sends have
    matched, so no message of this call is left in flight.  A second barrier, with no
    receiving, keeps a rank that left the first from starting its next call while another
    still receives.  MPI's code, or TIMED_OUT after ``limit`` seconds without progress.
    """
    cdef MPI_Request bar = MPI_REQUEST_NULL
    cdef MPI_Message msg
    cdef MPI_Status st
    cdef MPI_Count n
    cdef char *junk
    cdef int i, flag = 0, rc = MPI_SUCCESS, phase = 0
    cdef double since = monotonic()
    for i in range(nreq):
        if is_recv[i] & 1 and reqs[i] != MPI_REQUEST_NULL:
            MPI_Cancel(&reqs[i])
            MPI_Wait(&reqs[i], MPI_STATUS_IGNORE)  # cancelled, or its message (maybe truncated) in
    while phase < 3 and rc == MPI_SUCCESS:
        flag = 0
        if phase < 2:
            rc = MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &msg, &st)
        if rc == MPI_SUCCESS and flag:
            MPI_Get_elements_x(&st, MPI_BYTE, &n)  # MPI-3: Open MPI 5 has no MPI_Get_count_c
            junk = <char *>malloc(16 * (n // 16 + 1))
            if junk == NULL:
                return MPI_ERR_NO_MEM
            rc = MPI_Mrecv(junk, <int>(n // 16 + 1), junk_t, &msg, MPI_STATUS_IGNORE)
            free(junk)
            since = monotonic()
        elif rc == MPI_SUCCESS:
            if phase == 0:
                rc = MPI_Testall(nreq, reqs, &flag, MPI_STATUSES_IGNORE)
            else:
                rc = MPI_Test(&bar, &flag, MPI_STATUS_IGNORE)
            if rc == MPI_SUCCESS and flag:
                phase += 1
                since = monotonic()
                if phase < 3:
                    rc = MPI_Ibarrier(comm, &bar)
            elif monotonic() - since > limit:
                give_up(reqs, nreq, is_recv)
                give_up(&bar, 1, NULL)
                return TIMED_OUT
            else:
                sched_yield()
    return rc


cdef int x_absorb(Exchange *x, Py_ssize_t got, bint final, Py_ssize_t lo, Py_ssize_t n) noexcept nogil:
    """Fold a received message of ``got`` bytes into ours; ``lo``, ``n``: the new ranks whose
    blocks it holds (``n`` 0: original rank ``lo``'s block).  -1 for an operation the kernel
    refuses."""
    cdef int64_t *me = <int64_t *>x.mine
    cdef int64_t *other = <int64_t *>x.theirs
    cdef Py_ssize_t i, m, r, h = 8 * x.nh, size = -1
    cdef char *payload = x.theirs + h
    cdef char *body = x.mine + h
    if got >= h:
        size = other[x.nh - 1]
    if got != h + size:
        x.clash = True  # not a message of the exchange: the sizes of ours always add up
        return 0
    if final:
        memcpy(x.mine, x.theirs, got)
        return 0
    for i in range(x.nh - 1):
        if other[i] != me[i]:
            x.clash = True
        if other[i] > me[i]:
            me[i] = other[i]
    if x.clash or size != x.nbytes:
        return 0  # a size differing from ours comes with a differing header (counts are in it)
    if x.kind == X_REDUCE:
        return ck_reduce(body, payload, <size_t>(x.nbytes // ck_itemsize(x.dtype)), x.dtype, x.op)
    if x.kind == X_BCAST and me[x.nh - 1] == 0:
        memcpy(body, payload, x.nbytes)
        me[x.nh - 1] = x.nbytes
    elif x.kind == X_GATHER:
        if n == 0:
            memcpy(body + lo * x.block, payload + lo * x.block, x.block)
        for m in range(lo, lo + n):
            r = 2 * m if m < x.rem else m + x.rem
            memcpy(body + r * x.block, payload + r * x.block, x.block * (2 if m < x.rem else 1))
    return 0


cdef int x_wait(Exchange *x, MPI_Request *reqs, MPI_Status *sts) noexcept nogil:
    """wait_requests over the trade's requests; on expiry, give them all up (so MPI writes
    into no buffer later)."""
    cdef int rc = wait_requests(x.nreq, reqs, x.is_recv, &x.w, sts)
    if rc == TIMED_OUT:
        give_up(reqs, x.nreq, x.is_recv)
    return rc


cdef inline Py_ssize_t x_piece(const Exchange *x, Py_ssize_t at, Py_ssize_t total) noexcept nogil:
    """The length of the piece of a ``total``-byte message that starts at byte ``at``."""
    if x.piece > 0 and total - at > x.piece:
        return x.piece
    return total - at


cdef int x_post(Exchange *x, int source, Py_ssize_t at, Py_ssize_t total, bint whole,
                MPI_Request *reqs) noexcept nogil:
    """Post the receives of the pieces of a ``total``-byte message from ``source`` from byte
    ``at`` on; ``whole``: each with room for a whole piece (within ``theirs``), as a sender with
    a longer message sends it."""
    cdef int rc = MPI_SUCCESS
    cdef Py_ssize_t n
    while rc == MPI_SUCCESS and at < total:
        n = x_piece(x, at, x.cap if whole else total)
        rc = start_request(True, x.theirs + at, <int>n, MPI_BYTE, source, x.tag, x.comm, reqs, x.is_recv,
                           &x.w, &x.nreq)
        at += x.piece
    return rc


cdef int x_rest(Exchange *x, int source, MPI_Request *reqs, MPI_Status *sts, int first, int last,
                Py_ssize_t *got) noexcept nogil:
    """With the first piece (request ``first``) of a message from ``source`` in, ``got`` its
    length: cancel the pieces posted after it (``first`` + 1 to ``last``) that its header's
    length leaves out, and post those it has beyond them."""
    cdef int i, count = 0
    cdef Py_ssize_t total, h = 8 * x.nh
    MPI_Get_count(&sts[first], MPI_BYTE, &count)
    got[0] = count
    if x.piece <= 0:
        return MPI_SUCCESS
    total = h + (<int64_t *>x.theirs)[x.nh - 1] if count == x.piece and count >= h else count
    if total > x.cap or total < count:
        total = count  # not a message of the exchange (x_absorb calls it a clash)
    for i in range(first + 1, last):
        if (i - first) * x.piece >= total:
            MPI_Cancel(&reqs[i])
            x.is_recv[i] = 0  # received nothing: not counted
    return x_post(x, source, (last - first) * x.piece, total, False, reqs)


cdef int x_trade(Exchange *x, int to, bint send_first, int source, Py_ssize_t *got) noexcept nogil:
    """Send our message to ``to`` and receive one from ``source`` into ``theirs`` (-1: none),
    its length into ``got``, as requests polled to completion (sooner than MPICH's blocking
    calls for small messages) or until the watchdog's limit (TIMED_OUT); ``send_first``: the
    send completes before the receive is posted.

    A message longer than ``x.piece`` bytes goes as pieces of that many, all in flight at once,
    so that each stays within MPI's eager limit (collectives.eager).  The receiver posts the
    pieces of a message as long as its own (except in a broadcast, where a rank that holds no
    data yet sends the header alone), waits for the first, which holds the header, and then
    cancels the pieces the sender's length leaves out or posts those it adds: it receives
    exactly what was sent, and no piece is left behind, between ranks that disagree too.  A
    cancelled receive can match nothing else: a partner sends one message per exchange, and a
    sender whose length differs disagrees, so it sends its next only after ``settle``.
    """
    cdef MPI_Request reqs[2 * X_PIECES]
    cdef MPI_Status sts[2 * X_PIECES]
    cdef Py_ssize_t total, mine, at, h = 8 * x.nh
    cdef int rc = MPI_SUCCESS, i, first = 0, last = 0, count = 0, counted
    cdef bint staged = False
    x.round += 1
    x.nreq = 0
    got[0] = 0
    mine = h + (<int64_t *>x.mine)[x.nh - 1]
    if to >= 0:
        at = 0
        while rc == MPI_SUCCESS and (at == 0 or at < mine):
            count = <int>x_piece(x, at, mine)
            rc = start_request(False, x.mine + at, count, MPI_BYTE, to, x.tag, x.comm, reqs, x.is_recv,
                               &x.w, &x.nreq)
            at += count
        if rc == MPI_SUCCESS and send_first:
            rc = x_wait(x, reqs, sts)
            if rc == MPI_SUCCESS:
                x.nreq = 0
    if rc == MPI_SUCCESS and source >= 0:
        first = x.nreq
        rc = start_request(True, x.theirs, <int>(x.piece if x.piece > 0 else x.cap), MPI_BYTE, source,
                           x.tag, x.comm, reqs, x.is_recv, &x.w, &x.nreq)
        # A message of ours longer than a piece: its pieces are posted, then held to the
        # sender's length once the first is in.  Otherwise one wait, as for a whole message.
        staged = rc == MPI_SUCCESS and x.piece > 0 and x.kind != X_BCAST and mine > x.piece
        if staged:
            rc = x_post(x, source, x.piece, mine, True, reqs)
            last = x.nreq
            if rc == MPI_SUCCESS:
                rc = wait_requests(first + 1, reqs, x.is_recv, &x.w, sts)
            if rc == MPI_SUCCESS:
                rc = x_rest(x, source, reqs, sts, first, last, got)
        if rc != MPI_SUCCESS and x.nreq:
            give_up(reqs, x.nreq, x.is_recv)
    elif rc != MPI_SUCCESS and x.nreq:
        give_up(reqs, x.nreq, x.is_recv)
    if rc == MPI_SUCCESS and x.nreq:
        rc = x_wait(x, reqs, sts)
        counted = first + 1
        if rc == MPI_SUCCESS and source >= 0 and not staged:
            # One receive was posted: the whole message, or the first piece of a longer one.
            counted = x.nreq
            rc = x_rest(x, source, reqs, sts, first, first + 1, got)
            if rc == MPI_SUCCESS and x.nreq > counted:
                rc = x_wait(x, reqs, sts)
            elif rc != MPI_SUCCESS and x.nreq:
                give_up(reqs, x.nreq, x.is_recv)
        if rc == MPI_SUCCESS and source >= 0:
            for i in range(counted, x.nreq):
                if x.is_recv[i] & 1:
                    MPI_Get_count(&sts[i], MPI_BYTE, &count)
                    got[0] += count
    return rc


cdef int x_run(Exchange *x, int rank, int p) noexcept nogil:
    """The exchange between the ranks; MPI's error code, or -1 from the reduction kernel."""
    cdef Py_ssize_t got
    cdef int64_t *me = <int64_t *>x.mine
    cdef int p2 = 1, rc = MPI_SUCCESS, new, other, partner, mask = 1
    while p2 * 2 <= p:
        p2 *= 2
    x.rem = p - p2
    x.clash = False
    x.round = -1
    x.w.peer = x.peer  # set on entry, not in each of the two places that make an Exchange
    if rank < 2 * x.rem and rank % 2 == 0:
        rc = x_trade(x, rank + 1, True, rank + 1, &got)
        if rc == MPI_SUCCESS:
            rc = x_absorb(x, got, True, 0, 0)
        return rc
    if rank < 2 * x.rem:
        rc = x_trade(x, -1, False, rank - 1, &got)
        if rc == MPI_SUCCESS:
            rc = x_absorb(x, got, False, rank - 1, 0)
        new = rank // 2
    else:
        new = rank - x.rem
    while mask < p2 and rc == MPI_SUCCESS:
        other = new ^ mask
        partner = 2 * other + 1 if other < x.rem else other + x.rem
        rc = x_trade(x, partner, False, partner, &got)
        if rc == MPI_SUCCESS:
            rc = x_absorb(x, got, False, other & ~(mask - 1), mask)
        mask <<= 1
    if rank < 2 * x.rem and rc == MPI_SUCCESS:
        rc = x_trade(x, rank - 1, False, -1, &got)
    return rc


cdef bint x_agrees(const Exchange *x) noexcept nogil:
    """Whether the folded vector says every rank passed the same fields and none an error: it
    is [error, fields, -fields] (agreement.agree), folded with MAX."""
    cdef const int64_t *v = <const int64_t *>x.mine
    cdef Py_ssize_t i, half = (x.nh - 2) // 2
    if v[0]:
        return False
    for i in range(half):
        if v[1 + i] != -v[1 + half + i]:
            return False
    return True


cdef int x_raise(Exchange *x, int rc, int rank, object collective, object algorithm) except -1:
    """Raise for the exchange's or ``settle``'s failure code ``rc``: TypeError, StallError
    (naming ``collective`` and ``algorithm``) or MPI.Exception."""
    if rc == -1:
        raise TypeError(f"op code {x.op} is not defined on dtype code {x.dtype}")
    if rc == TIMED_OUT:
        raise stall_error(collective, algorithm, x.round, rank, &x.w, x.is_recv, x.nreq)
    raise pyMPI.Exception(rc)


cdef int x_checked(Exchange *x, int rank, int p, object collective, object algorithm=None) except -1:
    """x_run without the GIL, then ``settle`` when it disagreed; TypeError, StallError (naming
    ``collective`` and ``algorithm``) or MPI.Exception when it fails."""
    cdef int rc
    cdef MPI_Datatype junk_t
    element_type(16, &junk_t)
    with nogil:
        rc = x_run(x, rank, p)
        if rc == MPI_SUCCESS and not x_agrees(x):
            x.nreq = 0
            rc = settle(x.comm, _settle_tag, NULL, NULL, 0, junk_t, x.w.limit)
    if rc != MPI_SUCCESS:
        x_raise(x, rc, rank, collective, algorithm)
    return 0
