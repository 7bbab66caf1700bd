# The native schedule executor, for the dispatcher that runs planned schedules.
from libc.stdint cimport int64_t
from mpi4py.libmpi cimport MPI_Comm

from collectives._exchange cimport Exchange
from collectives._timeline cimport Ring

# A schedule row's kind, its width and the buffers it names: as in collectives/schedule.py.
cdef enum:
    SENDRECV = 0
    REDUCE = 1
    COPY = 2
    ISEND = 3
    IRECV = 4
    WAITALL = 5
    NONE = -1
    NCOLS = 9
    NBUFS = 4
    ACC_BUF = 0
    TMP_BUF = 1
    IN_BUF = 2
    OUT_BUF = 3


cdef int run_checked(MPI_Comm comm, const int64_t *steps, Py_ssize_t nsteps, char **buf, int dtype,
                     int op, int tag, Py_ssize_t nreq, object collective, double limit=*,
                     object algorithm=*, Exchange *x=*, Py_ssize_t lead=*, Ring *ring=*, int code=*) except -1
