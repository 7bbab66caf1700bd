# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native schedule executor: runs a collectives.schedule step array on mpi4py's C-level API.

The whole schedule runs inside one ``nogil`` block, so a collective costs one Python call
however many steps it has, and other Python threads (the progress thread of the
nonblocking forms, the caller's computation) run meanwhile.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
cimport numpy as cnp
import numpy as np
from mpi4py cimport MPI
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._csrc cimport ck_reduce, ck_itemsize

# Must match collectives/schedule.py.
DEF SENDRECV = 0
DEF REDUCE = 1
DEF COPY = 2
DEF ISEND = 3
DEF IRECV = 4
DEF WAITALL = 5
DEF NONE = -1
DEF NCOLS = 9
DEF NBUFS = 3
# dst = op(left, src) runs as copy-then-reduce over blocks this small, so the destination
# block is still in L1 when it is reduced: one pass over memory, like a 3-operand kernel.
DEF FUSE_BYTES = 16384

cdef MPI_Datatype _element_type[17]
cdef bint _have_type[17]
cdef char _empty[16]
cnp.import_array()


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


cdef int run_steps(MPI_Comm comm, const int64_t *steps, Py_ssize_t nsteps, char **buf,
                   size_t size, MPI_Datatype t, int dtype, int op, int tag,
                   MPI_Request *reqs) noexcept nogil:
    cdef Py_ssize_t i
    cdef const int64_t *r
    cdef int rc = MPI_SUCCESS, nreq = 0
    for i in range(nsteps):
        r = steps + i * NCOLS
        if r[0] != REDUCE and r[0] != COPY and (r[3] > INT_MAX or r[7] > INT_MAX):
            return MPI_ERR_COUNT  # never narrow a count to int: schedule.py splits such rows
        if r[0] == SENDRECV:
            if r[4] == NONE:
                rc = MPI_Recv(buf[r[5]] + r[6] * size, <int>r[7], t, <int>r[8], tag, comm,
                              MPI_STATUS_IGNORE)
            elif r[8] == NONE:
                rc = MPI_Send(buf[r[1]] + r[2] * size, <int>r[3], t, <int>r[4], tag, comm)
            else:
                rc = MPI_Sendrecv(buf[r[1]] + r[2] * size, <int>r[3], t, <int>r[4], tag,
                                  buf[r[5]] + r[6] * size, <int>r[7], t, <int>r[8], tag, comm,
                                  MPI_STATUS_IGNORE)
        elif r[0] == REDUCE:
            rc = reduce_from(buf[r[1]] + r[2] * size,
                             buf[r[4] if r[4] != NONE else r[1]] + r[2] * size,
                             buf[r[5]] + r[6] * size, <size_t>r[3], size, dtype, op)
        elif r[0] == COPY:
            if buf[r[1]] + r[2] * size != buf[r[5]] + r[6] * size:
                    memcpy(buf[r[1]] + r[2] * size, buf[r[5]] + r[6] * size, <size_t>r[3] * size)
        elif r[0] == ISEND:
            rc = MPI_Isend(buf[r[1]] + r[2] * size, <int>r[3], t, <int>r[4], tag, comm, &reqs[nreq])
            nreq += 1
        elif r[0] == IRECV:
            rc = MPI_Irecv(buf[r[5]] + r[6] * size, <int>r[7], t, <int>r[8], tag, comm, &reqs[nreq])
            nreq += 1
        else:
            rc = MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE)
            nreq = 0
        if rc != MPI_SUCCESS:
            return rc
    return MPI_SUCCESS


def execute(MPI.Comm comm, const int64_t[:, ::1] steps, acc, tmp, inp, int dtype, int op,
            int tag, Py_ssize_t nreq):
    """Run ``steps`` on ``comm`` over the ACC, TMP and IN buffers (each may be None)."""
    cdef Py_buffer views[NBUFS]
    cdef char *buf[NBUFS]
    cdef bint held[NBUFS]
    cdef int i, rc = MPI_SUCCESS
    cdef size_t size = ck_itemsize(dtype)
    cdef MPI_Request *reqs = NULL
    cdef MPI_Datatype t
    if size == 0 or steps.shape[1] != NCOLS:
        raise ValueError("execute: bad dtype code or schedule shape")
    element_type(size, &t)
    objs = (acc, tmp, inp)
    for i in range(NBUFS):
        held[i] = False
        buf[i] = _empty
    try:
        for i in range(NBUFS):
            if objs[i] is not None:
                PyObject_GetBuffer(objs[i], &views[i],
                                   PyBUF_ANY_CONTIGUOUS | (PyBUF_WRITABLE if i < 2 else 0))
                held[i] = True
                buf[i] = <char *>views[i].buf
        if nreq:
            reqs = <MPI_Request *>malloc(nreq * sizeof(MPI_Request))
            if reqs == NULL:
                raise MemoryError()
        with nogil:
            rc = run_steps(comm.ob_mpi, &steps[0, 0] if steps.shape[0] else NULL, steps.shape[0],
                           buf, size, t, dtype, op, tag, reqs)
    finally:
        free(reqs)
        for i in range(NBUFS):
            if held[i]:
                PyBuffer_Release(&views[i])
    if rc == -1:
        raise TypeError(f"op code {op} is not defined on dtype code {dtype}")
    if rc != MPI_SUCCESS:
        raise pyMPI.Exception(rc)


cdef class _Plan:
    """A cached schedule with everything the fast path needs, resolved once."""
    cdef object steps
    cdef const int64_t *rows
    cdef Py_ssize_t nsteps, nreq, tmp_bytes
    cdef int dtype, op
    cdef size_t size
    cdef bint reads_in
    cdef object name


cdef class AllreduceFast:
    """Allreduce of C-contiguous NumPy arrays with predefined ops, with no Python per step.

    ``prepare(n, dtype, op)`` (Python, run once per size, dtype and op) chooses the algorithm
    and returns (steps, dtype_code, op_code, tmp_bytes, nreq, reads_in, name); the call costs
    a dictionary look-up and one ``nogil`` run of the schedule.  Anything else (other buffer
    kinds, per-call algorithms, pending nonblocking work) returns False for the general path.
    """
    cdef MPI.Comm comm
    cdef object owner, prepare, ops
    cdef dict plans
    cdef cnp.ndarray tmp
    cdef int tag

    def __init__(self, MPI.Comm comm, owner, prepare, int tag):
        self.comm = comm
        self.owner = owner
        self.prepare = prepare
        self.tag = tag
        self.plans = {}
        self.ops = (pyMPI.SUM, pyMPI.PROD, pyMPI.MIN, pyMPI.MAX, pyMPI.LAND, pyMPI.LOR,
                    pyMPI.LXOR, pyMPI.BAND, pyMPI.BOR, pyMPI.BXOR)
        self.tmp = np.zeros(64, np.uint8)

    cdef _Plan plan(self, Py_ssize_t n, object dtype, object op, long key):
        cdef _Plan pl
        prepared = self.prepare(n, dtype, op)
        if prepared is None:
            return None
        pl = _Plan()
        steps, pl.dtype, pl.op, pl.tmp_bytes, pl.nreq, pl.reads_in, pl.name = prepared
        pl.steps = np.ascontiguousarray(steps, dtype=np.int64)
        pl.nsteps = pl.steps.shape[0]
        pl.rows = <const int64_t *>cnp.PyArray_DATA(pl.steps)
        pl.size = ck_itemsize(pl.dtype)
        if pl.tmp_bytes > cnp.PyArray_NBYTES(self.tmp):
            self.tmp = np.zeros(pl.tmp_bytes, np.uint8)
        self.plans[key] = pl
        return pl

    def __call__(self, sendbuf, recvbuf, op):
        """Run the all-reduce and return True, or return False to leave it to the general path."""
        cdef cnp.ndarray send, recv
        cdef Py_ssize_t n, opc
        cdef long key
        cdef _Plan pl
        cdef char *buf[NBUFS]
        cdef MPI_Request *reqs = NULL
        cdef MPI_Datatype t
        cdef int rc
        cdef bint in_place = sendbuf is pyMPI.IN_PLACE or sendbuf is None
        if not cnp.PyArray_CheckExact(recvbuf):
            return False
        recv = <cnp.ndarray>recvbuf
        if not cnp.PyArray_IS_C_CONTIGUOUS(recv) or not cnp.PyArray_ISWRITEABLE(recv):
            return False
        n = cnp.PyArray_SIZE(recv)
        if in_place:
            send = recv
        else:
            if not cnp.PyArray_CheckExact(sendbuf):
                return False
            send = <cnp.ndarray>sendbuf
            if (not cnp.PyArray_IS_C_CONTIGUOUS(send) or cnp.PyArray_SIZE(send) != n
                    or cnp.PyArray_TYPE(send) != cnp.PyArray_TYPE(recv)):
                return False
        for opc in range(10):
            if op is self.ops[opc]:
                break
        else:
            return False
        progress = self.owner._progress
        if progress is not None and progress.busy():
            return False
        key = (<long>n << 12) | (<long>cnp.PyArray_TYPE(recv) << 4) | opc
        pl = self.plans.get(key)
        if pl is None:
            pl = self.plan(n, recv.dtype, op, key)
            if pl is None:
                return False
        self.owner.last_algorithm = pl.name
        buf[0] = <char *>cnp.PyArray_DATA(recv)
        buf[1] = <char *>cnp.PyArray_DATA(self.tmp)
        buf[2] = <char *>cnp.PyArray_DATA(send)
        element_type(pl.size, &t)
        if pl.nreq:
            reqs = <MPI_Request *>malloc(pl.nreq * sizeof(MPI_Request))
            if reqs == NULL:
                raise MemoryError()
        with nogil:
            if not in_place and not pl.reads_in and buf[0] != buf[2]:
                memcpy(buf[0], buf[2], n * pl.size)
            rc = run_steps(self.comm.ob_mpi, pl.rows, pl.nsteps, buf, pl.size, t,
                           pl.dtype, pl.op, self.tag, reqs)
        free(reqs)
        if rc != MPI_SUCCESS:
            raise pyMPI.Exception(rc)
        return True
