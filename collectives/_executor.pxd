# The native schedule executor, for the engine that runs planned schedules.
from libc.stdint cimport int64_t
from mpi4py.libmpi cimport MPI_Comm

from collectives._exchange cimport Exchange
from collectives._timeline cimport Ring

# Room for the buffers a row names (collectives.constants declares them, and the step kinds).
cdef enum:
    MAX_BUFS = 4


cdef int run_checked(MPI_Comm comm, const int64_t *steps, Py_ssize_t nsteps, char **buf, int dtype,
                     int op, int tag, Py_ssize_t nreq, object collective, double limit=*,
                     object algorithm=*, Exchange *x=*, Py_ssize_t lead=*, Ring *ring=*, int code=*) except -1
