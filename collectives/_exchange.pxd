# The checked exchange's C side (collectives.exchange documents it), for the executor and the
# engine that start it, overlap it and read its fold.
from libc.stdint cimport int64_t
from mpi4py.libmpi cimport MPI_Comm, MPI_Datatype, MPI_Request

from collectives._requests cimport Watch

# Payload kinds, as in collectives.exchange.
cdef enum:
    X_HEADER = 0
    X_REDUCE = 1
    X_BCAST = 2
    X_GATHER = 3


cdef enum:
    X_PIECES = 8  # the most pieces one message of the exchange is cut into (Exchange.piece)


cdef struct Exchange:
    MPI_Comm comm
    int tag
    char *mine         # [header: nh int64 words, the last the payload's length][payload]
    char *theirs       # a received message, room for ``cap`` bytes
    Py_ssize_t nh, cap, nbytes, block
    Py_ssize_t piece   # a message longer than this goes as pieces of this many bytes (0: whole)
    int kind, dtype, op, rem
    bint clash         # some partner's header differed from ours: payload no longer combined
    Watch w            # each trade's wait (w.peer is ``peer``)
    int round          # the trade running, from 0 (a StallError's step)
    int nreq           # the trade's requests; per request, as start_request and
    int peer[2 * X_PIECES]     # wait_requests keep them: its peer, and its kind and late mark
    char is_recv[2 * X_PIECES]


cdef int x_run(Exchange *x, int rank, int p) noexcept nogil
cdef bint x_agrees(const Exchange *x) noexcept nogil
cdef int x_raise(Exchange *x, int rc, int rank, object collective, object algorithm) except -1
cdef int x_checked(Exchange *x, int rank, int p, object collective, object algorithm=*) except -1
cdef int settle(MPI_Comm comm, int tag, MPI_Request *reqs, const char *is_recv, int nreq,
                MPI_Datatype junk_t, double limit) noexcept nogil
