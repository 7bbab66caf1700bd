# The core of a Comm's collectives, for the dispatcher that builds on it (collectives._dispatch).
from libc.stdint cimport int64_t
cimport numpy as cnp
from mpi4py cimport MPI

from collectives._buffers cimport Arg, Views
from collectives._exchange cimport X_HEADER, Exchange
from collectives._timeline cimport Recorder, Ring

# Collective indices, as in collectives.registry.ALGORITHMS (and agreement.COLLECTIVE_INDEX).
cdef enum:
    ALLREDUCE = 0
    BCAST = 1
    REDUCE_ = 2
    ALLGATHER = 3
    REDUCE_SCATTER = 4
    GATHER = 5
    SCATTER = 6
    BARRIER = 7
    NCOLL = 8
    BYTE_CODE = 5  # uint8 in collectives.ops.DTYPES

cdef extern from *:
    """
    #define COLLECTIVES_UNKNOWN (-(1LL << 62))
    """
    # A field this rank cannot know (agreement.agree's None).
    const int64_t UNKNOWN "COLLECTIVES_UNKNOWN"


cdef class _Plan:
    """A cached plan with everything one call needs, resolved once."""
    cdef object steps
    cdef const int64_t *rows
    cdef Py_ssize_t nsteps, nreq, tmp_count
    cdef int algo
    cdef int fused     # the exchange's payload kind of a fused collective, else -1
    cdef Py_ssize_t lead  # the leading rows that may start before the exchange (plans.make)
    cdef bint reads_in
    cdef object name, reason, node_aware
    cdef Py_ssize_t nbytes, count
    cdef object key  # the call shape it serves (Engine.plan's key)


cdef inline Py_ssize_t nbytes_of(const Arg *a) noexcept:
    return a.count * a.size


cdef object array_at(char *ptr, Py_ssize_t nbytes)


cdef class Engine:
    cdef readonly MPI.Comm comm
    cdef readonly int rank, size
    cdef public bint check
    cdef public double timeout
    cdef public object on_timeout, algorithms, settings, nodes
    cdef public object broken, progress, last_algorithm
    cdef public Py_ssize_t started, calls
    cdef readonly bint pure
    # Messages above ``eager`` bytes, up to ``split_most``, go as eager pieces (collectives.eager);
    # a fused collective carries at most ``fused_bytes`` (FUSED_DEFAULT across nodes).
    cdef readonly Py_ssize_t eager, split_most, fused_bytes
    cdef bint explain
    cdef object make_plan
    cdef readonly object plans  # a collectives.cache.ByteLRU
    cdef list hot  # per collective: the plan of its latest call, found without the LRU
    cdef bint checked  # ``check`` when the plans were made (it picks the fused forms)
    cdef cnp.ndarray tmp, aux
    cdef int tags[NCOLL]
    cdef int native_index[NCOLL]
    cdef int width, nvec
    cdef int64_t *vec  # the header of x.mine
    cdef Exchange x
    cdef object vec_array, body_array  # NumPy views of x.mine for the exchange's twin
    cdef Py_ssize_t *counts  # per-rank counts, then displacements and packed offsets
    cdef unsigned long queue_thread  # the thread running a queued nonblocking call, or 0
    # The call running: its buffers' views, its send and receive buffers, op, root, MPI.Op.
    cdef Views held
    cdef Arg send, recv
    cdef int opc
    cdef Py_ssize_t root
    cdef object op_object
    # The timeline (COLLECTIVES_TIMELINE): its ring (NULL when off) and when the call began.
    cdef readonly Recorder timeline
    cdef Ring *ring
    cdef double t_call

    cdef bint ready(self) except -1
    cdef object behind(self, method, tuple args)
    cdef char *scratch(self, bint aux, Py_ssize_t nbytes) except NULL
    cdef _Plan plan(self, int coll, object algorithm, tuple key, Py_ssize_t count,
                    Py_ssize_t nbytes, bint uniform, tuple args, int op=*, int dtype=*, bint apart=*)
    cdef int64_t *fields(self) noexcept
    cdef char *body(self) noexcept
    cdef void fingerprint(self, int coll, int algo, int nfields, bint error=*, int kind=*,
                          Py_ssize_t nbytes=*, Py_ssize_t block=*, int dtype=*, int op=*, bint has=*) noexcept
    cdef int exchange(self, object collective, object algorithm) except -1
    cdef int judge(self, object name, tuple keys, bint counts, bint error=*) except -1
    cdef int agree(self, int coll, _Plan pl, int nfields, tuple keys, bint counts,
                   Py_ssize_t nbytes=*, Py_ssize_t block=*, int dtype=*, int op=*, bint has=*) except -1
    cdef int refuse(self, int coll, object exc) except -1
    cdef int launch(self, int coll, _Plan pl, char *acc, Py_ssize_t acc_n, char *inp, Py_ssize_t in_n,
                    int dtype, int op, char *out=*, Py_ssize_t out_n=*, bint early=*) except -1
    cdef Py_ssize_t elements(self, int coll, _Plan pl)
    cdef void done(self, _Plan pl)
    cdef void say(self, int coll, object text)
    cdef object native(self, int coll, object why, object method, tuple args)
