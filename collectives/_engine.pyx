# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The core of a Comm's collectives: order, plans, agreement and execution.

``Engine`` holds what a Comm's calls share: the plan cache (``collectives.plans`` makes a plan
on a miss), the checked exchange's message (the fingerprint ``collectives.agreement``
describes; ``fingerprint``, ``exchange``, ``judge``), the scratch buffers, the progress thread
of the nonblocking calls, and the leaves that run a call: the native executor and exchange,
or, with ``pure`` (COLLECTIVES_PUREPYTHON=1), their NumPy twins ``schedule.run_python`` and
``exchange.exchange``.  ``collectives._dispatch`` describes each collective on top of it.
"""
import logging
import sys

from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdlib cimport malloc, free
import numpy as np
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._csrc cimport ck_itemsize
from collectives._exchange cimport X_PIECES, x_agrees, x_checked
from collectives._executor cimport ACC_BUF, IN_BUF, NBUFS, OUT_BUF, TMP_BUF, run_checked
from collectives._requests cimport NEVER_S, monotonic
from collectives._timeline cimport CALL, CHECK, TRANSFER, put
from collectives import exchange as _twin
from collectives._executor import ScheduleError
from collectives.agreement import COLLECTIVE_INDEX, Disagreement, disagreement
from collectives.cache import ByteLRU
from collectives.exchange import FUSED_BYTES, FUSED_DEFAULT, TAG as EXCHANGE_TAG
from collectives.nonblocking import Progress, completed
from collectives.registry import ALGORITHMS, PLAN_OVERHEAD, choices
from collectives.schedule import run_python
from collectives.watchdog import StallError, stalled

cnp.import_array()

cdef char _empty[16]
cdef object _NAMES = tuple(ALGORITHMS)
log = logging.getLogger("collectives")


cdef class _Plan:
    """A cached plan with everything one call needs, resolved once."""


cdef object array_at(char *ptr, Py_ssize_t nbytes):
    """A uint8 NumPy view of ``nbytes`` at ``ptr`` (the NumPy twins take arrays)."""
    if nbytes <= 0:
        return np.empty(0, np.uint8)
    return np.asarray(<char[:nbytes]>ptr).view(np.uint8)


cdef class Engine:
    """What the collectives of one ``collectives.Comm`` share: plans, agreement, execution.

    ``comm`` is the Comm's private duplicate; ``make_plan(engine, collective, algorithm,
    count, nbytes, uniform, args, op, dtype, apart)`` is ``collectives.plans.make``, called
    on a plan cache miss; ``eager``, ``split_most`` and ``fused`` are the Comm's agreed eager
    limit, largest cut message and most a fused collective carries (collectives.eager.agreed).  The attributes the facade reads are public: ``check``,
    ``last_algorithm``, ``broken`` (why a failed step made the Comm unusable), ``progress``
    (the thread of the nonblocking calls), ``started`` (collectives started: the watchdog's
    call numbers) and ``calls`` (those run by this library's algorithms, not handed to MPI).
    """

    def __init__(self, MPI.Comm comm, settings, bint check, double timeout, on_timeout, algorithms,
                 nodes, make_plan, tags, bint pure, Recorder timeline=None, Py_ssize_t eager=0,
                 Py_ssize_t split_most=0, Py_ssize_t fused=FUSED_DEFAULT):
        cdef int i
        self.comm = comm
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
        self.plans = ByteLRU()
        self.hot = [None] * NCOLL
        self.checked = check
        for i in range(NCOLL):
            self.tags[i] = tags[i]
            self.native_index[i] = choices(_NAMES[i]).index("native")
        self.width = 4 + self.size
        self.nvec = 5 + 2 * self.width
        self.x.comm, self.x.tag = comm.ob_mpi, EXCHANGE_TAG
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
        self.counts = <Py_ssize_t *>malloc(3 * self.size * sizeof(Py_ssize_t))
        if self.x.mine == NULL or self.counts == NULL:
            raise MemoryError()
        whole = array_at(self.x.mine, self.x.cap)
        self.vec_array = whole[:8 * self.nvec].view(np.int64)
        self.body_array = whole[8 * self.x.nh:]
        self.watch(timeout)
        self.tmp = np.zeros(64, np.uint8)
        self.aux = np.zeros(64, np.uint8)
        self.held = Views()

    def __dealloc__(self):
        free(self.x.mine)
        free(self.counts)

    def watch(self, double limit):
        """Watch every wait for ``limit`` seconds (collectives.watchdog); 0 turns it off."""
        self.timeout = limit
        self.x.w.limit = limit if limit > 0 else NEVER_S
        self.x.w.ring = self.ring

    def __len__(self):
        """Number of cached plans."""
        return len(self.plans)

    def forget(self):
        """Drop every cached plan."""
        self.plans.clear()
        self.hot = [None] * NCOLL

    def close(self):
        """Finish the queued nonblocking calls and stop the progress thread."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        self.tmp = self.aux = None

    # ---- order: blocking calls behind pending nonblocking ones ---------------------------

    cdef bint ready(self) except -1:
        """Whether a call may run now, on this thread; raises when the Comm is unusable."""
        if self.broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {self.broken}")
        if self.ring != NULL:
            self.t_call = monotonic()
        # The progress thread runs the queued call at the head of the queue: its turn.
        return (self.progress is None or not self.progress.busy()
                or (self.queue_thread != 0 and PyThread_get_thread_ident() == self.queue_thread))

    def start(self, method, args):
        """Start ``getattr(self, method)(*args)`` on the progress thread; its Request."""
        if self.broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {self.broken}")
        job = Queued(self, method, args)
        if pyMPI.Query_thread() < pyMPI.THREAD_MULTIPLE:
            # A progress thread would call MPI beside the caller, which needs THREAD_MULTIPLE.
            log.info("collectives: MPI thread level below THREAD_MULTIPLE; nonblocking "
                     "collectives complete before they return")
            return completed(job)
        if self.progress is None:
            self.progress = Progress()
        return self.progress.submit(job)

    cdef object behind(self, method, tuple args):
        """Run a blocking call after the nonblocking ones still pending."""
        self.start(method, args).wait()

    def run(self, job):
        """Run ``job()`` (a collective of the caller's, on this Comm's private communicator)
        now, or behind the pending nonblocking calls."""
        if self.ready():
            self.started += 1
            return job()
        return self.start("run", (job,)).wait()

    # ---- select and plan ----------------------------------------------------------------

    cdef char *scratch(self, bint aux, Py_ssize_t nbytes) except NULL:
        cdef cnp.ndarray buf = self.aux if aux else self.tmp
        if nbytes > cnp.PyArray_NBYTES(buf):
            buf = np.zeros(nbytes, np.uint8)
            if aux:
                self.aux = buf
            else:
                self.tmp = buf
        return <char *>cnp.PyArray_DATA(buf)

    cdef _Plan plan(self, int coll, object algorithm, tuple key, Py_ssize_t count,
                    Py_ssize_t nbytes, bint uniform, tuple args, int op=-1, int dtype=-1,
                    bint apart=False):
        """The cached plan for ``key``, made on a miss (ValueError or TypeError when the
        choice is not usable).  ``apart``: the input and output do not overlap (``key`` must
        say so too)."""
        cdef _Plan pl
        if self.checked != self.check:  # the check decides whether the fused forms apply
            self.checked = self.check
            self.forget()
        # A repeated call shape skips the LRU, a Python call taking a lock that cost about as
        # much as an 8 B all-reduce's communication.  A hot plan the LRU evicts stays usable.
        pl = self.hot[coll]
        if pl is not None and pl.key == key:
            return pl
        pl = self.plans.get(key)
        if pl is None:
            made = self.make_plan(self, _NAMES[coll], algorithm, count, nbytes, uniform, args,
                                  None if op < 0 else op, dtype, apart)
            pl = _Plan()
            (pl.steps, pl.tmp_count, pl.nreq, pl.reads_in, pl.name, pl.algo, pl.fused, pl.lead,
             pl.node_aware, pl.reason) = made
            pl.steps = np.ascontiguousarray(pl.steps, dtype=np.int64)
            pl.nsteps = pl.steps.shape[0]
            pl.rows = <const int64_t *>cnp.PyArray_DATA(pl.steps)
            pl.nbytes, pl.count = nbytes, count
            pl.key = key
            self.plans.put(key, pl, pl.steps.nbytes + PLAN_OVERHEAD)
        self.hot[coll] = pl
        return pl

    # ---- agree: the checked exchange of the call's fingerprint -----------------------------

    cdef int64_t *fields(self) noexcept:
        """Where a call writes the fields the agreement compares."""
        return self.vec + 3

    cdef char *body(self) noexcept:
        """Where a fused call puts its payload before ``agree`` and finds the result after."""
        return self.x.mine + 8 * self.x.nh

    cdef void fingerprint(self, int coll, int algo, int nfields, bint error=False, int kind=X_HEADER,
                          Py_ssize_t nbytes=0, Py_ssize_t block=0, int dtype=BYTE_CODE, int op=0,
                          bint has=True) noexcept:
        """Fill the exchange's message: [error, coll, algo, fields, -coll, -algo, -fields] (the
        first ``nfields`` fields are in place, the rest 0), then the payload's length."""
        cdef int i, w = self.width
        cdef int64_t *v = self.vec
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
        twin; a stall marks the Comm unusable."""
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

    cdef int agree(self, int coll, _Plan pl, int nfields, tuple keys, bint counts,
                   Py_ssize_t nbytes=0, Py_ssize_t block=0, int dtype=BYTE_CODE, int op=0,
                   bint has=True) except -1:
        """The agreement on the call (skipped unchecked, unless the plan is fused: its
        exchange is the collective); ``keys`` name the first ``nfields`` fields, followed by
        count0, count1, ... when ``counts``."""
        if pl.fused < 0 and (self.size == 1 or not self.check):
            return 0
        self.fingerprint(coll, pl.algo, nfields, False, X_HEADER if pl.fused < 0 else pl.fused, nbytes,
                         block, dtype, op, has)
        cdef double t0 = monotonic() if self.ring != NULL else 0
        self.exchange(_NAMES[coll], pl.name if pl.fused >= 0 else "argument check")
        if self.ring != NULL:
            # A fused plan's exchange carries the data: it is the transfer.
            put(self.ring, t0, monotonic(), TRANSFER if pl.fused >= 0 else CHECK, coll, pl.algo, nbytes,
                self.elements(coll, pl), -1)
        return self.judge(_NAMES[coll], keys, counts)

    def agree_fields(self, collective, algorithm, tuple keys, values, bint error=False):
        """``collectives.agreement.agree``: the checked exchange of ``values`` named ``keys``
        (None: this rank cannot know it) for ``collective`` (a name of
        agreement.COLLECTIVE_INDEX) run with ``algorithm`` (a name, "native", or None); the
        agreed values (None with ``error``: this rank raises its own error next)."""
        cdef int i, n = len(values), coll = COLLECTIVE_INDEX[collective]
        if n > self.width:
            raise RuntimeError(f"{collective}: {n} fields to agree on, room for {self.width}")
        algo = 0 if algorithm is None else (choices(collective) if collective in ALGORITHMS else [collective]
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

    # ---- execute -------------------------------------------------------------------------

    cdef int launch(self, int coll, _Plan pl, char *acc, Py_ssize_t acc_n, char *inp, Py_ssize_t in_n,
                    int dtype, int op, char *out=NULL, Py_ssize_t out_n=0, bint early=False) except -1:
        """Run ``pl`` over ACC, TMP, IN and OUT (byte lengths ``*_n``); a failure marks the
        Comm unusable.  ``early``: the exchange, its message filled by ``fingerprint``, runs
        after the plan's first ``lead`` rows have started (run_checked); 1 when it disagreed,
        the schedule not run."""
        cdef char *buf[NBUFS]
        cdef Py_ssize_t tmp_n = pl.tmp_count * ck_itemsize(dtype)
        buf[ACC_BUF] = acc if acc != NULL else _empty
        buf[TMP_BUF] = self.scratch(False, tmp_n) if pl.tmp_count else _empty
        buf[IN_BUF] = inp if inp != NULL else _empty
        buf[OUT_BUF] = out if out != NULL else _empty
        name = f"{_NAMES[coll]} ({pl.name})"
        cdef double t0 = monotonic() if self.ring != NULL else 0
        cdef int disagreed = 0
        try:
            if self.pure:
                bufs = [array_at(buf[ACC_BUF], acc_n), array_at(buf[TMP_BUF], tmp_n),
                        array_at(buf[IN_BUF], in_n), array_at(buf[OUT_BUF], out_n)]
                run_python(self.comm, pl.steps, bufs, dtype, op, self.tags[coll], self.timeout, name)
            else:
                disagreed = run_checked(self.comm.ob_mpi, pl.rows, pl.nsteps, buf, dtype, op, self.tags[coll],
                                        pl.nreq, _NAMES[coll], self.timeout, pl.name, &self.x if early else NULL,
                                        pl.lead if early else 0, self.ring, coll)
        except ScheduleError as exc:
            self.broken = str(exc)
            raise
        except StallError as exc:
            stalled(self, exc, self.started)
            raise
        if self.ring != NULL:
            put(self.ring, t0, monotonic(), TRANSFER, coll, pl.algo, pl.nbytes, self.elements(coll, pl), -1)
        return disagreed

    cdef Py_ssize_t elements(self, int coll, _Plan pl):
        """The call's element count for the timeline: a broadcast's plan counts bytes."""
        return self.recv.count if coll == BCAST else pl.count

    cdef void done(self, _Plan pl):
        self.last_algorithm = pl.name
        self.calls += 1
        if self.ring != NULL:
            put(self.ring, self.t_call, monotonic(), CALL, pl.key[0], pl.algo, pl.nbytes, self.elements(pl.key[0], pl),
                -1)
        if self.explain:
            self.say(pl.key[0], f"{pl.nbytes} B -> {pl.name}: {pl.reason}")

    cdef void say(self, int coll, object text):
        """COLLECTIVES_EXPLAIN's line for one call."""
        print(f"[collectives explain] rank {self.rank}/{self.size} {_NAMES[coll]} {text}",
              file=sys.stderr, flush=True)

    cdef object native(self, int coll, object why, object method, tuple args):
        """Run mpi4py's ``method(*args)`` on the private communicator, after the agreement
        (which names MPI's own call "native")."""
        log.info("%s: %s; native MPI call", method, why)
        self.last_algorithm = "native"
        if self.explain:
            self.say(coll, f"-> native: {why}; delegated to MPI's {method}")
        if self.check and self.size > 1:
            self.fingerprint(coll, self.native_index[coll], 0)
            self.exchange(_NAMES[coll], "argument check")
            self.judge(_NAMES[coll], (), False)
        getattr(self.comm, method)(*args)
        if self.ring != NULL:
            put(self.ring, self.t_call, monotonic(), CALL, coll, self.native_index[coll], 0, 0, -1)


cdef class Queued:
    """A nonblocking call as the job the progress thread runs: the engine's method, which
    there finds the call's turn has come."""
    cdef Engine engine
    cdef object method, args

    def __init__(self, Engine engine, method, tuple args):
        self.engine, self.method, self.args = engine, method, args

    def __call__(self):
        """Run the call; the progress thread calls it when the call's turn comes."""
        self.engine.queue_thread = PyThread_get_thread_ident()
        try:
            if self.method == "run":
                self.engine.started += 1
                return self.args[0]()
            return getattr(self.engine, self.method)(*self.args)
        finally:
            self.engine.queue_thread = 0
