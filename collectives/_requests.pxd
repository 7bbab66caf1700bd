# MPI requests as every wait of the native side sees them: polled, watched, given up.
from mpi4py.libmpi cimport MPI_Comm, MPI_Datatype, MPI_Request, MPI_Status

from collectives._timeline cimport Ring

cdef extern from *:
    """
    #define COLLECTIVES_NEVER_S 1e300
    #define COLLECTIVES_TIMED_OUT (-2)
    """
    # The wait limit of an unwatched wait, and the return code of a wait that outlived its limit.
    const double NEVER_S "COLLECTIVES_NEVER_S"
    const int TIMED_OUT "COLLECTIVES_TIMED_OUT"


cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef struct Watch:
    double limit   # seconds one wait may make no progress (NEVER_S: unwatched)
    double waited  # on expiry: how long the wait had blocked
    int *peer      # per request: its peer's rank
    Ring *ring     # the timeline's ring, where each wait is recorded (NULL: no timeline)
    int code       # the collective the waits are of, for their records


cdef double monotonic() noexcept nogil
cdef int poll_all(int n, MPI_Request *reqs, double limit, double *waited,
                  MPI_Status *statuses=*) noexcept nogil
cdef int wait_requests(int n, MPI_Request *reqs, char *is_recv, Watch *w,
                       MPI_Status *statuses=*) noexcept nogil
cdef void give_up(MPI_Request *reqs, int nreq, const char *is_recv) noexcept nogil
cdef void abandon(MPI_Request *reqs, const char *is_recv, int nreq) noexcept nogil
cdef int start_request(bint recv, char *at, int count, MPI_Datatype t, int peer, int tag,
                       MPI_Comm comm, MPI_Request *reqs, char *is_recv, Watch *w,
                       int *nreq, bint sync=*) noexcept nogil
cdef int element_type(size_t size, MPI_Datatype *out) except -1
cdef object label(object collective, object algorithm)
cdef object stall_error(object collective, object algorithm, Py_ssize_t step, int rank,
                        const Watch *w, const char *is_recv, int n)
