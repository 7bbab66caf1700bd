# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A Comm's engine: the one path every collective call takes.

A call goes down the layers once:

* **describe** (collectives._call): mpi4py's arguments become a ``Call``, on the caller's
  thread, for blocking and nonblocking calls alike; a bad argument raises there, and a call
  no algorithm covers is marked for MPI's own;
* **order**: a blocking call runs at once, or behind the nonblocking calls still pending; a
  nonblocking one is queued on the progress thread (collectives.nonblocking), which runs the
  queued Calls in order;
* **plan**: the algorithm and its schedule for the call's shape, from ``collectives.plans`` on
  a miss, kept in one cache by the Call's key (``FRONT`` slots by its hash, then an LRU);
* **agree**: with the check on, the checked exchange of the call's fingerprint (the fields
  ``collectives.agreement`` describes), which for a fused plan carries the data and is the
  collective; a rank whose description failed takes part with its error flag set, so the
  others raise "invalid arguments on another rank" instead of waiting.  On a Comm with a
  shared segment every agreement is a phase in the segment instead, the same fold of the same
  fields: a call that runs point-to-point and one that runs in the segment meet there;
* **execute**: the copies the Call names around the schedule, and the schedule, in
  ``collectives._executor`` without the GIL, or with ``pure`` (COLLECTIVES_PUREPYTHON=1) in
  ``schedule.run_python`` and ``exchange.exchange``, the NumPy twins: the fallback shares
  everything above the leaves; or a shared-memory plan in the node's segment (csrc/shm.c),
  whose first phase carries the fingerprint, so the check is no exchange of its own;
* **record**: the algorithm that ran, the timeline's records and COLLECTIVES_EXPLAIN's line.

A call no algorithm covers runs MPI's own collective on the private communicator after the
same agreement.  ``collectives._comm.Functional`` gives the functional all-reduce the same path.
"""
import logging
import sys

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcmp, memcpy, memmove
cimport numpy as cnp
import numpy as np
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._buffers cimport IN_PLACE, dtype_of
from collectives._call cimport (B_BODY, B_STAGE, C_BYTES, C_NONE, C_PACK, C_UNPACK, KEY_WORDS, Call, Copy,
                                describe_allgather, describe_allgatherv, describe_allreduce, describe_alltoall,
                                describe_alltoallv, describe_barrier, describe_neighbor,
                                describe_bcast, describe_reduce, describe_reduce_scatter, describe_rooted,
                                describe_scan, finish_reduce_scatter, mix)
from collectives._csrc cimport ck_itemsize
from collectives._exchange cimport X_PIECES, X_REDUCE, x_agrees, x_checked
from collectives._executor cimport MAX_BUFS, run_checked
from collectives._requests cimport NEVER_S, label, monotonic
from collectives._shm cimport (SHM_BAD_OP, SHM_DISAGREED, SHM_TIMED_OUT, release_gil, shm_agree, shm_allgather,
                               shm_allreduce, shm_arrived, shm_barrier, shm_bcast, shm_gather, shm_reduce,
                               shm_reduce_scatter, shm_scatter, take_gil)
from collectives._timeline cimport CALL, CHECK, TRANSFER, put
from collectives import constants as K, exchange as _twin
from collectives._executor import ScheduleError
from collectives.agreement import COLLECTIVE_INDEX, Disagreement, disagreement
from collectives.cache import ByteLRU
from collectives.constants import (ACC, COLLECTIVES, COUNTS, IN, INDEX, NBUFS as _NBUFS, OUT, SHM_DIRECT as _SHM_DIRECT,
                                   TAG_EXCHANGE, TAGS, TMP)
from collectives.exchange import FUSED_BYTES, FUSED_DEFAULT
from collectives.neighbors import neighbourhood, typed
from collectives.nonblocking import Progress, completed
from collectives.ops import DTYPE_CODE, OP_CODE
from collectives.registry import PLAN_OVERHEAD, choices, resolve_name
from collectives.schedule import run_python
from collectives.watchdog import StallError, stalled

cnp.import_array()

cdef char _empty[16]
cdef object _NAMES = COLLECTIVES
cdef int NCOLL = len(COLLECTIVES)
if NCOLL > MAX_COLLECTIVES:
    raise ImportError(f"collectives._engine: room for {MAX_COLLECTIVES} collectives, {NCOLL} declared")
cdef int ALLREDUCE = INDEX["allreduce"], BCAST = INDEX["bcast"], REDUCE_ = INDEX["reduce"]
cdef int ALLGATHER = INDEX["allgather"], REDUCE_SCATTER = INDEX["reduce_scatter"]
cdef int GATHER = INDEX["gather"], SCATTER = INDEX["scatter"], BARRIER = INDEX["barrier"]
cdef int SCAN = INDEX["scan"], EXSCAN = INDEX["exscan"], ALLTOALL = INDEX["alltoall"]
cdef int NEIGHBOR_ALLGATHER = INDEX["neighbor_allgather"], NEIGHBOR_ALLTOALL = INDEX["neighbor_alltoall"]
cdef int BYTE_CODE = DTYPE_CODE[np.dtype(np.uint8)]
cdef int ACC_BUF = ACC, TMP_BUF = TMP, IN_BUF = IN, OUT_BUF = OUT, NBUFS = _NBUFS
# The step kinds and a row's width, as collectives.constants declares them.
cdef int SENDRECV = K.SENDRECV, COPY = K.COPY, ISEND = K.ISEND, IRECV = K.IRECV, NONE = K.NONE, NCOLS = K.NCOLS
cdef int U64_CODE = DTYPE_CODE[np.dtype(np.uint64)], SUM_CODE = OP_CODE["sum"]
cdef object _COUNTS_INDEX = COLLECTIVE_INDEX[COUNTS]
cdef int SHM_DIRECT = _SHM_DIRECT
# A call in the shared segment of at most this many bytes runs holding the GIL (in_segment).
cdef Py_ssize_t GIL_HELD_BYTES = 1 << 16
log = logging.getLogger("collectives")

cdef extern from *:
    """
    #define COLLECTIVES_UNKNOWN (-(1LL << 62))
    """
    # A field this rank cannot know (agreement.agree's None).
    const int64_t UNKNOWN "COLLECTIVES_UNKNOWN"


cdef inline uint64_t key_hash(Call c) noexcept:
    """A hash of the Call's plan key: its words, and its per-rank counts when they belong."""
    cdef uint64_t h = 0
    cdef int i
    for i in range(KEY_WORDS):
        h = mix(h, <uint64_t>c.key[i])
    if c.key_counts:
        for i in range(c.size):
            h = mix(h, <uint64_t>c.kcounts[i])
    return h


cdef class _Plan:
    """A cached plan with everything one call needs, resolved once."""

    def __dealloc__(self):
        free(self.kcounts)

    cdef bint serves(self, Call c) noexcept:
        """Whether this plan is the one for ``c``'s shape."""
        if memcmp(self.key, c.key, sizeof(self.key)) != 0:
            return False
        if not c.key_counts:
            return self.nkcounts == 0
        return self.nkcounts == c.size and memcmp(self.kcounts, c.kcounts, c.size * sizeof(int64_t)) == 0


cdef object array_at(char *ptr, Py_ssize_t nbytes):
    """A uint8 NumPy view of ``nbytes`` at ``ptr`` (the NumPy twins take arrays)."""
    if nbytes <= 0:
        return np.empty(0, np.uint8)
    return np.asarray(<char[:nbytes]>ptr).view(np.uint8)


cdef void move_blocks(char *dst, const Py_ssize_t *dst_at, const char *src, const Py_ssize_t *src_at,
                      const Py_ssize_t *counts, Py_ssize_t p, Py_ssize_t size) noexcept:
    """Copy each block i, ``counts[i]`` elements of ``size`` bytes, from ``src_at[i]`` to ``dst_at[i]``."""
    cdef Py_ssize_t i
    for i in range(p):
        memcpy(dst + dst_at[i] * size, src + src_at[i] * size, counts[i] * size)


cdef void poke_mpi(shm_seg *s) noexcept nogil:
    """A turn of the MPI library's progress engine while a phase waits (shm_seg.poke), on the
    Comm's private communicator: a peer blocked in a passive-target lock of this rank's window,
    say, is granted it, and then arrives."""
    cdef int flag = 0
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, (<MPI_Comm *>s.poke_arg)[0], &flag, MPI_STATUS_IGNORE)


cdef int run_in_segment(shm_seg *s, int coll, int form, int64_t *v, int nf, int w, bint chk, char *inp, char *out,
                        size_t count, size_t nbytes, int dtype, int op, int root, int64_t *words, size_t block,
                        size_t chunk) noexcept nogil:
    """One collective in the segment (csrc/shm.h): ``words`` are an all-gather's block bytes
    and offsets, or a reduce-scatter's counts; ``block`` a gather's or scatter's block."""
    cdef size_t slice_ = 0 if form == SHM_DIRECT else chunk
    if coll == ALLREDUCE:
        return shm_allreduce(s, v, nf, w, chk, inp, out, count, dtype, op, slice_)
    if coll == BCAST:
        return shm_bcast(s, v, nf, w, chk, out, nbytes, root, chunk)
    if coll == REDUCE_:
        return shm_reduce(s, v, nf, w, chk, inp, out, count, dtype, op, root, slice_)
    if coll == ALLGATHER:
        return shm_allgather(s, v, nf, w, chk, inp, out, words, words + s.size, chunk)
    if coll == REDUCE_SCATTER:
        return shm_reduce_scatter(s, v, nf, w, chk, inp, out, words, dtype, op, slice_)
    if coll == GATHER:
        return shm_gather(s, v, nf, w, chk, inp, out, block, root, chunk)
    if coll == SCATTER:
        return shm_scatter(s, v, nf, w, chk, inp, out, block, root, chunk)
    return shm_barrier(s, v, nf, w, chk)


cdef class QueuedCall:
    """A described nonblocking call, as the job the progress thread runs when its turn comes."""
    cdef Engine engine
    cdef Call c

    def __init__(self, Engine engine, Call c):
        self.engine, self.c = engine, c

    def __call__(self):
        cdef Engine e = self.engine
        try:
            if e.broken is not None:
                raise RuntimeError(f"collectives.Comm is unusable: {e.broken}")
            e.queue_thread = PyThread_get_thread_ident()
            if e.ring != NULL:
                e.t_call = monotonic()
            e.started += 1
            e.execute(self.c)
        finally:
            e.queue_thread = 0
            self.c.release()


cdef class QueuedJob:
    """A job of the caller's (``Engine.run``), queued behind the nonblocking calls."""
    cdef Engine engine
    cdef object job

    def __init__(self, Engine engine, job):
        self.engine, self.job = engine, job

    def __call__(self):
        self.engine.queue_thread = PyThread_get_thread_ident()
        try:
            self.engine.started += 1
            return self.job()
        finally:
            self.engine.queue_thread = 0


cdef class Engine:
    """What the collectives of one ``collectives.Comm`` share, and the path each call takes.

    ``comm`` is the Comm's private duplicate; ``make_plan(engine, collective, algorithm,
    count, nbytes, uniform, args, op, dtype, apart)`` is ``collectives.plans.make``, called
    on a plan cache miss; ``eager``, ``split_most`` and ``fused`` are the Comm's agreed eager
    limit, largest cut message and most a fused collective carries (collectives.eager.agreed).
    The attributes the facade reads are public: ``check``, ``last_algorithm``, ``broken`` (why
    a failed step made the Comm unusable), ``progress`` (the thread of the nonblocking calls),
    ``started`` (collectives started: the watchdog's call numbers) and ``calls`` (those run by
    this library's algorithms, not handed to MPI).
    """

    def __init__(self, MPI.Comm comm, settings, bint check, double timeout, on_timeout, algorithms,
                 nodes, make_plan, bint pure, Recorder timeline=None, Py_ssize_t eager=0,
                 Py_ssize_t split_most=0, Py_ssize_t fused=FUSED_DEFAULT, Segment segment=None):
        cdef int i
        self.comm = comm
        self.segment = segment
        self.shm = &segment.s if segment is not None else NULL
        if self.shm != NULL:
            self.shm.poke, self.shm.poke_arg = poke_mpi, &self.comm.ob_mpi
        self.timeline = timeline
        self.ring = &timeline.ring if timeline is not None else NULL
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.settings, self.check, self.on_timeout = settings, check, on_timeout
        self.algorithms, self.nodes, self.make_plan, self.pure = algorithms, nodes, make_plan, pure
        self.explain = settings.explain
        self.eager, self.split_most = eager, split_most
        self.fused_bytes = FUSED_DEFAULT if nodes.spans else fused
        self.broken = self.progress = self.last_algorithm = None
        self.started = self.calls = 0
        self.plans = ByteLRU(settings.cache_bytes)
        self.hot = [None] * NCOLL
        self.front = [None] * FRONT
        self.algo_ids = [{} for _ in range(NCOLL)]
        self.checked = check
        for i in range(NCOLL):
            self.tags[i] = TAGS[_NAMES[i]]
            self.native_index[i] = choices(_NAMES[i]).index("native")
        self.width = 4 + self.size
        self.nvec = 5 + 2 * self.width
        self.x.comm, self.x.tag = comm.ob_mpi, TAG_EXCHANGE
        self.x.nh = self.nvec + 1
        self.x.cap = 8 * self.x.nh + FUSED_BYTES
        # On one node a message of the exchange longer than the eager limit goes as eager
        # pieces, at most X_PIECES of them, each holding at least the header.
        self.x.piece = 0
        if eager and not nodes.spans:
            self.x.piece = max(eager, -(-self.x.cap // X_PIECES), 8 * self.x.nh)
            if self.x.piece >= self.x.cap:
                self.x.piece = 0
        self.x.mine = <char *>malloc(2 * self.x.cap)
        self.x.theirs = self.x.mine + self.x.cap
        self.vec = <int64_t *>self.x.mine
        if self.x.mine == NULL:
            raise MemoryError()
        whole = array_at(self.x.mine, self.x.cap)
        self.vec_array = whole[:8 * self.nvec].view(np.int64)
        self.body_array = whole[8 * self.x.nh:]
        self.watch(timeout)
        self.tmp = np.zeros(64, np.uint8)
        self.aux = np.zeros(64, np.uint8)
        self.call = Call(self.rank, self.size)

    def __dealloc__(self):
        free(self.x.mine)

    def watch(self, double limit):
        """Watch every wait for ``limit`` seconds (collectives.watchdog); 0 turns it off."""
        self.timeout = limit
        self.x.w.limit = limit if limit > 0 else NEVER_S
        self.x.w.ring = self.ring
        if self.segment is not None:
            self.segment.watch(limit)

    def __len__(self):
        """Number of cached plans."""
        return len(self.plans)

    def forget(self):
        """Drop every cached plan."""
        self.plans.clear()
        self.hot = [None] * NCOLL
        self.front = [None] * FRONT

    def close(self):
        """Finish the queued nonblocking calls and stop the progress thread."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        self.tmp = self.aux = None
        if self.segment is not None:
            self.shm = NULL
            self.segment.close()
            self.segment = None

    # ---- the entry points: describe, then run now or queue -------------------------------

    cpdef allreduce(self, sendbuf, recvbuf, op, algorithm, bint nonblocking=False):
        """Allreduce (Iallreduce: ``nonblocking``, a Request)."""
        cdef Call c = self.fresh(ALLREDUCE, "Allreduce", algorithm, nonblocking)
        try:
            describe_allreduce(c, sendbuf, recvbuf, op)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf, op))
        return self.go(c, nonblocking)

    cpdef scan(self, sendbuf, recvbuf, op, algorithm, bint exclusive, bint nonblocking=False):
        """Scan, or Exscan (``exclusive``), and their nonblocking forms."""
        cdef Call c = self.fresh(EXSCAN if exclusive else SCAN, "Exscan" if exclusive else "Scan", algorithm,
                                 nonblocking)
        try:
            describe_scan(c, sendbuf, recvbuf, op, exclusive)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf, op))
        return self.go(c, nonblocking)

    cpdef bcast(self, buf, root, algorithm, bint nonblocking=False):
        """Bcast (Ibcast)."""
        cdef Call c = self.fresh(BCAST, "Bcast", algorithm, nonblocking)
        try:
            describe_bcast(c, buf, root)
        except BaseException as exc:
            c.refused(exc, (buf, root))
        return self.go(c, nonblocking)

    cpdef reduce(self, sendbuf, recvbuf, op, root, algorithm, bint nonblocking=False):
        """Reduce (Ireduce)."""
        cdef Call c = self.fresh(REDUCE_, "Reduce", algorithm, nonblocking)
        try:
            describe_reduce(c, sendbuf, recvbuf, op, root)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf, op, root))
        return self.go(c, nonblocking)

    cpdef allgather(self, sendbuf, recvbuf, algorithm, bint nonblocking=False):
        """Allgather (Iallgather)."""
        cdef Call c = self.fresh(ALLGATHER, "Allgather", algorithm, nonblocking)
        try:
            describe_allgather(c, sendbuf, recvbuf)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf))
        return self.go(c, nonblocking)

    cpdef allgatherv(self, sendbuf, recvbuf, algorithm, bint nonblocking=False):
        """Allgatherv (Iallgatherv)."""
        cdef Call c = self.fresh(ALLGATHER, "Allgatherv", algorithm, nonblocking)
        try:
            describe_allgatherv(c, sendbuf, recvbuf)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf))
        return self.go(c, nonblocking)

    cpdef reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, algorithm, bint block, bint nonblocking=False):
        """Reduce_scatter_block (``block``) or Reduce_scatter, and their nonblocking forms."""
        cdef Call c = self.fresh(REDUCE_SCATTER, "Reduce_scatter_block" if block else "Reduce_scatter", algorithm,
                                 nonblocking)
        try:
            describe_reduce_scatter(c, sendbuf, recvbuf, recvcounts, op, block)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf, op) if block else (sendbuf, recvbuf, recvcounts, op))
        return self.go(c, nonblocking)

    cpdef rooted(self, method, sendbuf, recvbuf, root, algorithm, bint nonblocking=False):
        """Gather, Gatherv, Scatter or Scatterv (``method``, mpi4py's name), and their nonblocking forms."""
        cdef bint gather = method.startswith("Gather")
        cdef Call c = self.fresh(GATHER if gather else SCATTER, method, algorithm, nonblocking)
        try:
            describe_rooted(c, gather, method.endswith("v"), sendbuf, recvbuf, root)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf, root))
        return self.go(c, nonblocking)

    cpdef alltoall(self, sendbuf, recvbuf, algorithm, bint nonblocking=False):
        """Alltoall (Ialltoall)."""
        cdef Call c = self.fresh(ALLTOALL, "Alltoall", algorithm, nonblocking)
        try:
            describe_alltoall(c, sendbuf, recvbuf)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf))
        return self.go(c, nonblocking)

    cpdef alltoallv(self, sendbuf, recvbuf, algorithm, bint nonblocking=False):
        """Alltoallv (Ialltoallv)."""
        cdef Call c = self.fresh(ALLTOALL, "Alltoallv", algorithm, nonblocking)
        try:
            describe_alltoallv(c, sendbuf, recvbuf)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf))
        return self.go(c, nonblocking)

    cpdef neighbor(self, method, sendbuf, recvbuf, algorithm, bint nonblocking=False):
        """Neighbor_allgather(v) or Neighbor_alltoall(v) (``method``, mpi4py's name), and their
        nonblocking forms."""
        cdef bint allgather = method.startswith("Neighbor_allgather")
        cdef Call c = self.fresh(NEIGHBOR_ALLGATHER if allgather else NEIGHBOR_ALLTOALL, method, algorithm,
                                 nonblocking)
        try:
            if self.hood is None:
                self.hood = neighbourhood(self.comm)
            describe_neighbor(c, allgather, method.endswith("v"), sendbuf, recvbuf, self.hood)
        except BaseException as exc:
            c.refused(exc, (sendbuf, recvbuf))
        return self.go(c, nonblocking)

    cpdef barrier(self, algorithm, bint nonblocking=False):
        """Barrier (Ibarrier)."""
        cdef Call c = self.fresh(BARRIER, "Barrier", algorithm, nonblocking)
        describe_barrier(c)
        return self.go(c, nonblocking)

    cpdef allreduce_array(self, array, op, algorithm, out):
        """collectives.allreduce: ``array`` (anything np.asarray takes) combined over the ranks
        into ``out`` (a new array when None), which is returned; ``array`` is left untouched."""
        cdef Call c
        if not cnp.PyArray_Check(array):
            array = np.asarray(array)
        if out is None:
            out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(array), cnp.PyArray_DIMS(array),
                                    cnp.PyArray_TYPE(array), cnp.PyArray_IS_F_CONTIGUOUS(array)
                                    and not cnp.PyArray_IS_C_CONTIGUOUS(array))
        elif not cnp.PyArray_Check(out) or not same_shape(array, out):
            c = self.fresh(ALLREDUCE, "Allreduce", algorithm, False)
            c.error = (TypeError(f"allreduce: out must be a NumPy array, got {type(out).__name__}")
                       if not cnp.PyArray_Check(out) else ValueError(
                           f"allreduce: out has shape {out.shape} and dtype {out.dtype}, the result has shape "
                           f"{array.shape} and dtype {array.dtype}"))
            return self.go(c, False)
        self.allreduce(send_for(array, out), out, op, algorithm, False)
        return out

    # ---- order: run now, behind the pending nonblocking calls, or queued -----------------

    cdef bint ready(self) except -1:
        """Whether a call may run now, on this thread; raises when the Comm is unusable."""
        if self.broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {self.broken}")
        if self.ring != NULL:
            self.t_call = monotonic()
        # The progress thread runs the queued call at the head of the queue: its turn.
        return (self.progress is None or not self.progress.busy()
                or (self.queue_thread != 0 and PyThread_get_thread_ident() == self.queue_thread))

    cdef Call fresh(self, int coll, object method, object algorithm, bint nonblocking):
        """The Call to describe a call into: the Comm's own for a blocking call that runs at
        once, else a new one (queued, it lives until it has run)."""
        cdef Call c
        if not nonblocking and not self.call_busy and self.ready():
            c = self.call
            self.call_busy = True
        else:
            c = Call.__new__(Call, self.rank, self.size)
        c.begin(coll, method, algorithm)
        return c

    cdef object go(self, Call c, bint nonblocking):
        """Run the described call ``c``: now (blocking, its turn), after the pending calls
        (blocking), or queued (nonblocking: its Request).  A nonblocking call whose description
        failed raises at the call; its refusal is queued, so the other ranks raise at wait()."""
        cdef object job, error
        if c.algorithm is not None and c.error is None and c.algorithm not in <dict>self.algo_ids[c.coll]:
            # An algorithm's name is this rank's own argument: checked here, at the call.
            try:
                resolve_name(_NAMES[c.coll], c.algorithm)
            except ValueError as exc:
                c.error = exc
        if c is self.call:
            self.started += 1
            try:
                self.execute(c)
            finally:
                c.release()
                self.call_busy = False
            return None
        if self.broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {self.broken}")
        error = c.error
        if nonblocking and error is not None:
            # Raised here, at the call; the queued refusal raises its own copy on the progress
            # thread, where only the Request sees it.
            c.error = type(error)(*error.args)
        job = QueuedCall(self, c)
        if pyMPI.Query_thread() < pyMPI.THREAD_MULTIPLE:
            # A progress thread would call MPI beside the caller, which needs THREAD_MULTIPLE.
            log.info("collectives: MPI thread level below THREAD_MULTIPLE; nonblocking "
                     "collectives complete before they return")
            request = completed(job)
        else:
            if self.progress is None:
                self.progress = Progress()
            request = self.progress.submit(job)
        if not nonblocking:
            return request.wait()
        if error is not None:
            raise error
        return request

    def run(self, job):
        """Run ``job()`` (a collective of the caller's, on this Comm's private communicator)
        now, or behind the pending nonblocking calls; its result."""
        if self.ready():
            self.started += 1
            return job()
        if self.progress is None:
            self.progress = Progress()
        return self.progress.submit(QueuedJob(self, job)).wait()

    cdef int execute(self, Call c) except -1:
        """Plan, agree and run the described call ``c`` on this thread (its turn has come)."""
        cdef _Plan pl
        if c.native is not None:
            self.native(c)
            return 0
        if c.error is None and c.counts_pending:
            self.gather_counts(c)
            try:
                finish_reduce_scatter(c)
            except (ValueError, TypeError) as exc:
                c.error = exc
        if c.error is not None:
            self.refuse(c.coll, c.error)
        try:
            pl = self.plan(c)
        except (ValueError, TypeError) as exc:
            self.refuse(c.coll, exc)
        self.perform(c, pl)
        return 0

    # ---- plan ----------------------------------------------------------------------------

    cdef char *scratch(self, bint aux, Py_ssize_t nbytes) except NULL:
        cdef cnp.ndarray buf = self.aux if aux else self.tmp
        if nbytes > cnp.PyArray_NBYTES(buf):
            buf = np.zeros(nbytes, np.uint8)
            if aux:
                self.aux = buf
            else:
                self.tmp = buf
        return <char *>cnp.PyArray_DATA(buf)

    cdef _Plan plan(self, Call c):
        """The cached plan for ``c``'s shape, made on a miss (ValueError or TypeError when the
        choice is not usable)."""
        cdef _Plan pl
        cdef uint64_t h
        cdef Py_ssize_t i
        cdef dict ids
        if self.checked != self.check:  # the check decides whether the fused forms apply
            self.checked = self.check
            self.forget()
        algorithm = c.algorithm
        if algorithm is None:
            c.key[1] = 0
        else:
            ids = <dict>self.algo_ids[c.coll]
            word = ids.get(algorithm)
            if word is None:
                word = ids[algorithm] = len(ids) + 1
            c.key[1] = word
        # The cache is one LRU of plans; the collective's latest plan and FRONT recent ones
        # (by the key's hash) are found without it.
        if c.once:
            return self.made(c, algorithm)
        found = self.hot[c.coll]
        if found is not None and (<_Plan>found).serves(c):
            return <_Plan>found
        h = key_hash(c)
        found = self.front[h & (FRONT - 1)]
        if found is not None and (<_Plan>found).serves(c):
            self.hot[c.coll] = found
            return <_Plan>found
        # The rest of the cache, by the key's bytes: a Python object only on this miss.
        key = PyBytes_FromStringAndSize(<char *>c.key, sizeof(c.key))
        if c.key_counts:
            key += PyBytes_FromStringAndSize(<char *>c.kcounts, c.size * sizeof(int64_t))
        found = self.plans.get(key)
        if found is None:
            pl = self.made(c, algorithm)
            self.plans.put(key, pl, pl.steps.nbytes + PLAN_OVERHEAD + 8 * pl.nkcounts)
            found = pl
        self.front[h & (FRONT - 1)] = self.hot[c.coll] = found
        return <_Plan>found

    cdef _Plan made(self, Call c, object algorithm):
        """A new plan for ``c``'s shape (collectives.plans.make).  An Alltoallv's bytes differ
        from rank to rank, and every rank must choose alike: its choice is by the rank count
        alone, as for no bytes."""
        cdef _Plan pl = _Plan()
        made = self.make_plan(self, _NAMES[c.coll], algorithm, c.count, 0 if c.summed else c.nbytes, c.uniform,
                              c.builder_args(), None if c.opc < 0 else c.opc, c.dtype, c.apart)
        pl.steps = np.ascontiguousarray(made.steps, dtype=np.int64)
        pl.tmp_count, pl.nreq, pl.reads_in, pl.name = made.tmp_count, made.nreq, made.reads_in, made.name
        pl.algo, pl.fused, pl.lead, pl.node_aware, pl.reason = (made.index, made.fused, made.lead,
                                                                 made.node_aware, made.reason)
        pl.shm = made.shm
        pl.template = c.template
        pl.nsteps = pl.steps.shape[0]
        pl.rows = <const int64_t *>cnp.PyArray_DATA(pl.steps)
        memcpy(pl.key, c.key, sizeof(pl.key))
        pl.nkcounts = c.size if c.key_counts else 0
        if pl.nkcounts:
            pl.kcounts = <int64_t *>malloc(c.size * sizeof(int64_t))
            if pl.kcounts == NULL:
                raise MemoryError()
            memcpy(pl.kcounts, c.kcounts, c.size * sizeof(int64_t))
        return pl

    cdef Py_ssize_t fill(self, Call c, _Plan pl) except -1:
        """The rows of template plan ``pl`` for the call ``c`` into ``filled``: each block marker
        (block j as the offset of an IN or ACC region) becomes the block's byte offset and count
        (``c.counts``); a message of 0 bytes becomes none, as at its other end, whose count is
        the same.  The number of rows."""
        cdef Py_ssize_t p = c.nblocks, k, n = 0, j
        cdef Py_ssize_t *cnt = c.counts
        cdef const int64_t *t
        cdef int64_t *row
        cdef int half, b
        if self.filled is None or self.filled.shape[0] < pl.nsteps:
            self.filled = np.empty((pl.nsteps, NCOLS), np.int64)
        for k in range(pl.nsteps):
            t = pl.rows + k * NCOLS
            row = <int64_t *>cnp.PyArray_DATA(self.filled) + n * NCOLS
            memcpy(row, t, NCOLS * sizeof(int64_t))
            if t[0] == SENDRECV or t[0] == ISEND or t[0] == IRECV or t[0] == COPY:
                for half in range(1, NCOLS, 4):
                    b, j = <int>t[half], t[half + 1]
                    if b == IN_BUF:
                        row[half + 1], row[half + 2] = cnt[p + j], cnt[j]
                    elif b == ACC_BUF:
                        row[half + 1], row[half + 2] = cnt[3 * p + j], cnt[2 * p + j]
                    if t[0] != COPY and row[half + 3] != NONE and row[half + 2] == 0:
                        row[half], row[half + 1], row[half + 3] = NONE, 0, NONE
                if t[0] != COPY and row[4] == NONE and row[8] == NONE:
                    continue
            n += 1
        return n

    # ---- agree: the checked exchange of the call's fingerprint -----------------------------

    cdef int64_t *fields(self) noexcept:
        """Where a call writes the fields the agreement compares."""
        return self.vec + 3

    cdef char *body(self) noexcept:
        """Where a fused call puts its payload before ``agree`` and finds the result after."""
        return self.x.mine + 8 * self.x.nh

    cdef void fingerprint(self, int coll, int algo, int nfields, bint error=False, int kind=X_HEADER,
                          Py_ssize_t nbytes=0, Py_ssize_t block=0, int dtype=0, int op=0,
                          bint has=True) noexcept:
        """Fill the exchange's message: [error, coll, algo, fields, -coll, -algo, -fields] (the
        first ``nfields`` fields are in place, the rest 0), then the payload's length."""
        cdef int i, w = self.width
        cdef int64_t *v = self.vec
        self.nf = nfields
        v[0] = error
        v[1] = coll
        v[2] = algo
        for i in range(w):
            if i >= nfields:
                v[3 + i] = 0
            v[5 + w + i] = UNKNOWN if v[3 + i] == UNKNOWN else -v[3 + i]
        v[3 + w] = -coll
        v[4 + w] = -algo
        self.x.kind = kind
        self.x.w.code = coll
        self.x.nbytes, self.x.block, self.x.dtype, self.x.op = nbytes, block, dtype, op
        v[self.nvec] = nbytes if kind != X_HEADER and has else 0

    cdef int exchange(self, object collective, object algorithm) except -1:
        """The checked exchange of the message ``fingerprint`` filled: in C, or its NumPy
        twin, or a phase of the shared segment; a stall marks the Comm unusable."""
        cdef int rc
        if self.shm != NULL:
            self.shm.park, self.shm.unpark = release_gil, take_gil
            if self.x.kind == X_REDUCE:
                # A summed payload (Alltoallv's digest) is an all-reduce in the segment.
                rc = shm_allreduce(self.shm, self.vec, self.nf, self.width, True, self.body(), self.body(),
                                   self.x.nbytes // ck_itemsize(self.x.dtype), self.x.dtype, self.x.op, 0)
                if rc == SHM_DISAGREED:
                    rc = 0  # the fold is in ``vec``, for judge
            else:
                rc = shm_agree(self.shm, self.vec, self.nf, self.width)
            if rc:
                self.shm_failed(rc, collective, algorithm)
            return 0
        try:
            if self.pure:
                data = self.body_array[:self.x.nbytes] if self.x.kind != X_HEADER else None
                _twin.exchange(self.comm, self.vec_array, self.x.kind, data, self.x.block, self.x.dtype,
                               self.x.op, self.vec[self.nvec] != 0, self.timeout, collective, algorithm,
                               self.x.piece)
            else:
                x_checked(&self.x, self.rank, self.size, collective, algorithm)
        except StallError as exc:
            stalled(self, exc, self.started)
            raise
        return 0

    cdef int judge(self, object name, tuple keys, bint counts, bint error=False) except -1:
        """After the exchange: raise the agreement's error unless every rank agreed."""
        cdef int i, w = self.width
        cdef int64_t *v = self.vec
        if v[0]:
            if error:
                return 0
            raise Disagreement(f"{name}: invalid arguments on another rank (it raised the details)")
        if x_agrees(&self.x):
            return 0
        keys = ("collective", "algorithm") + keys
        if counts:
            keys += tuple(f"count{i}" for i in range(self.size))
        raise Disagreement(disagreement(name, list(keys), [-v[3 + w + i] for i in range(len(keys))],
                                        [v[1 + i] for i in range(len(keys))]))

    cdef int agree(self, Call c, _Plan pl, bint payload) except -1:
        """The agreement on ``c`` (skipped unchecked, unless the plan is fused: its exchange is
        the collective): its fields, and with ``payload`` the fused form's data."""
        cdef double t0
        if pl.fused < 0 and (self.size == 1 or not self.check):
            return 0  # one rank's messages all go to itself: the description compared their counts
        memcpy(self.fields(), c.fields, c.nfields * sizeof(int64_t))
        if payload:
            self.fingerprint(c.coll, pl.algo, c.nfields, False, pl.fused, c.fbytes, c.fblock, c.fdtype, c.fop,
                             c.fhas)
        elif c.summed:
            # The payload is the digest of the call's counts, summed over the ranks.
            (<uint64_t *>self.body())[0] = c.digest
            self.fingerprint(c.coll, pl.algo, c.nfields, False, X_REDUCE, sizeof(uint64_t), 0, U64_CODE, SUM_CODE)
        else:
            self.fingerprint(c.coll, pl.algo, c.nfields)
        t0 = monotonic() if self.ring != NULL else 0
        self.exchange(_NAMES[c.coll], pl.name if pl.fused >= 0 else "argument check")
        if self.ring != NULL:
            # A fused plan's exchange carries the data: it is the transfer.
            put(self.ring, t0, monotonic(), TRANSFER if pl.fused >= 0 else CHECK, c.coll, pl.algo, c.nbytes,
                c.elements(), -1)
        self.judge(_NAMES[c.coll], c.keys, c.per_rank)
        if c.summed and (<uint64_t *>self.body())[0] != 0:
            self.unmatched(c)
        return 0

    cdef int unmatched(self, Call c) except -1:
        """Raise the same Disagreement on every rank, naming a message whose counts differ at
        its two ends, after the digests of an Alltoallv's or a neighbourhood collective's counts
        did not sum to 0 (every rank saw that sum, so every rank is here).  The counts are
        gathered to say which: only a mistaken call pays for that."""
        cdef Py_ssize_t i, b = c.nblocks, size = c.recv.size
        cdef Py_ssize_t *cnt = c.counts
        if c.hood is None:
            sent = {(i, 0): cnt[i] // size for i in range(self.size)}
            received = {(i, 0): cnt[2 * b + i] // size for i in range(self.size)}
        else:
            sent = {(peer, k): cnt[block] // size for peer, block, k in c.hood.sends}
            received = {(peer, k): cnt[2 * b + block] // size for peer, block, k in c.hood.recvs}
        every = self.comm.allgather((sent, received))
        for i, (out, _) in enumerate(every):
            for (j, k), n in sorted(out.items()):
                m = every[j][1].get((i, k))
                if m != n:
                    which = f" (message {k + 1} between them)" if k else ""
                    theirs = "no message" if m is None else f"{m}"
                    raise Disagreement(f"{c.method}: rank {i} sends {n} elements to rank {j}, which receives {theirs} "
                                       f"from rank {i}{which}: the counts differ across ranks")
        for j, (_, into) in enumerate(every):
            for (i, k) in sorted(into):
                if (j, k) not in every[i][0]:
                    raise Disagreement(f"{c.method}: rank {j} receives from rank {i}, which sends it no message: "
                                       "the neighbourhoods differ across ranks")
        raise Disagreement(f"{c.method}: the counts' digests differ across ranks, but the counts match")

    def agree_fields(self, collective, algorithm, tuple keys, values, bint error=False):
        """``collectives.agreement.agree``: the checked exchange of ``values`` named ``keys``
        (None: this rank cannot know it) for ``collective`` (a name of
        agreement.COLLECTIVE_INDEX) run with ``algorithm`` (a name, "native", or None); the
        agreed values (None with ``error``: this rank raises its own error next)."""
        cdef int i, n = len(values), coll = COLLECTIVE_INDEX[collective]
        if n > self.width:
            raise RuntimeError(f"{collective}: {n} fields to agree on, room for {self.width}")
        algo = 0 if algorithm is None else (choices(collective) if collective in INDEX else [collective]
                                            ).index(algorithm)
        for i in range(n):
            self.vec[3 + i] = UNKNOWN if values[i] is None else values[i]
        self.fingerprint(coll, algo, n, error)
        self.exchange(collective, "argument check")
        self.judge(collective, keys, False, error)
        return None if error else [self.vec[3 + i] for i in range(n)]

    cdef int refuse(self, int coll, object exc) except -1:
        """Raise this rank's error ``exc`` after taking part in the agreement with the error
        flag set, so the other ranks raise too instead of waiting."""
        if self.check and self.size > 1:
            self.fingerprint(coll, 0, 0, True)
            self.exchange(_NAMES[coll], "argument check")
        raise exc

    cdef int gather_counts(self, Call c) except -1:
        """Every rank's count of Reduce_scatter's recvbuf into ``c.counts``.  Checked, the
        agreement's exchange gathers them (each rank fills in its own field): a rank in another
        collective, or whose arguments were invalid, meets it and all raise, where MPI's
        Allgather would leave the others waiting."""
        cdef int i
        cdef Py_ssize_t mine = c.counts[self.rank]
        if self.check and self.size > 1:
            for i in range(self.size):
                self.vec[3 + i] = mine if i == self.rank else UNKNOWN
            self.fingerprint(_COUNTS_INDEX, 0, self.size)
            self.exchange(COUNTS, "argument check")
            self.judge(COUNTS, tuple(f"count{i}" for i in range(self.size)), False)
            for i in range(self.size):
                c.counts[i] = self.vec[3 + i]
        else:
            for i, n in enumerate(self.comm.allgather(mine)):
                c.counts[i] = n
        return 0

    # ---- execute -------------------------------------------------------------------------

    cdef void copy(self, const Copy *op, Call c, _Plan pl, char *stage) noexcept:
        """One of the Call's copies, its pointers resolved against ``stage`` and the payload."""
        cdef char *dst = op.dst
        cdef char *src = op.src
        cdef Py_ssize_t p = self.size
        cdef Py_ssize_t *cnt = c.counts
        if op.kind == C_NONE or (op.unless_reads_in and pl is not None and pl.reads_in and c.moves):
            return
        if op.dst_base == B_STAGE:
            dst = stage + <Py_ssize_t>dst
        elif op.dst_base == B_BODY:
            dst = self.body() + <Py_ssize_t>dst
        if op.src_base == B_STAGE:
            src = stage + <Py_ssize_t>src
        elif op.src_base == B_BODY:
            src = self.body() + <Py_ssize_t>src
        if op.kind == C_BYTES:
            if dst != src:
                memmove(dst, src, op.n)
        elif op.kind == C_PACK:
            move_blocks(dst, cnt + 2 * p, src, cnt + p, cnt, p, op.n)
        else:
            move_blocks(dst, cnt + p, src, cnt + 2 * p, cnt, p, op.n)

    cdef int perform(self, Call c, _Plan pl) except -1:
        """Agree on ``c`` and run it as ``pl`` says: the fused exchange, the node-aware phases,
        or the schedule with the copies around it."""
        cdef char *stage
        cdef bint early
        cdef Py_ssize_t nb
        if pl.shm >= 0:
            return self.in_segment(c, pl)
        if pl.fused >= 0:
            self.copy(&c.fin, c, None, NULL)
            self.agree(c, pl, True)
            self.copy(&c.fout, c, None, NULL)
            self.done(c, pl)
            return 0
        if pl.node_aware is not None:
            self.agree(c, pl, False)
            nb = c.nbytes
            target = array_at(c.recv.ptr, nb).view(dtype_of(&c.recv))
            source = None if c.send.ptr == c.recv.ptr else array_at(c.send.ptr, nb).view(dtype_of(&c.recv)).copy()
            pl.node_aware.build(self.nodes, source, target, c.op)
            self.done(c, pl)
            return 0
        # The all-reduce's exchange runs after the schedule's first step has started.
        early = pl.lead and c.moves and self.check
        if not early:
            self.agree(c, pl, False)
        stage = self.scratch(True, c.scratch) if c.scratch else c.stage
        self.copy(&c.pre, c, pl, stage)
        if c.moves:
            if early:
                memcpy(self.fields(), c.fields, c.nfields * sizeof(int64_t))
                self.fingerprint(c.coll, pl.algo, c.nfields)
                if self.launch(c, pl, stage, stage, True):
                    self.judge(_NAMES[c.coll], c.keys, c.per_rank)
            else:
                self.launch(c, pl, stage, stage)
        self.copy(&c.post, c, pl, stage)
        self.done(c, pl)
        return 0

    cdef int launch(self, Call c, _Plan pl, char *acc, char *inp, bint early=False) except -1:
        """Run ``pl`` over the Call's ACC, TMP, IN and OUT (``acc``, ``inp``: the stage, where the
        Call's ACC or IN lies in it); a failure marks the Comm unusable.  ``early``: the exchange,
        its message filled by ``fingerprint``, runs after the plan's first ``lead`` rows have
        started (run_checked); 1 when it disagreed, the schedule not run."""
        cdef char *buf[MAX_BUFS]
        cdef Py_ssize_t tmp_n = pl.tmp_count * ck_itemsize(c.ldtype)
        cdef double t0
        cdef int i, disagreed = 0, coll = c.coll
        cdef const int64_t *rows = pl.rows
        cdef Py_ssize_t nsteps = pl.nsteps
        steps = pl.steps
        if pl.template:
            nsteps = self.fill(c, pl)
            rows = <const int64_t *>cnp.PyArray_DATA(self.filled)
            steps = self.filled[:nsteps]
        buf[ACC_BUF] = (acc + <Py_ssize_t>c.acc) if c.acc_base == B_STAGE else c.acc
        buf[IN_BUF] = (inp + <Py_ssize_t>c.inp) if c.in_base == B_STAGE else c.inp
        buf[TMP_BUF] = self.scratch(False, tmp_n) if pl.tmp_count else _empty
        buf[OUT_BUF] = c.out
        for i in range(NBUFS):
            if buf[i] == NULL:
                buf[i] = _empty
        t0 = monotonic() if self.ring != NULL else 0
        try:
            if self.pure:
                bufs = [array_at(buf[ACC_BUF], c.acc_n), array_at(buf[TMP_BUF], tmp_n),
                        array_at(buf[IN_BUF], c.in_n), array_at(buf[OUT_BUF], c.out_n)]
                run_python(self.comm, steps, bufs, c.ldtype, c.lop, self.tags[coll], self.timeout,
                           f"{_NAMES[coll]} ({pl.name})")
            else:
                disagreed = run_checked(self.comm.ob_mpi, rows, nsteps, buf, c.ldtype, c.lop, self.tags[coll],
                                        pl.nreq, _NAMES[coll], self.timeout, pl.name, &self.x if early else NULL,
                                        pl.lead if early else 0, self.ring, coll)
        except ScheduleError as exc:
            self.broken = str(exc)
            raise
        except StallError as exc:
            stalled(self, exc, self.started)
            raise
        if self.ring != NULL:
            put(self.ring, t0, monotonic(), TRANSFER, coll, pl.algo, c.nbytes, c.elements(), -1)
        return disagreed

    cdef int in_segment(self, Call c, _Plan pl) except -1:
        """Run ``c`` in the node's segment as ``pl`` says (its form: direct or pipelined); the
        fingerprint rides in the first phase.  A call of at most GIL_HELD_BYTES runs holding
        the GIL, which a wait gives up once it outlasts its spin (collectives._shm); a larger
        one releases it for its copies."""
        cdef shm_seg *s = self.shm
        cdef int nf = c.nfields, coll = c.coll, rc, i, p = self.size
        cdef int64_t *words = self.segment.words
        cdef Py_ssize_t *dis
        cdef char *inp = c.send.ptr
        cdef char *out = c.recv.ptr
        cdef size_t block = 0
        cdef double t0 = monotonic() if self.ring != NULL else 0
        # The fingerprint the first phase publishes: [error, collective, algorithm, fields]
        # (the segment's fold fills in the rest of the vector when it has to).
        self.vec[0], self.vec[1], self.vec[2] = 0, coll, pl.algo
        memcpy(self.fields(), c.fields, nf * sizeof(int64_t))
        self.nf = nf
        if coll == ALLGATHER:
            # Every rank's block: its bytes and where it goes in recvbuf (Allgatherv's displacements).
            dis = c.counts + p
            for i in range(p):
                words[i] = c.kcounts[i]
                words[p + i] = dis[i] * c.recv.size if c.key_counts else i * c.kcounts[i]
            if inp == out + words[p + self.rank]:
                inp = NULL
        elif coll == REDUCE_SCATTER:
            if c.in_place:
                # The result's block goes to the start of recvbuf, over input still to be read.
                inp = self.scratch(True, c.nbytes)
                memcpy(inp, c.send.ptr, c.nbytes)
            words = <int64_t *>c.counts
        elif coll == GATHER:
            inp, out, block = c.inp, c.stage, c.kcounts[0]
        elif coll == SCATTER:
            inp, out, block = c.stage, (c.acc if c.acc_base != B_STAGE else NULL), c.kcounts[0]
        if c.nbytes <= GIL_HELD_BYTES:
            s.park, s.unpark = release_gil, take_gil
            rc = run_in_segment(s, coll, pl.shm, self.vec, nf, self.width, self.check, inp, out, c.count, c.nbytes,
                                c.dtype, c.opc, <int>c.root, words, block, self.segment.chunk)
        else:
            s.park = s.unpark = NULL
            with nogil:
                rc = run_in_segment(s, coll, pl.shm, self.vec, nf, self.width, self.check, inp, out, c.count,
                                    c.nbytes, c.dtype, c.opc, <int>c.root, words, block, self.segment.chunk)
        if rc == SHM_DISAGREED:
            self.judge(_NAMES[coll], c.keys, c.per_rank)
        elif rc:
            self.shm_failed(rc, _NAMES[coll], pl.name)
        if self.ring != NULL:
            put(self.ring, t0, monotonic(), TRANSFER, coll, pl.algo, c.nbytes, c.elements(), -1)
        self.done(c, pl)
        return 0

    cdef int shm_failed(self, int rc, object collective, object algorithm) except -1:
        """Raise for a shared-memory phase's failure ``rc``: a stall (the Comm is unusable
        after it) or an op the dtype lacks."""
        cdef shm_seg *s = self.shm
        cdef int r
        if rc == SHM_BAD_OP:
            raise TypeError(f"{collective}: the op is not defined on the dtype")
        missing = [(r, "receive") for r in range(s.size) if not shm_arrived(s, r)]
        exc = StallError(label(collective, algorithm), s.step, self.rank, missing, s.waited)
        stalled(self, exc, self.started)
        raise exc

    cdef void done(self, Call c, _Plan pl):
        self.last_algorithm = pl.name
        self.calls += 1
        if self.ring != NULL:
            put(self.ring, self.t_call, monotonic(), CALL, c.coll, pl.algo, c.nbytes, c.elements(), -1)
        if self.explain:
            self.say(c.coll, f"{c.nbytes} B -> {pl.name}: {pl.reason}")

    cdef void say(self, int coll, object text):
        """COLLECTIVES_EXPLAIN's line for one call."""
        print(f"[collectives explain] rank {self.rank}/{self.size} {_NAMES[coll]} {text}",
              file=sys.stderr, flush=True)

    cdef object native(self, Call c):
        """Run mpi4py's own method of ``c`` on the private communicator, after the agreement
        (which names MPI's own call "native")."""
        cdef int coll = c.coll
        log.info("%s: %s; native MPI call", c.method, c.native)
        self.last_algorithm = "native"
        if self.explain:
            self.say(coll, f"-> native: {c.native}; delegated to MPI's {c.method}")
        if self.check and self.size > 1:
            self.fingerprint(coll, self.native_index[coll], 0)
            self.exchange(_NAMES[coll], "argument check")
            self.judge(_NAMES[coll], (), False)
        # A neighbourhood collective is a method of the topology's mpi4py class, not Intracomm's.
        getattr(typed(self.comm) if c.hood is not None else self.comm, c.method)(*c.args)
        if self.ring != NULL:
            put(self.ring, self.t_call, monotonic(), CALL, coll, self.native_index[coll], 0, 0, -1)


cdef bint same_shape(cnp.ndarray a, cnp.ndarray b) except -1:
    """Whether the arrays have one shape and one dtype."""
    cdef int i, n = cnp.PyArray_NDIM(a)
    if n != cnp.PyArray_NDIM(b) or not cnp.PyArray_EquivTypes(a.descr, b.descr):
        return False
    for i in range(n):
        if cnp.PyArray_DIMS(a)[i] != cnp.PyArray_DIMS(b)[i]:
            return False
    return True


cdef inline bint is_fortran_only(cnp.ndarray a) noexcept:
    return cnp.PyArray_IS_F_CONTIGUOUS(a) and not cnp.PyArray_IS_C_CONTIGUOUS(a)


cdef object send_for(cnp.ndarray array, cnp.ndarray out):
    """The send argument of a functional call writing ``out``: MPI.IN_PLACE when ``array`` is
    ``out``, else ``array`` with ``out``'s memory order (its elements meet ``out``'s in flat
    memory order), a copy of it when it shares memory with ``out``."""
    cdef char *a = <char *>cnp.PyArray_DATA(array)
    cdef char *o = <char *>cnp.PyArray_DATA(out)
    if array is out:
        return IN_PLACE
    if a < o + cnp.PyArray_NBYTES(out) and o < a + cnp.PyArray_NBYTES(array):
        return np.array(array, order="F" if is_fortran_only(out) else "C")
    if is_fortran_only(out):
        return array if cnp.PyArray_IS_F_CONTIGUOUS(array) else np.asfortranarray(array)
    return np.ascontiguousarray(array) if is_fortran_only(array) else array
