# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native schedule executor: runs a collectives.schedule step array on mpi4py's C-level API.

The whole schedule runs inside one ``nogil`` block, so a collective costs one Python call
however many steps it has, and other Python threads (the progress thread of the
nonblocking forms, the caller's computation) run meanwhile.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from mpi4py cimport MPI
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

cdef extern from "reduce.h" nogil:
    int ck_reduce(void *dst, const void *src, size_t n, int dtype, int op)
    size_t ck_itemsize(int dtype)

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

cdef MPI_Datatype _element_type[17]
cdef bint _have_type[17]
cdef char _empty[16]


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


cdef int run_steps(MPI_Comm comm, const int64_t *steps, Py_ssize_t nsteps, char **buf,
                   size_t size, MPI_Datatype t, int dtype, int op, int tag,
                   MPI_Request *reqs) noexcept nogil:
    cdef Py_ssize_t i
    cdef const int64_t *r
    cdef int rc = MPI_SUCCESS, nreq = 0
    for i in range(nsteps):
        r = steps + i * NCOLS
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
            rc = ck_reduce(buf[r[1]] + r[2] * size, buf[r[5]] + r[6] * size, <size_t>r[3], dtype, op)
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
