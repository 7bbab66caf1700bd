# A Comm's engine: the one path every collective call takes (collectives._engine documents it).
from libc.stdint cimport int64_t
cimport numpy as cnp
from mpi4py cimport MPI

from collectives._call cimport Call, Copy
from collectives._exchange cimport X_HEADER, Exchange
from collectives._shm cimport Segment, shm_seg
from collectives._timeline cimport Recorder, Ring

cdef enum:
    MAX_COLLECTIVES = 16  # room for collectives.constants.COLLECTIVES
    FRONT = 64            # the plan cache's slots found by the key's hash, without the LRU (a power of two)


cdef class _Plan:
    """A cached plan with everything one call needs, resolved once."""
    cdef object steps
    cdef const int64_t *rows
    cdef Py_ssize_t nsteps, nreq, tmp_count
    cdef int algo
    cdef int fused     # the exchange's payload kind of a fused collective, else -1
    cdef int shm       # the form of a shared-memory plan (constants.SHM_FORMS), else -1
    cdef Py_ssize_t lead  # the leading rows that may start before the exchange (plans.leading)
    cdef bint reads_in
    cdef object name, reason, node_aware
    cdef bint template  # its rows hold block markers, filled in per call (Engine.fill)
    # The call shape it serves: the Call's key words and per-rank counts.
    cdef int64_t key[7]
    cdef int64_t *kcounts
    cdef int nkcounts
    cdef bint serves(self, Call c) noexcept


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
    cdef bint explain
    cdef object make_plan
    cdef readonly object plans  # a collectives.cache.ByteLRU of _Plan, by the calls' keys
    cdef list hot               # per collective, the plan of its latest call
    cdef list front             # FRONT recent plans, by their keys' hash
    cdef list algo_ids          # per collective: a requested algorithm's name -> its word in the plan key
    cdef bint checked  # ``check`` when the plans were made (it picks the fused forms)
    cdef cnp.ndarray tmp, aux
    cdef cnp.ndarray filled  # a template plan's rows for the running call
    cdef object hood         # the communicator's collectives.neighbors.Neighbourhood, once asked for
    cdef int tags[MAX_COLLECTIVES]
    cdef int native_index[MAX_COLLECTIVES]
    cdef int width, nvec
    cdef int64_t *vec  # the header of x.mine
    cdef Exchange x
    cdef int nf        # the fields of the fingerprint in x.mine
    # The node's shared segment (collectives.shm; None: none), and its C side (NULL: none).
    cdef readonly Segment segment
    cdef shm_seg *shm
    cdef object vec_array, body_array  # NumPy views of x.mine for the exchange's twin
    cdef unsigned long queue_thread  # the thread running a queued call, or 0
    # The Call of the blocking calls that run at once (``call_busy`` while one does).
    cdef Call call
    cdef bint call_busy
    # Messages above ``eager`` bytes, up to ``split_most``, go as eager pieces (collectives.eager);
    # a fused collective carries at most ``fused_bytes`` (FUSED_DEFAULT across nodes).
    cdef readonly Py_ssize_t eager, split_most, fused_bytes
    # The timeline (COLLECTIVES_TIMELINE): its ring (NULL when off) and when the call began.
    cdef readonly Recorder timeline
    cdef Ring *ring
    cdef double t_call

    cpdef allreduce(self, sendbuf, recvbuf, op, algorithm, bint nonblocking=*)
    cpdef scan(self, sendbuf, recvbuf, op, algorithm, bint exclusive, bint nonblocking=*)
    cpdef bcast(self, buf, root, algorithm, bint nonblocking=*)
    cpdef reduce(self, sendbuf, recvbuf, op, root, algorithm, bint nonblocking=*)
    cpdef allgather(self, sendbuf, recvbuf, algorithm, bint nonblocking=*)
    cpdef alltoall(self, sendbuf, recvbuf, algorithm, bint nonblocking=*)
    cpdef alltoallv(self, sendbuf, recvbuf, algorithm, bint nonblocking=*)
    cpdef allgatherv(self, sendbuf, recvbuf, algorithm, bint nonblocking=*)
    cpdef reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, algorithm, bint block, bint nonblocking=*)
    cpdef rooted(self, method, sendbuf, recvbuf, root, algorithm, bint nonblocking=*)
    cpdef neighbor(self, method, sendbuf, recvbuf, algorithm, bint nonblocking=*)
    cpdef barrier(self, algorithm, bint nonblocking=*)
    cpdef allreduce_array(self, array, op, algorithm, out)
    cdef bint ready(self) except -1
    cdef Call fresh(self, int coll, object method, object algorithm, bint nonblocking)
    cdef object go(self, Call c, bint nonblocking)
    cdef int execute(self, Call c) except -1
    cdef char *scratch(self, bint aux, Py_ssize_t nbytes) except NULL
    cdef _Plan plan(self, Call c)
    cdef _Plan made(self, Call c, object algorithm)
    cdef Py_ssize_t fill(self, Call c, _Plan pl) except -1
    cdef int perform(self, Call c, _Plan pl) except -1
    cdef void copy(self, const Copy *op, Call c, _Plan pl, char *stage) noexcept
    cdef int64_t *fields(self) noexcept
    cdef char *body(self) noexcept
    cdef void fingerprint(self, int coll, int algo, int nfields, bint error=*, int kind=*,
                          Py_ssize_t nbytes=*, Py_ssize_t block=*, int dtype=*, int op=*, bint has=*) noexcept
    cdef int exchange(self, object collective, object algorithm) except -1
    cdef int judge(self, object name, tuple keys, bint counts, bint error=*) except -1
    cdef int agree(self, Call c, _Plan pl, bint payload) except -1
    cdef int unmatched(self, Call c) except -1
    cdef int refuse(self, int coll, object exc) except -1
    cdef int gather_counts(self, Call c) except -1
    cdef int launch(self, Call c, _Plan pl, char *acc, char *inp, bint early=*) except -1
    cdef int in_segment(self, Call c, _Plan pl) except -1
    cdef int shm_failed(self, int rc, object collective, object algorithm) except -1
    cdef void done(self, Call c, _Plan pl)
    cdef void say(self, int coll, object text)
    cdef object native(self, Call c)
