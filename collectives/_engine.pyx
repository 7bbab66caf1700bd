# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The fast path: a Python call resolved in C, a cached plan, one ``nogil`` run.

The schedule runs in ``collectives._executor``; the checked exchange is
``collectives._exchange``'s.
"""
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_FORMAT,
                             PyBUF_WRITABLE)
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memmove
cimport numpy as cnp
import numpy as np
from mpi4py cimport MPI
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport *

from collectives._csrc cimport ck_itemsize
from collectives._exchange cimport X_HEADER, Exchange, x_agrees, x_checked
from collectives._executor cimport ACC_BUF, IN_BUF, NBUFS, OUT_BUF, TMP_BUF, run_checked
from collectives._requests cimport NEVER_S
from collectives._executor import ScheduleError
from collectives.exchange import FUSED_BYTES, TAG as EXCHANGE_TAG
from collectives.registry import PLAN_OVERHEAD
from collectives.watchdog import StallError, call_number

cdef char _empty[16]
cnp.import_array()

# ---- the fast path: Python call -> cached plan -> one nogil run ---------------------------

# Collective indices, as in collectives.registry.ALGORITHMS (and agreement.COLLECTIVE_INDEX).
DEF ALLREDUCE = 0
DEF BCAST = 1
DEF REDUCE_ = 2
DEF ALLGATHER = 3
DEF REDUCE_SCATTER = 4
DEF GATHER = 5
DEF SCATTER = 6
DEF BARRIER = 7
DEF NCOLL = 8
DEF BYTE_CODE = 5  # uint8 in collectives.ops.DTYPES
DEF OP_MAX = 3  # MPI.MAX in _OPS
DEF MAX_DATATYPES = 128
DEF MAX_NPY = 64
DEF UNKNOWN = -(1 << 62)  # a field this rank cannot know (agreement.agree's None)

cdef int _npy_code[MAX_NPY]          # NumPy type number -> kernel dtype code, -1: none
cdef int _npy_num[16]                # kernel dtype code -> canonical NumPy type number
cdef MPI_Datatype _dt_handle[MAX_DATATYPES]
cdef int _dt_code[MAX_DATATYPES]
cdef int _ndt = 0
cdef object _OPS = (pyMPI.SUM, pyMPI.PROD, pyMPI.MIN, pyMPI.MAX, pyMPI.LAND, pyMPI.LOR,
                    pyMPI.LXOR, pyMPI.BAND, pyMPI.BOR, pyMPI.BXOR)
cdef dict _OP_NAMES = {"sum": 0, "prod": 1, "min": 2, "max": 3, "land": 4, "lor": 5, "lxor": 6,
                       "band": 7, "bor": 8, "bxor": 9}  # collectives.ops.OP_NAMES, as codes


def _tables():
    """Fill the NumPy-type and predefined-MPI-datatype tables from collectives.ops.DTYPES."""
    global _ndt
    from mpi4py.util import dtlib
    from collectives.ops import DTYPE_CODE
    cdef int i
    for i in range(MAX_NPY):
        _npy_code[i] = -1
    for dt, code in DTYPE_CODE.items():
        _npy_num[code] = dt.num
    for ch in np.typecodes["All"]:
        dt = np.dtype(ch)
        if dt in DTYPE_CODE and dt.num < MAX_NPY:
            _npy_code[dt.num] = DTYPE_CODE[dt]
    for name in dir(pyMPI):
        obj = getattr(pyMPI, name)
        if type(obj) is not pyMPI.Datatype or obj == pyMPI.DATATYPE_NULL or _ndt == MAX_DATATYPES:
            continue
        try:
            dt = dtlib.to_numpy_dtype(obj)
        except Exception:  # types with no NumPy equivalent stay on the general path
            continue
        if dt in DTYPE_CODE:
            _dt_handle[_ndt] = (<MPI.Datatype>obj).ob_mpi
            _dt_code[_ndt] = DTYPE_CODE[dt]
            _ndt += 1


_tables()


cdef struct Arg:
    char *ptr
    Py_ssize_t count   # elements
    int dtype          # kernel dtype code
    Py_ssize_t size    # item size in bytes


cdef int datatype_code(object dt) noexcept:
    cdef int i
    cdef MPI_Datatype h
    if type(dt) is not pyMPI.Datatype:
        return -1
    h = (<MPI.Datatype>dt).ob_mpi
    for i in range(_ndt):
        if _dt_handle[i] == h:
            return _dt_code[i]
    return -1


cdef int format_code(const char *fmt, Py_ssize_t itemsize) noexcept:
    """Kernel dtype code of a struct-module format of one native item, -1 if none."""
    cdef char c
    cdef int want = -1
    if fmt == NULL:
        return BYTE_CODE if itemsize == 1 else -1
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<':
        fmt += 1  # x86 and ARM Linux are little-endian; big-endian specs take the general path
    c = fmt[0]
    if c == 0 or (fmt[1] != 0 and c != b'Z'):
        return -1
    if c == b'?':
        want = 0 if itemsize == 1 else -1
    elif c in b'bhilq':
        want = {1: 1, 2: 2, 4: 3, 8: 4}.get(itemsize, -1)
    elif c in b'BHILQ':
        want = {1: 5, 2: 6, 4: 7, 8: 8}.get(itemsize, -1)
    elif c in b'efd':
        want = {2: 9, 4: 10, 8: 11}.get(itemsize, -1)
    elif c == b'Z' and fmt[2] == 0 and fmt[1] in b'fd':
        want = {8: 12, 16: 13}.get(itemsize, -1)
    return want


cdef int raw_bytes(object obj, bint writable, char **ptr, Py_ssize_t *nbytes, int *dtype,
                   Py_ssize_t *size, Py_buffer *view, int *nheld) except -1:
    """Address, length and element type of a C-contiguous buffer; 0 to leave it to Python."""
    cdef cnp.ndarray a
    cdef int num
    if cnp.PyArray_CheckExact(obj):
        a = <cnp.ndarray>obj
        num = cnp.PyArray_TYPE(a)
        if (not cnp.PyArray_IS_C_CONTIGUOUS(a) or (writable and not cnp.PyArray_ISWRITEABLE(a))
                or not cnp.PyArray_ISNOTSWAPPED(a) or num >= MAX_NPY):
            return 0
        ptr[0] = <char *>cnp.PyArray_DATA(a)
        nbytes[0] = cnp.PyArray_NBYTES(a)
        dtype[0] = _npy_code[num]
        size[0] = cnp.PyArray_ITEMSIZE(a)
        return 1
    try:
        PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT
                           | (PyBUF_WRITABLE if writable else 0))
    except (BufferError, TypeError, ValueError):
        return 0
    nheld[0] += 1
    ptr[0] = <char *>view.buf
    nbytes[0] = view.len
    size[0] = view.itemsize
    dtype[0] = format_code(view.format, view.itemsize)
    return 1


cdef int resolve(object spec, bint writable, Py_ssize_t blocks, bint displ_ok, Arg *out,
                 Py_buffer *view, int *nheld) except -1:
    """An mpi4py buffer spec as (address, count, dtype), or 0 for the general path.

    Plain buffers, ``[buf, datatype]``, ``[buf, count, datatype]`` and, with ``displ_ok``,
    ``[buf, (count, displ), datatype]``, with predefined datatypes; a spec's count is per
    block when the buffer holds ``blocks`` of them (mpi4py's rule for a root's buffer).
    """
    cdef object obj = spec, dt = None, cnt = None
    cdef Py_ssize_t count = -1, displ = 0, nbytes, size, total
    cdef int code
    if type(spec) is list or type(spec) is tuple:
        if len(spec) == 2:
            obj, dt = spec
        elif len(spec) == 3:
            obj, cnt, dt = spec
        else:
            return 0
        code = datatype_code(dt)
        if code < 0:
            return 0
        if cnt is not None:
            if type(cnt) is int:
                count = cnt
            elif displ_ok and type(cnt) is tuple and len(cnt) == 2 and type(cnt[0]) is int \
                    and type(cnt[1]) is int:
                count, displ = cnt
            else:
                return 0
            if count < 0 or displ < 0:
                return 0
            count *= blocks
    if not raw_bytes(obj, writable, &out.ptr, &nbytes, &out.dtype, &out.size, view, nheld):
        return 0
    if dt is not None:
        out.dtype = code
        out.size = ck_itemsize(code)
    if out.dtype < 0 or out.size <= 0 or nbytes % out.size:
        return 0
    total = nbytes // out.size
    if count < 0:
        count = total
    if displ + count > total:
        return 0
    out.ptr += displ * out.size
    out.count = count
    return 1


cdef object _IN_PLACE = pyMPI.IN_PLACE


cdef inline bint in_place_spec(object spec) noexcept:
    """Whether a send buffer argument asks for in place (None or MPI.IN_PLACE)."""
    return spec is None or spec is _IN_PLACE


cdef inline bint shares(const Arg *a, const Arg *b) noexcept:
    """Whether the two buffers share any byte."""
    return a.ptr < b.ptr + b.count * b.size and b.ptr < a.ptr + a.count * a.size


cdef inline bint overlap(const Arg *a, const Arg *b) noexcept:
    """Partial overlap (exact aliasing is in place, handled by the callers)."""
    return a.ptr != b.ptr and shares(a, b)


cdef inline int op_code(object op) except -2:
    cdef int i
    for i in range(10):
        if op is _OPS[i]:
            return i
    if type(op) is str:
        return _OP_NAMES.get(op.lower(), -1)
    return -1


cdef bint ints(object seq, Py_ssize_t p, Py_ssize_t *out) except -1:
    """``p`` Python ints from a list, tuple or integer array into ``out``; 0 if it is none."""
    cdef Py_ssize_t i
    if type(seq) is np.ndarray and seq.dtype.kind in "iu":
        seq = seq.tolist()
    if (type(seq) is not list and type(seq) is not tuple) or len(seq) != p:
        return 0
    for i in range(p):
        if type(seq[i]) is not int:
            return 0
        out[i] = seq[i]
    return 1


cdef int vector_spec(object spec, bint writable, Py_ssize_t p, Py_ssize_t *counts,
                     Py_ssize_t *displs, Arg *out, Py_buffer *view, int *nheld) except -1:
    """A v-variant's ``[buf, (counts, displs), datatype]`` (or ``[buf, counts, datatype]``,
    ``[buf, counts, displs, datatype]``, and without the datatype, taken from the buffer as
    mpi4py does: ``[buf, (counts, displs)]``, ``[buf, counts]``; no displacements: blocks in
    rank order) as the whole buffer in ``out`` and ``p`` counts and displacements in elements;
    0 for the general path, which then says what is wrong with it."""
    cdef object cnt, dis = None
    cdef Py_ssize_t i, at = 0
    if (type(spec) is not list and type(spec) is not tuple) or not 2 <= len(spec) <= 4:
        return 0
    cnt = spec[1]
    if len(spec) == 4:
        dis = spec[2]
    elif type(cnt) is tuple and len(cnt) == 2 and type(cnt[0]) is not int:
        cnt, dis = cnt
    if not ints(cnt, p, counts):
        return 0
    if dis is None:
        for i in range(p):
            displs[i] = at
            at += counts[i]
    elif not ints(dis, p, displs):
        return 0
    if not resolve(spec[0] if len(spec) == 2 else (spec[0], spec[len(spec) - 1]), writable, 1, False,
                   out, view, nheld):
        return 0
    for i in range(p):
        if counts[i] < 0 or displs[i] < 0 or displs[i] + counts[i] > out.count:
            return 0
    return 1


cdef bint packed_offsets(Py_ssize_t p, const Py_ssize_t *counts, const Py_ssize_t *displs,
                         Py_ssize_t *at) noexcept:
    """The offsets of the blocks in rank order from 0 into ``at``; whether ``displs`` are those."""
    cdef Py_ssize_t i, total = 0
    cdef bint same = True
    for i in range(p):
        at[i] = total
        same = same and displs[i] == total
        total += counts[i]
    return same


cdef void move_blocks(char *dst, const Py_ssize_t *dst_at, const char *src, const Py_ssize_t *src_at,
                      const Py_ssize_t *counts, Py_ssize_t p, Py_ssize_t size) noexcept:
    """Copy each block i, ``counts[i]`` elements of ``size`` bytes, from ``src_at[i]`` to ``dst_at[i]``."""
    cdef Py_ssize_t i
    for i in range(p):
        memcpy(dst + dst_at[i] * size, src + src_at[i] * size, counts[i] * size)


cdef inline void release(Py_buffer *views, int n) noexcept:
    cdef int i
    for i in range(n):
        PyBuffer_Release(&views[i])


cdef class _Plan:
    """A cached schedule with everything one fast call needs, resolved once."""
    cdef object steps
    cdef const int64_t *rows
    cdef Py_ssize_t nsteps, nreq, tmp_count
    cdef int algo
    cdef int fused     # the exchange's payload kind of a fused collective, else -1
    cdef Py_ssize_t lead  # the leading rows that may start before the exchange (plan_fast)
    cdef bint reads_in
    cdef object name
    cdef object key  # the call shape it serves (Fast.plan's key)


cdef class Fast:
    """The fast path of one collectives.Comm: every blocking collective on plain buffers.

    A call resolves its buffers in C (NumPy arrays, buffer-protocol objects, mpi4py buffer
    specs with predefined datatypes, MPI.IN_PLACE), looks up a cached plan by a small key,
    agrees with the other ranks through the checked exchange when the owner's ``check`` is on
    (the same vector and messages as ``agreement.agree``, so a rank on the general path meets
    it there), and runs the schedule in one ``nogil`` block; a fused plan's exchange carries
    the data and is the whole collective.  It returns False, having done nothing
    collective, for anything else, which the general Python path then handles.
    ``calls`` counts the calls it ran (a debugging aid for tests).
    """
    cdef MPI.Comm comm
    cdef object owner, make_plan, names
    # The owner's instance dict, where every call reads and writes its attributes (_broken,
    # _progress, check, last_algorithm): Comm has __getattr__, which makes each access through
    # the object cost two type lookups more.
    cdef dict state
    cdef readonly object plans  # a collectives.cache.ByteLRU
    cdef cnp.ndarray tmp, aux
    cdef int tags[NCOLL]
    cdef int rank, size, width, nvec
    cdef int64_t *vec  # the header of x.mine
    cdef Exchange x
    cdef bint checked  # the owner's check when the plans were made (it picks fused ones)
    cdef Py_ssize_t *counts
    cdef list hot  # per collective: the plan of its latest call, found without the LRU
    cdef public Py_ssize_t calls
    cdef double limit        # the watchdog's seconds (0: off), set by ``watch``
    cdef unsigned long queue_thread  # the thread running a queued nonblocking call, or 0

    def __init__(self, MPI.Comm comm, owner, make_plan, tags, names):
        from collectives.cache import ByteLRU
        cdef int i
        self.comm = comm
        self.owner = owner
        self.state = owner.__dict__
        self.make_plan = make_plan
        self.names = tuple(names)
        self.plans = ByteLRU()
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        for i in range(NCOLL):
            self.tags[i] = tags[i]
        self.hot = [None] * NCOLL
        self.width = 4 + self.size
        self.nvec = 5 + 2 * self.width
        self.x.comm, self.x.tag = comm.ob_mpi, EXCHANGE_TAG
        self.x.nh = self.nvec + 1
        self.x.w.limit = NEVER_S
        self.x.cap = 8 * self.x.nh + FUSED_BYTES
        self.x.mine = <char *>malloc(2 * self.x.cap)
        self.x.theirs = self.x.mine + self.x.cap
        self.vec = <int64_t *>self.x.mine
        # Per-rank counts, then displacements and packed offsets of the v-variants.
        self.counts = <Py_ssize_t *>malloc(3 * self.size * sizeof(Py_ssize_t))
        if self.x.mine == NULL or self.counts == NULL:
            raise MemoryError()
        self.checked = owner.check
        self.tmp = np.zeros(64, np.uint8)
        self.aux = np.zeros(64, np.uint8)
        self.calls = 0

    def watch(self, double limit):
        """Watch every wait for ``limit`` seconds (collectives.watchdog); 0 turns it off."""
        self.limit = limit
        self.x.w.limit = limit if limit > 0 else NEVER_S

    def __len__(self):
        """Number of cached plans."""
        return len(self.plans)

    def forget(self):
        """Drop every cached plan: the choices they hold changed (the owner found its nodes)."""
        self.plans.clear()
        self.hot = [None] * NCOLL

    def __dealloc__(self):
        free(self.x.mine)
        free(self.counts)

    cdef bint ready(self) except -1:
        """Whether a fast call may run now; raises when the Comm is unusable."""
        broken = self.state["_broken"]
        if broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {broken}")
        progress = self.state["_progress"]
        # The progress thread runs the queued call at the head of the queue: its turn.
        return (progress is None or not progress.busy()
                or (self.queue_thread != 0 and PyThread_get_thread_ident() == self.queue_thread))

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
        """The cached plan for ``key``, made on a miss; None when the general path must run.
        ``apart``: the call's input and output do not overlap (``key`` must say so too)."""
        cdef _Plan pl
        # A changed check changes the choices that take the fused forms.
        if self.checked != self.state["check"]:
            self.checked = self.state["check"]
            self.forget()
        # A repeated call shape skips the LRU, a Python call taking a lock that cost about as
        # much as an 8 B all-reduce's communication.  A hot plan the LRU evicts stays usable.
        pl = self.hot[coll]
        if pl is not None and pl.key == key:
            return pl
        pl = self.plans.get(key)
        if pl is None:
            try:
                made = self.make_plan(self.names[coll], algorithm, count, nbytes, uniform, args,
                                      None if op < 0 else op, dtype, apart)
            except (ValueError, TypeError):
                return None  # the general path raises it, after agreeing with the other ranks
            pl = _Plan()
            pl.steps, pl.tmp_count, pl.nreq, pl.reads_in, pl.name, pl.algo, pl.fused, pl.lead = made
            pl.steps = np.ascontiguousarray(pl.steps, dtype=np.int64)
            pl.nsteps = pl.steps.shape[0]
            pl.rows = <const int64_t *>cnp.PyArray_DATA(pl.steps)
            pl.key = key
            self.plans.put(key, pl, pl.steps.nbytes + PLAN_OVERHEAD)
        self.hot[coll] = pl
        return pl

    cdef inline int64_t *fields(self) noexcept:
        """Where a call writes the fields ``agree`` compares."""
        return self.vec + 3

    cdef inline char *body(self) noexcept:
        """Where a fused call puts its payload before ``agree`` and finds the result after."""
        return self.x.mine + 8 * self.x.nh

    cdef int agree(self, int coll, _Plan pl, int nfields, tuple keys, bint counts,
                   Py_ssize_t nbytes=0, Py_ssize_t block=0, int dtype=BYTE_CODE, int op=0,
                   bint has=True) except -1:
        """agreement.agree in C: the checked exchange of [0, coll, algo, fields, -coll, -algo,
        -fields], carrying ``body()``'s ``nbytes`` as the payload of a fused plan.

        The first ``nfields`` fields are in place (``fields()``); ``keys`` name them, followed
        by count0, count1, ... when ``counts``.  ``block``, ``dtype``, ``op`` and ``has`` are
        the payload's, as collectives.exchange.exchange takes them.
        """
        if pl.fused < 0 and (self.size == 1 or not self.state["check"]):
            return 0
        self.fingerprint(coll, pl, nfields, nbytes, block, dtype, op, has)
        try:
            x_checked(&self.x, self.rank, self.size, self.names[coll],
                      pl.name if pl.fused >= 0 else "argument check")
        except StallError as exc:
            self.owner._stalled(exc, call_number(self.owner, True))
            raise
        return self.judge(coll, keys, counts)

    cdef void fingerprint(self, int coll, _Plan pl, int nfields, Py_ssize_t nbytes=0,
                          Py_ssize_t block=0, int dtype=BYTE_CODE, int op=0, bint has=True):
        """Fill the exchange's message: the vector ``agree`` describes and the payload's fields."""
        cdef int i, w = self.width
        cdef int64_t *v = self.vec
        v[0] = 0
        v[1] = coll
        v[2] = pl.algo
        for i in range(w):
            if i >= nfields:
                v[3 + i] = 0
            v[5 + w + i] = UNKNOWN if v[3 + i] == UNKNOWN else -v[3 + i]
        v[3 + w] = -coll
        v[4 + w] = -pl.algo
        self.x.kind = X_HEADER if pl.fused < 0 else pl.fused
        self.x.nbytes, self.x.block, self.x.dtype, self.x.op = nbytes, block, dtype, op
        v[self.nvec] = nbytes if self.x.kind != X_HEADER and has else 0

    cdef int judge(self, int coll, tuple keys, bint counts) except -1:
        """After the exchange: raise the agreement's ValueError unless it agreed (``agree``)."""
        cdef int i, w = self.width
        cdef int64_t *v = self.vec
        name = self.names[coll]
        if v[0]:
            raise ValueError(f"{name}: invalid arguments on another rank (it raised the details)")
        if x_agrees(&self.x):
            return 0
        from collectives.agreement import disagreement  # only when the ranks disagree

        keys = ("collective", "algorithm") + keys
        if counts:
            keys += tuple(f"count{i}" for i in range(self.size))
        raise ValueError(disagreement(name, list(keys), [-v[3 + w + i] for i in range(len(keys))],
                                      [v[1 + i] for i in range(len(keys))]))

    cdef int launch(self, int coll, _Plan pl, char *acc, char *inp, int dtype, int op,
                    int tag=-1, char *out=NULL, bint early=False) except -1:
        """Run ``pl`` over ACC, TMP, IN and OUT (on the collective's tag unless ``tag``); a
        failure marks the Comm unusable.  ``early``: the exchange, its message filled by
        ``fingerprint``, runs after the plan's first ``lead`` rows have started (run_checked);
        1 when it disagreed, the schedule not run."""
        cdef char *buf[NBUFS]
        buf[ACC_BUF] = acc if acc != NULL else _empty
        buf[TMP_BUF] = self.scratch(False, pl.tmp_count * ck_itemsize(dtype)) if pl.tmp_count else _empty
        buf[IN_BUF] = inp if inp != NULL else _empty
        buf[OUT_BUF] = out if out != NULL else _empty
        try:
            return run_checked(self.comm.ob_mpi, pl.rows, pl.nsteps, buf, dtype, op,
                               self.tags[coll] if tag < 0 else tag, pl.nreq, self.names[coll],
                               self.limit, pl.name, &self.x if early else NULL,
                               pl.lead if early else 0)
        except ScheduleError as exc:
            self.owner._broken = str(exc)
            raise
        except StallError as exc:
            self.owner._stalled(exc, call_number(self.owner, True))
            raise

    cdef inline void done(self, _Plan pl):
        self.state["last_algorithm"] = pl.name
        self.calls += 1

    def allreduce(self, sendbuf, recvbuf, op, algorithm):
        """Allreduce; False to leave the call to the general path."""
        cdef Arg send, recv
        cdef Py_buffer views[2]
        cdef int nheld = 0, opc
        cdef int64_t *fields
        cdef bint in_place = in_place_spec(sendbuf), apart, early
        cdef _Plan pl
        if not self.ready():
            return False
        opc = op_code(op)
        try:
            if opc < 0 or not resolve(recvbuf, True, 1, True, &recv, &views[0], &nheld):
                return False
            if in_place:
                send = recv
            elif not resolve(sendbuf, False, 1, True, &send, &views[nheld], &nheld):
                return False
            if send.count != recv.count or send.dtype != recv.dtype or overlap(&send, &recv):
                return False
            apart = send.ptr != recv.ptr
            pl = self.plan(ALLREDUCE, algorithm, (ALLREDUCE, algorithm, recv.count, recv.dtype, opc, apart),
                           recv.count, recv.count * recv.size, True, (recv.count,), opc, recv.dtype, apart)
            if pl is None:
                return False
            fields = self.fields()
            fields[0], fields[1], fields[2] = recv.count, recv.dtype, opc
            if pl.fused >= 0:
                memcpy(self.body(), send.ptr, recv.count * recv.size)
                self.agree(ALLREDUCE, pl, 3, ("count", "dtype", "op"), False, recv.count * recv.size,
                           0, recv.dtype, opc)
                memcpy(recv.ptr, self.body(), recv.count * recv.size)
                self.done(pl)
                return True
            # Overlapped: the exchange runs after the schedule's first step has started.
            early = pl.lead and recv.count and self.size > 1 and self.state["check"]
            if not early:
                self.agree(ALLREDUCE, pl, 3, ("count", "dtype", "op"), False)
            if send.ptr != recv.ptr and not (pl.reads_in and recv.count and self.size > 1):
                memcpy(recv.ptr, send.ptr, recv.count * recv.size)  # recv is output only
            if early:
                self.fingerprint(ALLREDUCE, pl, 3)
                if self.launch(ALLREDUCE, pl, recv.ptr, send.ptr, recv.dtype, opc, -1, NULL, True):
                    self.judge(ALLREDUCE, ("count", "dtype", "op"), False)
            elif recv.count and self.size > 1:
                self.launch(ALLREDUCE, pl, recv.ptr, send.ptr, recv.dtype, opc)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    def bcast(self, buf, root, algorithm):
        """Bcast; False to leave the call to the general path."""
        cdef Arg a
        cdef Py_buffer views[1]
        cdef int nheld = 0
        cdef int64_t *fields
        cdef Py_ssize_t nbytes
        cdef _Plan pl
        if type(root) is not int or not 0 <= root < self.size or not self.ready():
            return False
        try:
            if not resolve(buf, True, 1, True, &a, &views[0], &nheld):
                return False
            nbytes = a.count * a.size
            pl = self.plan(BCAST, algorithm, (BCAST, algorithm, nbytes, root), nbytes, nbytes, True,
                           (nbytes, root))
            if pl is None:
                return False
            fields = self.fields()
            fields[0], fields[1] = nbytes, root
            if pl.fused >= 0:
                memcpy(self.body(), a.ptr, nbytes)
                self.agree(BCAST, pl, 2, ("nbytes", "root"), False, nbytes, 0, BYTE_CODE, 0,
                           root == self.rank)
                memcpy(a.ptr, self.body(), nbytes)
                self.done(pl)
                return True
            self.agree(BCAST, pl, 2, ("nbytes", "root"), False)
            if nbytes and self.size > 1:
                self.launch(BCAST, pl, a.ptr, NULL, BYTE_CODE, 0)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    def reduce(self, sendbuf, recvbuf, op, root, algorithm):
        """Reduce; False to leave the call to the general path."""
        cdef Arg send, recv
        cdef Py_buffer views[2]
        cdef int nheld = 0, opc
        cdef int64_t *fields
        cdef bint is_root, in_place = in_place_spec(sendbuf)
        cdef _Plan pl
        if type(root) is not int or not 0 <= root < self.size or not self.ready():
            return False
        is_root = root == self.rank
        opc = op_code(op)
        if opc < 0 or (in_place and not is_root):
            return False
        try:
            if is_root and not resolve(recvbuf, True, 1, True, &recv, &views[0], &nheld):
                return False
            if in_place:
                send = recv
            elif not resolve(sendbuf, False, 1, True, &send, &views[nheld], &nheld):
                return False
            if is_root and (send.count != recv.count or send.dtype != recv.dtype
                            or overlap(&send, &recv)):
                return False
            pl = self.plan(REDUCE_, algorithm, (REDUCE_, algorithm, send.count, send.dtype, opc, root),
                           send.count, send.count * send.size, True, (send.count, root), opc, send.dtype)
            if pl is None:
                return False
            fields = self.fields()
            fields[0], fields[1], fields[2], fields[3] = send.count, send.dtype, opc, root
            if pl.fused >= 0:
                memcpy(self.body(), send.ptr, send.count * send.size)
                self.agree(REDUCE_, pl, 4, ("count", "dtype", "op", "root"), False,
                           send.count * send.size, 0, send.dtype, opc)
                if is_root:
                    memcpy(recv.ptr, self.body(), send.count * send.size)
                self.done(pl)
                return True
            self.agree(REDUCE_, pl, 4, ("count", "dtype", "op", "root"), False)
            if send.count:
                self.launch(REDUCE_, pl, recv.ptr if is_root else NULL, send.ptr, send.dtype, opc)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    cdef int block_fields(self, int64_t first, int64_t second, Py_ssize_t count,
                          const Py_ssize_t *counts) noexcept:
        """Write [first, second, count0, count1, ...] (each ``count`` unless ``counts``) as
        the fields to agree on; returns their number."""
        cdef int i
        cdef int64_t *fields = self.fields()
        fields[0], fields[1] = first, second
        for i in range(self.size):
            fields[2 + i] = counts[i] if counts != NULL else count
        return 2 + self.size

    def allgather(self, sendbuf, recvbuf, algorithm):
        """Allgather; False to leave the call to the general path."""
        cdef Arg send, recv
        cdef Py_buffer views[2]
        cdef int nheld = 0, nf
        cdef bint in_place = in_place_spec(sendbuf)
        cdef Py_ssize_t c, p = self.size, bytes_each
        cdef char *own
        cdef _Plan pl
        if not self.ready():
            return False
        try:
            if not resolve(recvbuf, True, p, False, &recv, &views[0], &nheld):
                return False
            if in_place:
                if recv.count % p:
                    return False
                c = recv.count // p
                send = recv
                send.ptr = recv.ptr + self.rank * c * recv.size
                send.count = c
            else:
                if not resolve(sendbuf, False, 1, True, &send, &views[nheld], &nheld):
                    return False
                c = send.count
                # Any overlap: the general path raises (only IN_PLACE puts the own block in recvbuf).
                if recv.count != c * p or send.dtype != recv.dtype or shares(&send, &recv):
                    return False
            bytes_each = c * recv.size
            pl = self.plan(ALLGATHER, algorithm, (ALLGATHER, algorithm, bytes_each),
                           c * p, bytes_each * p, True, ((bytes_each,) * p,))
            if pl is None:
                return False
            nf = self.block_fields(_npy_num[recv.dtype], recv.size, c, NULL)
            if pl.fused >= 0:
                memcpy(self.body() + self.rank * bytes_each, send.ptr, bytes_each)
                self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True, bytes_each * p, bytes_each)
                memcpy(recv.ptr, self.body(), bytes_each * p)
                self.done(pl)
                return True
            self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True)
            own = recv.ptr + self.rank * bytes_each
            # A plan that reads IN copies the own block itself, as late as it can
            # (executor.late_copy).
            if send.ptr != own and not (pl.reads_in and c and p > 1):
                memcpy(own, send.ptr, bytes_each)
            if c and p > 1:
                self.launch(ALLGATHER, pl, recv.ptr, send.ptr, BYTE_CODE, 0)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    def reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, algorithm):
        """Reduce_scatter (``recvcounts`` given) or Reduce_scatter_block (None); False to leave
        the call to the general path.  In place, only the rank's own block is written."""
        cdef Arg send, recv
        cdef Py_buffer views[2]
        cdef int nheld = 0, nf, opc, i
        cdef bint uniform = True, in_place = in_place_spec(sendbuf)
        cdef Py_ssize_t p = self.size, total = 0, start = 0
        cdef Py_ssize_t *cnt = self.counts
        cdef char *acc
        cdef _Plan pl
        opc = op_code(op)
        if opc < 0 or not self.ready():
            return False
        if recvcounts is not None:
            if (type(recvcounts) is not list and type(recvcounts) is not tuple) or len(recvcounts) != p:
                return False
            for i in range(p):
                c = recvcounts[i]
                if type(c) is not int or c < 0:
                    return False
                cnt[i] = c
        try:
            if not resolve(recvbuf, True, 1, True, &recv, &views[0], &nheld):
                return False
            if in_place:
                send = recv
            elif not resolve(sendbuf, False, 1, True, &send, &views[nheld], &nheld):
                return False
            if send.dtype != recv.dtype or overlap(&send, &recv):
                return False
            if recvcounts is None:
                if send.count % p:
                    return False
                for i in range(p):
                    cnt[i] = send.count // p
            for i in range(p):
                total += cnt[i]
                start += cnt[i] if i < self.rank else 0
                uniform = uniform and cnt[i] == cnt[0]
            if send.count != total or (not in_place and recv.count < cnt[self.rank]):
                return False
            counts = tuple([cnt[i] for i in range(p)])
            # Not in place, the schedule writes the rank's block straight into recvbuf (OUT).
            # ACC is always scratch here, apart from the input.
            pl = self.plan(REDUCE_SCATTER, algorithm,
                           (REDUCE_SCATTER, algorithm, recv.dtype, opc, counts, in_place),
                           total, total * send.size, uniform, (counts, not in_place), opc, recv.dtype, True)
            if pl is None:
                return False
            nf = self.block_fields(recv.dtype, opc, 0, cnt)
            if pl.fused >= 0:
                memcpy(self.body(), send.ptr, total * send.size)
                self.agree(REDUCE_SCATTER, pl, nf, ("dtype", "op"), True, total * send.size, 0,
                           recv.dtype, opc)
                memcpy(recv.ptr, self.body() + start * send.size, cnt[self.rank] * send.size)
                self.done(pl)
                return True
            self.agree(REDUCE_SCATTER, pl, nf, ("dtype", "op"), True)
            if not total or p == 1:
                # Nothing to reduce; in place at p = 1 the block is copied onto itself.
                memmove(recv.ptr, send.ptr + start * send.size, cnt[self.rank] * send.size)
                self.done(pl)
                return True
            # ACC is scratch: recvbuf past the rank's own block must stay untouched.
            acc = self.scratch(True, total * send.size)
            self.launch(REDUCE_SCATTER, pl, acc, send.ptr, recv.dtype, opc, -1,
                        NULL if in_place else recv.ptr)
            if in_place:
                # Writing recvbuf (IN) early would clobber input later steps still read.
                memcpy(recv.ptr, acc + start * send.size, cnt[self.rank] * send.size)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    cdef object rooted(self, int coll, object whole_spec, object own_spec, object root, object algorithm):
        """Gather and Scatter: ``whole`` is the root's buffer of p blocks (Gather's receive
        buffer, Scatter's send buffer), ``own`` every rank's block (MPI.IN_PLACE at the root)."""
        cdef Arg whole, own
        cdef Py_buffer views[2]
        cdef int nheld = 0, nf
        cdef bint is_root, gather = coll == GATHER
        cdef bint in_place = in_place_spec(own_spec)
        cdef Py_ssize_t c, p = self.size
        cdef _Plan pl
        if type(root) is not int or not 0 <= root < p or not self.ready():
            return False
        is_root = root == self.rank
        if in_place and not is_root:
            return False
        try:
            if is_root:
                if not resolve(whole_spec, gather, p, True, &whole, &views[0], &nheld) or whole.count % p:
                    return False
                c = whole.count // p
                if in_place:
                    # Gather's own block is already in place; Scatter's lands in scratch.
                    own = whole
                    own.count = c
                    own.ptr = (whole.ptr + self.rank * c * whole.size if gather
                               else self.scratch(True, c * whole.size))
                elif (not resolve(own_spec, not gather, 1, True, &own, &views[nheld], &nheld)
                      or own.dtype != whole.dtype or own.count != c or shares(&own, &whole)):
                    return False
            elif not resolve(own_spec, not gather, 1, True, &own, &views[0], &nheld):
                return False
            c = own.count * own.size
            pl = self.plan(coll, algorithm, (coll, algorithm, own.count, own.size, root), own.count * p,
                           c * p, True, ((c,) * p, root))
            if pl is None:
                return False
            nf = self.block_fields(<int>root, own.size, own.count, NULL)
            if pl.fused >= 0:
                # Gather's blocks meet in the payload; Scatter's root sends them all.
                if gather:
                    memcpy(self.body() + self.rank * c, own.ptr, c)
                elif is_root:
                    memcpy(self.body(), whole.ptr, c * p)
                self.agree(coll, pl, nf, ("root", "itemsize"), True, c * p, c, BYTE_CODE, 0,
                           gather or is_root)
                if not gather:
                    memcpy(own.ptr, self.body() + self.rank * c, c)
                elif is_root:
                    memcpy(whole.ptr, self.body(), c * p)
                self.done(pl)
                return True
            self.agree(coll, pl, nf, ("root", "itemsize"), True)
            if gather:
                self.launch(coll, pl, whole.ptr if is_root else NULL, own.ptr, BYTE_CODE, 0)
            else:
                self.launch(coll, pl, own.ptr, whole.ptr if is_root else NULL, BYTE_CODE, 0)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    def gather(self, sendbuf, recvbuf, root, algorithm):
        """Gather; False to leave the call to the general path."""
        return self.rooted(GATHER, recvbuf, sendbuf, root, algorithm)

    def scatter(self, sendbuf, recvbuf, root, algorithm):
        """Scatter; False to leave the call to the general path."""
        return self.rooted(SCATTER, sendbuf, recvbuf, root, algorithm)

    def barrier(self, algorithm):
        """Barrier; False to leave the call to the general path."""
        cdef _Plan pl
        if not self.ready():
            return False
        pl = self.plan(BARRIER, algorithm, (BARRIER, algorithm), 0, 0, True, ())
        if pl is None:
            return False
        self.agree(BARRIER, pl, 0, (), False)
        if pl.fused >= 0:
            self.done(pl)
            return True
        if self.size > 1:
            self.launch(BARRIER, pl, NULL, NULL, BYTE_CODE, 0)
        self.done(pl)
        return True

    # ---- the v-variants: per-rank counts and displacements ----------------------------------

    cdef tuple byte_counts(self, Py_ssize_t size):
        """``counts`` in bytes of ``size``-byte elements, -1 where a rank does not know one."""
        return tuple([c * size if c >= 0 else -1 for c in self.counts[:self.size]])

    def allgatherv(self, sendbuf, recvbuf, algorithm):
        """Allgatherv; False to leave the call to the general path."""
        cdef Arg send, recv
        cdef Py_buffer views[2]
        cdef int nheld = 0, nf
        cdef bint packed, in_place = in_place_spec(sendbuf)
        cdef Py_ssize_t p = self.size, r = self.rank, total
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        cdef Py_ssize_t *at = cnt + 2 * p
        cdef char *acc
        cdef _Plan pl
        if not self.ready():
            return False
        try:
            if not vector_spec(recvbuf, True, p, cnt, dis, &recv, &views[0], &nheld):
                return False
            if in_place:
                send = recv
                send.ptr = recv.ptr + dis[r] * recv.size
            elif (not resolve(sendbuf, False, 1, True, &send, &views[nheld], &nheld)
                  or send.dtype != recv.dtype or send.count != cnt[r] or shares(&send, &recv)):
                return False
            packed = packed_offsets(p, cnt, dis, at)
            total = at[p - 1] + cnt[p - 1]
            bcounts = self.byte_counts(recv.size)
            pl = self.plan(ALLGATHER, algorithm, (ALLGATHER, algorithm, bcounts), total,
                           total * recv.size, len(set(bcounts)) == 1, (bcounts,))
            if pl is None:
                return False
            nf = self.block_fields(_npy_num[recv.dtype], recv.size, 0, cnt)
            if pl.fused >= 0:
                # Equal blocks (the fused form's restriction) meet in the payload in rank order.
                memcpy(self.body() + at[r] * recv.size, send.ptr, cnt[r] * recv.size)
                self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True, total * recv.size,
                           cnt[r] * recv.size)
                move_blocks(recv.ptr, dis, self.body(), at, cnt, p, recv.size)
                self.done(pl)
                return True
            self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True)
            # The schedule wants the blocks in rank order from 0: other layouts go via scratch.
            acc = recv.ptr if packed else self.scratch(True, total * recv.size)
            if send.ptr != acc + at[r] * recv.size and not (pl.reads_in and total and p > 1):
                memcpy(acc + at[r] * recv.size, send.ptr, cnt[r] * recv.size)
            if total and p > 1:
                self.launch(ALLGATHER, pl, acc, send.ptr, BYTE_CODE, 0)
            if not packed:
                move_blocks(recv.ptr, dis, acc, at, cnt, p, recv.size)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    cdef object rooted_vector(self, int coll, object whole_spec, object own_spec, object root,
                              object algorithm):
        """Gatherv and Scatterv, as ``rooted`` with the root's buffer a v-variant spec.  Away
        from the root a rank knows only its own count: the others are UNKNOWN to the agreement."""
        cdef Arg whole, own
        cdef Py_buffer views[2]
        cdef int nheld = 0, nfields
        cdef bint packed = True, is_root, gather = coll == GATHER
        cdef bint in_place = in_place_spec(own_spec)
        cdef Py_ssize_t i, p = self.size, r = self.rank, size
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        cdef Py_ssize_t *at = cnt + 2 * p
        cdef char *staged = NULL
        cdef int64_t *fields
        cdef _Plan pl
        if type(root) is not int or not 0 <= root < p or not self.ready():
            return False
        is_root = root == r
        if in_place and not is_root:
            return False
        try:
            if is_root:
                if not vector_spec(whole_spec, gather, p, cnt, dis, &whole, &views[0], &nheld):
                    return False
                packed = packed_offsets(p, cnt, dis, at)
                staged = (whole.ptr if packed
                          else self.scratch(True, (at[p - 1] + cnt[p - 1]) * whole.size))
                if in_place:
                    # Gather sends the own block from where it lies; Scatter's stays there.
                    own = whole
                    own.count = cnt[r]
                    own.ptr = (whole.ptr + dis[r] * whole.size if gather
                               else staged + at[r] * whole.size)
                elif (not resolve(own_spec, not gather, 1, True, &own, &views[nheld], &nheld)
                      or own.dtype != whole.dtype or own.count != cnt[r] or shares(&own, &whole)):
                    return False
            else:
                if not resolve(own_spec, not gather, 1, True, &own, &views[0], &nheld):
                    return False
                for i in range(p):
                    cnt[i] = own.count if i == r else -1
            size = own.size
            bcounts = self.byte_counts(size)
            pl = self.plan(coll, algorithm, (coll, algorithm, bcounts, root), cnt[r] * p,
                           cnt[r] * size * p, False, (bcounts, root))
            if pl is None:
                return False
            nfields = self.block_fields(<int>root, size, 0, cnt)
            fields = self.fields()
            for i in range(p):
                if cnt[i] < 0:
                    fields[2 + i] = UNKNOWN
            self.agree(coll, pl, nfields, ("root", "itemsize"), True)
            if gather:
                self.launch(coll, pl, staged, own.ptr, BYTE_CODE, 0)
                if not packed:
                    move_blocks(whole.ptr, dis, staged, at, cnt, p, size)
            else:
                if not packed:
                    move_blocks(staged, at, whole.ptr, dis, cnt, p, size)
                self.launch(coll, pl, own.ptr, staged, BYTE_CODE, 0)
            self.done(pl)
            return True
        finally:
            release(views, nheld)

    def gatherv(self, sendbuf, recvbuf, root, algorithm):
        """Gatherv; False to leave the call to the general path."""
        return self.rooted_vector(GATHER, recvbuf, sendbuf, root, algorithm)

    def scatterv(self, sendbuf, recvbuf, root, algorithm):
        """Scatterv; False to leave the call to the general path."""
        return self.rooted_vector(SCATTER, sendbuf, recvbuf, root, algorithm)


cdef class Queued:
    """A nonblocking call as the job the progress thread runs: the fast path's method runs it
    there with the call's cached plan (no job built), else the general path's job does."""
    cdef Fast fast
    cdef object method, args, builder, extra

    def __init__(self, Fast fast, method, tuple args, builder, tuple extra=()):
        """``getattr(fast, method)(*args)``, else ``builder(owner, *args, *extra)()``."""
        self.fast, self.method, self.args, self.builder, self.extra = fast, method, args, builder, extra

    def __call__(self):
        """Run the call; the progress thread calls it when the call's turn comes."""
        self.fast.queue_thread = PyThread_get_thread_ident()
        try:
            if not getattr(self.fast, self.method)(*self.args):
                self.builder(self.fast.owner, *self.args, *self.extra)()
        finally:
            self.fast.queue_thread = 0
