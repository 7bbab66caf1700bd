# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""MPI requests as every wait of the native side sees them.

Every wait of a schedule or of the checked exchange polls ``MPI_Testall`` (``poll_all``): it
spins, then yields the core, then sleeps with a doubling pause, so a long stall costs no CPU,
and it gives up after the stall watchdog's limit (``collectives.watchdog``), returning
TIMED_OUT.  A receive given up is cancelled, and any request that still has not completed
is released (``give_up``), so that MPI writes into no buffer later.  Unwatched, the waits poll too, with a
limit never reached: ``MPI_Testall`` in a loop answers a small message sooner than MPICH's
blocking calls.
"""
from posix.time cimport clock_gettime, nanosleep, timespec, CLOCK_MONOTONIC
from mpi4py.libmpi cimport *

from collectives._timeline cimport WAIT, put

from collectives.watchdog import GRACE_S, MAX_PAUSE_S, SPIN_S, YIELD_S, StallError

cdef double _spin_s = SPIN_S, _yield_s = YIELD_S, _max_pause_s = MAX_PAUSE_S, _grace_s = GRACE_S
cdef MPI_Datatype _element_type[17]
cdef bint _have_type[17]


cdef double monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + 1e-9 * ts.tv_nsec


cdef int poll_all(int n, MPI_Request *reqs, double limit, double *waited,
                  MPI_Status *statuses=MPI_STATUSES_IGNORE) noexcept nogil:
    """MPI_Testall until done (its return code) or ``limit`` seconds pass (TIMED_OUT): spin,
    then yield the core, then sleep with a doubling pause, so a long stall costs no CPU."""
    cdef double start = monotonic(), pause = 1e-6
    cdef int rc, flag = 0, i
    cdef timespec ts
    cdef MPI_Status local[16]
    if statuses == MPI_STATUSES_IGNORE and n <= 16:
        statuses = local  # to find the request's own error behind MPI_ERR_IN_STATUS
    while True:
        rc = MPI_Testall(n, reqs, &flag, statuses)
        if rc == MPI_ERR_IN_STATUS and statuses != MPI_STATUSES_IGNORE:
            for i in range(n):
                if statuses[i].MPI_ERROR != MPI_SUCCESS and statuses[i].MPI_ERROR != MPI_ERR_PENDING:
                    return statuses[i].MPI_ERROR
        if rc != MPI_SUCCESS or flag:
            return rc
        waited[0] = monotonic() - start
        if waited[0] > limit:
            return TIMED_OUT
        if waited[0] > _yield_s:
            ts.tv_sec = 0
            ts.tv_nsec = <long>(pause * 1e9)
            nanosleep(&ts, NULL)
            pause = pause * 2 if pause * 2 < _max_pause_s else _max_pause_s
        elif waited[0] > _spin_s:
            sched_yield()


cdef int wait_requests(int n, MPI_Request *reqs, char *is_recv, Watch *w,
                       MPI_Status *statuses=MPI_STATUSES_IGNORE) noexcept nogil:
    """Every wait of a schedule or the exchange, polled up to ``w.limit``; on expiry, each
    request still pending gets bit 2 in ``is_recv`` (its peer is in ``w.peer``)."""
    cdef int rc, i, flag, peer = -1
    cdef double start = monotonic() if w.ring != NULL else 0
    rc = poll_all(n, reqs, w.limit, &w.waited, statuses)
    if w.ring != NULL and n:
        # The rank waited for: a receive's peer, else a send's.
        for i in range(n):
            if is_recv[i] & 1:
                peer = w.peer[i]
                break
        put(w.ring, start, monotonic(), WAIT, w.code, -1, 0, 0, peer if peer >= 0 else w.peer[0])
    if rc == TIMED_OUT:
        for i in range(n):
            flag = 1
            if reqs[i] != MPI_REQUEST_NULL:
                MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE)
            if not flag:
                is_recv[i] |= 2
    return rc


cdef void give_up(MPI_Request *reqs, int nreq, const char *is_recv) noexcept nogil:
    """After expiry: cancel every receive (``is_recv[i] & 1``; NULL: none is), give the
    requests GRACE_S to complete, then release the ones that did not: MPI writes into no
    buffer later.  Sends are not cancelled (MPI-4 deprecates it, and MPICH over UCX crashes in
    it); a send released unfinished only reads its buffer."""
    cdef int i
    cdef double waited
    for i in range(nreq):
        if is_recv != NULL and is_recv[i] & 1 and reqs[i] != MPI_REQUEST_NULL:
            MPI_Cancel(&reqs[i])
    if poll_all(nreq, reqs, _grace_s, &waited) == TIMED_OUT:
        for i in range(nreq):
            if reqs[i] != MPI_REQUEST_NULL:
                MPI_Request_free(&reqs[i])


cdef int start_request(bint recv, char *at, int count, MPI_Datatype t, int peer, int tag,
                       MPI_Comm comm, MPI_Request *reqs, char *is_recv, Watch *w,
                       int *nreq, bint sync=False) noexcept nogil:
    """MPI_Irecv or MPI_Isend (MPI_Issend when ``sync``) as request ``nreq`` (then counted),
    noting its peer."""
    cdef int rc
    if recv:
        rc = MPI_Irecv(at, count, t, peer, tag, comm, &reqs[nreq[0]])
    elif sync:
        rc = MPI_Issend(at, count, t, peer, tag, comm, &reqs[nreq[0]])
    else:
        rc = MPI_Isend(at, count, t, peer, tag, comm, &reqs[nreq[0]])
    if rc == MPI_SUCCESS:
        is_recv[nreq[0]] = recv
        w.peer[nreq[0]] = peer
        nreq[0] += 1
    return rc


cdef void abandon(MPI_Request *reqs, const char *is_recv, int nreq) noexcept nogil:
    """Finish every started request after a failed step, so MPI writes into no buffer later:
    receives are cancelled then waited for, sends waited for."""
    cdef int i
    for i in range(nreq):
        if is_recv[i] and reqs[i] != MPI_REQUEST_NULL:
            MPI_Cancel(&reqs[i])
    for i in range(nreq):
        if reqs[i] != MPI_REQUEST_NULL:
            MPI_Wait(&reqs[i], MPI_STATUS_IGNORE)


cdef int element_type(size_t size, MPI_Datatype *out) except -1:
    """A committed contiguous type of ``size`` bytes, made once per size."""
    cdef MPI_Datatype t
    if not _have_type[size]:
        if MPI_Type_contiguous(<int>size, MPI_BYTE, &t) or MPI_Type_commit(&t):
            raise RuntimeError(f"collectives: cannot make a {size}-byte MPI datatype")
        _element_type[size] = t
        _have_type[size] = True
    out[0] = _element_type[size]
    return 0


cdef object label(object collective, object algorithm):
    """How an error names the collective: with its algorithm when given."""
    return collective if algorithm is None else f"{collective} ({algorithm})"


cdef object stall_error(object collective, object algorithm, Py_ssize_t step, int rank,
                        const Watch *w, const char *is_recv, int n):
    """The StallError of an expired wait: the peers and directions of the first ``n``
    requests that ``wait_requests`` marked late."""
    return StallError(label(collective, algorithm), step, rank,
                      [(w.peer[i], "receive" if is_recv[i] & 1 else "send")
                       for i in range(n) if is_recv[i] & 2], w.waited)
