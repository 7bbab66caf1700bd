# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native schedule executor: runs a collectives.schedule step array on mpi4py's C-level API.

The whole schedule runs inside one ``nogil`` block, so a collective costs one Python call
however many steps it has, and other Python threads (the progress thread of the
nonblocking forms, the caller's computation) run meanwhile.  Every wait goes through
``collectives._requests``; a failed step leaves no request open.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE
from libc.limits cimport INT_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from mpi4py cimport MPI
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._csrc cimport ck_reduce, ck_itemsize
from collectives._exchange cimport settle, x_agrees, x_raise, x_run
from collectives._requests cimport (NEVER_S, TIMED_OUT, Watch, abandon, element_type, give_up, label,
                                    stall_error, start_request, wait_requests)
from collectives import constants as K

# The step kinds, a row's width and the buffers, as collectives.constants declares them.
cdef int SENDRECV = K.SENDRECV, REDUCE = K.REDUCE, COPY = K.COPY, ISEND = K.ISEND, IRECV = K.IRECV
cdef int NONE = K.NONE, NCOLS = K.NCOLS, NBUFS = K.NBUFS, IN_BUF = K.IN
if NBUFS > MAX_BUFS:
    raise ImportError(f"collectives._executor: room for {MAX_BUFS} buffers, {NBUFS} declared")

# dst = op(left, src) runs as copy-then-reduce over blocks this small, so the destination
# block is still in L1 when it is reduced: one pass over memory, like a 3-operand kernel.
DEF FUSE_BYTES = 16384
DEF LOCAL_WORDS = 32  # run_checked's stack room: 16 requests with their flags and peers
cdef char _empty[16]


cdef int reduce_from(char *dst, const char *left, const char *src, size_t n, size_t size,
                     int dtype, int op) noexcept nogil:
    """dst = op(left, src), blocked so each block of dst is reduced while cached."""
    cdef size_t step = FUSE_BYTES // size, at, m
    cdef int rc = 0
    if dst == left:
        return ck_reduce(dst, src, n, dtype, op)
    at = 0
    while at < n and rc == 0:
        m = n - at if n - at < step else step
        memcpy(dst + at * size, left + at * size, m * size)
        rc = ck_reduce(dst + at * size, src + at * size, m, dtype, op)
        at += m
    return rc


cdef int run_steps(MPI_Comm comm, const int64_t *steps, Py_ssize_t begin, Py_ssize_t end,
                   char **buf, size_t size, MPI_Datatype t, int dtype, int op, int tag,
                   MPI_Request *reqs, char *is_recv, Py_ssize_t *failed, Watch *w,
                   int *nreq, bint sync=False) noexcept nogil:
    """Run rows ``begin`` to ``end`` after the ``nreq`` requests already started (``nreq`` then
    counts those still pending); on an error return, ``failed`` holds the step and no request
    is left open.

    A send or receive row runs as requests after the pending ones, so that every wait is
    ``wait_requests``; on TIMED_OUT ``nreq`` says how many requests the marks in ``is_recv``
    cover.  ``sync``: sends are synchronous (the overlapped all-reduce's leading rows, see ``settle``).
    """
    cdef Py_ssize_t i
    cdef const int64_t *r
    cdef int rc = MPI_SUCCESS, first
    for i in range(begin, end):
        r = steps + i * NCOLS
        if r[0] != REDUCE and r[0] != COPY and (r[3] > INT_MAX or r[7] > INT_MAX):
            rc = MPI_ERR_COUNT  # never narrow a count to int: schedule.py splits such rows
        elif r[0] == SENDRECV:
            first = nreq[0]
            if r[8] != NONE:
                rc = start_request(True, buf[r[5]] + r[6] * size, <int>r[7], t, <int>r[8], tag,
                                   comm, reqs, is_recv, w, nreq)
            if rc == MPI_SUCCESS and r[4] != NONE:
                rc = start_request(False, buf[r[1]] + r[2] * size, <int>r[3], t, <int>r[4], tag,
                                   comm, reqs, is_recv, w, nreq, sync)
            if rc == MPI_SUCCESS:
                rc = wait_requests(nreq[0] - first, reqs + first, is_recv + first, w)
                if rc == MPI_SUCCESS:
                    nreq[0] = first
        elif r[0] == REDUCE:
            rc = reduce_from(buf[r[1]] + r[2] * size, buf[r[4]] + r[8] * size,
                             buf[r[5]] + r[6] * size, <size_t>r[3], size, dtype, op)
        elif r[0] == COPY:
            if buf[r[1]] + r[2] * size != buf[r[5]] + r[6] * size:
                    memcpy(buf[r[1]] + r[2] * size, buf[r[5]] + r[6] * size, <size_t>r[3] * size)
        elif r[0] == ISEND:
            rc = start_request(False, buf[r[1]] + r[2] * size, <int>r[3], t, <int>r[4], tag,
                               comm, reqs, is_recv, w, nreq, sync)
        elif r[0] == IRECV:
            rc = start_request(True, buf[r[5]] + r[6] * size, <int>r[7], t, <int>r[8], tag,
                               comm, reqs, is_recv, w, nreq)
        else:
            rc = wait_requests(nreq[0], reqs, is_recv, w)
            if rc == MPI_SUCCESS:
                nreq[0] = 0
        if rc != MPI_SUCCESS:
            failed[0] = i
            if rc == TIMED_OUT:
                give_up(reqs, nreq[0], is_recv)
            elif rc != -1:
                abandon(reqs, is_recv, nreq[0])
            return rc
    return MPI_SUCCESS


class ScheduleError(pyMPI.Exception):
    """A step of a schedule failed; every request it had started was finished or cancelled."""

    def __init__(self, ierr, collective, step, rank):
        super().__init__(ierr)
        self.collective, self.step, self.rank = collective, step, rank

    def __str__(self):
        return (f"{self.collective}: step {self.step} failed on rank {self.rank}: "
                f"{pyMPI.Get_error_string(self.Get_error_code())}")


cdef int run_checked(MPI_Comm comm, const int64_t *steps, Py_ssize_t nsteps, char **buf, int dtype,
                     int op, int tag, Py_ssize_t nreq, object collective, double limit=0,
                     object algorithm=None, Exchange *x=NULL, Py_ssize_t lead=0, Ring *ring=NULL,
                     int code=0) except -1:
    """run_steps without the GIL, watched when ``limit`` > 0 seconds (else polled without a
    limit); TypeError, ScheduleError or StallError when a step fails, naming ``collective``
    (and ``algorithm`` when given).

    With ``x`` (collectives.agreement's "Overlap"): the first ``lead`` rows, sends and receives
    into buffers that carry no input, start with synchronous sends; then x's exchange runs
    and the schedule goes on only if it agreed.  1 when it disagreed (``settle`` has run, no
    request is left), else 0.  ``ring``: the timeline's, where each wait is recorded as one of
    collective ``code``.
    """
    cdef size_t size = ck_itemsize(dtype)
    cdef MPI_Request *reqs = NULL
    # Most schedules start a few requests at a time: those fit here, and a call mallocs nothing.
    cdef int64_t local[LOCAL_WORDS]
    cdef size_t nbytes
    cdef MPI_Datatype t, junk_t
    cdef Py_ssize_t failed = -1
    cdef int rc = MPI_SUCCESS, xrc = MPI_SUCCESS, rank = 0, p = 1, nstarted = 0
    cdef bint agreed = True
    cdef Watch w
    cdef char *is_recv
    # Unwatched, the waits poll too, with a limit never reached: MPI_Testall in a loop answers
    # a small message sooner than MPICH's blocking calls (bench.watchdog: 2.0 against 3.0 us
    # for an 8 B all-reduce at np=2).
    if limit <= 0:
        limit = NEVER_S
    w.limit = limit
    w.waited = 0
    w.ring, w.code = ring, code
    nreq += 2  # room for a send or receive row's own requests
    element_type(size, &t)
    if x != NULL:
        element_type(16, &junk_t)
        MPI_Comm_rank(comm, &rank)
        MPI_Comm_size(comm, &p)
    nbytes = nreq * (sizeof(MPI_Request) + 1 + sizeof(int))
    if nbytes > sizeof(local):
        reqs = <MPI_Request *>malloc(nbytes)
        if reqs == NULL:
            raise MemoryError()
    else:
        reqs = <MPI_Request *>local
    w.peer = <int *>(reqs + nreq)
    is_recv = <char *>(w.peer + nreq)
    try:
        with nogil:
            if x != NULL:
                rc = run_steps(comm, steps, 0, lead, buf, size, t, dtype, op, tag, reqs,
                               is_recv, &failed, &w, &nstarted, True)
                if rc == MPI_SUCCESS:
                    xrc = x_run(x, rank, p)
                    if xrc != MPI_SUCCESS:
                        give_up(reqs, nstarted, is_recv)
                    elif not x_agrees(x):
                        agreed = False
                        x.nreq = 0
                        xrc = settle(comm, tag, reqs, is_recv, nstarted, junk_t, x.w.limit)
            if rc == MPI_SUCCESS and xrc == MPI_SUCCESS and agreed:
                rc = run_steps(comm, steps, lead, nsteps, buf, size, t, dtype, op, tag, reqs,
                               is_recv, &failed, &w, &nstarted)
        if xrc != MPI_SUCCESS:
            x_raise(x, xrc, rank, collective, "argument check")
        if rc == -1:
            raise TypeError(f"op code {op} is not defined on dtype code {dtype}")
        if rc != MPI_SUCCESS:
            MPI_Comm_rank(comm, &rank)
            if rc == TIMED_OUT:
                raise stall_error(collective, algorithm, failed, rank, &w, is_recv, nstarted)
            raise ScheduleError(rc, label(collective, algorithm), failed, rank)
    finally:
        if reqs != <MPI_Request *>local:
            free(reqs)
    return 0 if agreed else 1


def execute(MPI.Comm comm, const int64_t[:, ::1] steps, acc, tmp, inp, int dtype, int op,
            int tag, Py_ssize_t nreq, collective="schedule", double timeout=0, out=None):
    """Run ``steps`` on ``comm`` over the ACC, TMP, IN and OUT buffers (each may be None);
    ``timeout`` > 0 seconds: StallError when a wait makes no progress for that long."""
    cdef Py_buffer views[MAX_BUFS]
    cdef char *buf[MAX_BUFS]
    cdef bint held[MAX_BUFS]
    cdef int i
    if ck_itemsize(dtype) == 0 or steps.shape[1] != NCOLS:
        raise ValueError("execute: bad dtype code or schedule shape")
    objs = (acc, tmp, inp, out)
    for i in range(NBUFS):
        held[i] = False
        buf[i] = _empty
    try:
        for i in range(NBUFS):
            if objs[i] is not None:
                PyObject_GetBuffer(objs[i], &views[i],
                                   PyBUF_ANY_CONTIGUOUS | (PyBUF_WRITABLE if i != IN_BUF else 0))
                held[i] = True
                buf[i] = <char *>views[i].buf
        run_checked(comm.ob_mpi, &steps[0, 0] if steps.shape[0] else NULL, steps.shape[0], buf,
                    dtype, op, tag, nreq, collective, timeout)
    finally:
        for i in range(NBUFS):
            if held[i]:
                PyBuffer_Release(&views[i])
