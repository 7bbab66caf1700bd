# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A collective call as a value, and the one description of each collective that fills it.

A description turns mpi4py's arguments into a ``Call``: buffers resolved to (address, count,
element type) by ``collectives._buffers``, counts and displacements, op, root, in place and
aliasing, the plan key, the fields the ranks agree on, and how the call's buffers meet the
plan: the copies into and out of the checked exchange's payload when the plan is a fused
form, and the buffers, stage and copies around a schedule otherwise.  It raises ValueError or
TypeError naming the problem, or ``Native`` when no algorithm covers the arguments; it never
communicates, so a nonblocking call is described on the caller's thread and refused there.
Every path runs the same descriptions: blocking, nonblocking, functional.  The engine
(collectives._engine) plans, agrees and runs a Call, whatever its collective.

The one part of a description that needs the other ranks is Reduce_scatter's counts when
none are given: ``counts_pending`` says so, and ``finish_reduce_scatter`` completes the
description once the engine has gathered them, on the thread that runs the call.
"""
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
cimport numpy as cnp
import numpy as np

from collectives._buffers cimport (Arg, Views, dtype_of, in_place_spec, integers, npy_num, op_code, resolve,
                                   resolve_vector, shares)
from collectives.constants import INDEX
from collectives.ops import DTYPE_CODE, Native
from collectives import schedule as _schedule

cnp.import_array()

cdef int ALLREDUCE = INDEX["allreduce"], BCAST = INDEX["bcast"], REDUCE_ = INDEX["reduce"]
cdef int ALLGATHER = INDEX["allgather"], REDUCE_SCATTER = INDEX["reduce_scatter"]
cdef int GATHER = INDEX["gather"], SCATTER = INDEX["scatter"], BARRIER = INDEX["barrier"]
cdef int SCAN = INDEX["scan"], EXSCAN = INDEX["exscan"], ALLTOALL = INDEX["alltoall"]
cdef int BYTE_CODE = DTYPE_CODE[np.dtype(np.uint8)]
cdef extern from *:
    """
    #define COLLECTIVES_UNKNOWN (-(1LL << 62))
    """
    # A field this rank cannot know (a Gatherv count away from the root).
    const int64_t UNKNOWN "COLLECTIVES_UNKNOWN"


cdef inline Py_ssize_t nbytes_of(const Arg *a) noexcept:
    return a.count * a.size


cdef inline bint same_type(const Arg *a, const Arg *b) noexcept:
    return a.num == b.num and a.size == b.size and a.swapped == b.swapped


cdef inline void bytes_copy(Copy *c, int dst_base, char *dst, int src_base, char *src, Py_ssize_t n,
                            bint unless_reads_in=False) noexcept:
    c.kind, c.dst_base, c.dst, c.src_base, c.src, c.n = C_BYTES, dst_base, dst, src_base, src, n
    c.unless_reads_in = unless_reads_in


cdef inline void blocks_copy(Copy *c, int kind, int dst_base, char *dst, int src_base, char *src,
                             Py_ssize_t size) noexcept:
    c.kind, c.dst_base, c.dst, c.src_base, c.src, c.n = kind, dst_base, dst, src_base, src, size
    c.unless_reads_in = False


cdef object _overlap(object name, const Arg *send, const Arg *recv):
    return ValueError(f"{name}: sendbuf (bytes {<size_t>send.ptr:#x}..+{nbytes_of(send)}) and recvbuf "
                      f"(bytes {<size_t>recv.ptr:#x}..+{nbytes_of(recv)}) overlap; pass MPI.IN_PLACE "
                      "to work in place")


cdef int aliased(object name, const Arg *send, const Arg *recv, bint exact_ok) except -1:
    """1 when ``send`` is exactly ``recv``'s memory and ``exact_ok`` (the call then runs as
    with MPI.IN_PLACE), 0 when they do not overlap; ValueError for any other overlap."""
    if not nbytes_of(send) or not nbytes_of(recv) or not shares(send, recv):
        return 0
    if exact_ok and send.ptr == recv.ptr and nbytes_of(send) == nbytes_of(recv):
        return 1
    raise _overlap(name, send, recv)


cdef int check_type(object name, const Arg *send, const Arg *recv) except -1:
    if not same_type(send, recv):
        raise TypeError(f"{name}: sendbuf dtype {dtype_of(send)} differs from recvbuf dtype {dtype_of(recv)}")
    return 0


cdef Py_ssize_t root_of(object root, Py_ssize_t size, object name) except -1:
    """``root`` checked: TypeError when it is not an integer (as mpi4py), ValueError when it
    names no rank (mpi4py leaves that to MPI, whose MPI.Exception says ERR_ROOT)."""
    cdef Py_ssize_t r
    if type(root) is int:
        try:
            r = root
        except OverflowError:
            r = -1
        if 0 <= r < size:
            return r
    elif not isinstance(root, (int, np.integer)) or isinstance(root, bool):
        raise TypeError(f"{name}: root must be an integer, got {root!r}")
    elif 0 <= root < size:
        return root
    raise ValueError(f"{name}: invalid root {root!r} for a communicator of size {size}")


cdef inline int element_type(const Arg *a) noexcept:
    """The element type the agreement compares: the kernel code's NumPy number, else the buffer's."""
    return npy_num(a.code) if a.code >= 0 else a.num


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


cdef class Call:
    """One collective call: what its description resolved, for the engine to plan, agree and
    run.  Made once per call (a Comm reuses one for its blocking calls), it holds the views of
    the call's buffers until it is released."""

    def __cinit__(self, int rank, int size):
        self.rank, self.size = rank, size
        self.held = Views()
        self.room = size
        self.counts = <Py_ssize_t *>malloc(4 * size * sizeof(Py_ssize_t))
        self.kcounts = <int64_t *>malloc(size * sizeof(int64_t))
        self.fields = <int64_t *>malloc((4 + size) * sizeof(int64_t))
        if self.counts == NULL or self.kcounts == NULL or self.fields == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.counts)
        free(self.kcounts)
        free(self.fields)

    cdef int begin(self, int coll, object method, object algorithm) except -1:
        """Start describing a ``method`` call of collective ``coll`` asking for ``algorithm``."""
        cdef int i
        if isinstance(algorithm, str) and (PyUnicode_GET_LENGTH(algorithm) == 0 or algorithm == "auto"):
            algorithm = None  # auto: what a call naming no algorithm gets
        self.coll, self.method, self.algorithm = coll, method, algorithm
        self.native = self.error = self.op = None
        self.args = ()
        self.opc = self.dtype = -1
        self.root = self.count = self.nbytes = self.start = 0
        self.uniform, self.apart, self.in_place, self.is_root = True, False, False, False
        self.counts_pending = self.key_counts = self.per_rank = False
        self.template = self.once = self.summed = False
        self.digest = 0
        self.nblocks, self.hood = self.size, None
        for i in range(KEY_WORDS):
            self.key[i] = 0
        self.key[0] = coll
        self.nfields = 0
        self.keys = ()
        self.fin.kind = self.fout.kind = self.pre.kind = self.post.kind = C_NONE
        self.fbytes = self.fblock = 0
        self.fdtype, self.fop, self.fhas = BYTE_CODE, 0, True
        self.acc = self.inp = self.out = self.stage = NULL
        self.acc_n = self.in_n = self.out_n = self.scratch = 0
        self.acc_base = self.in_base = B_PTR
        self.ldtype, self.lop, self.moves = BYTE_CODE, 0, False
        return 0

    cdef int blocks(self, Py_ssize_t n) except -1:
        """Room in ``counts`` for four arrays of ``n`` blocks, ``nblocks`` = n apart."""
        cdef Py_ssize_t *grown
        if n > self.room:
            grown = <Py_ssize_t *>realloc(self.counts, 4 * n * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self.counts, self.room = grown, n
        self.nblocks = n
        return 0

    cdef int refused(self, object exc, tuple args) except -1:
        """Keep the description's outcome ``exc``: Native (MPI's own call, with mpi4py's
        ``args``) or this rank's ValueError or TypeError; anything else propagates."""
        if isinstance(exc, Native):
            self.native, self.args = exc, args
        elif isinstance(exc, (ValueError, TypeError)):
            self.error = exc
        else:
            raise exc
        return 0

    cdef void release(self) noexcept:
        """Let go of the call's buffers."""
        self.held.release()
        self.op = None

    cdef tuple builder_args(self):
        """The arguments of the chosen algorithm's schedule builder for this call's shape."""
        cdef Py_ssize_t i, p = self.size
        if self.coll == ALLREDUCE or self.coll == SCAN or self.coll == EXSCAN:
            return (self.count,)
        if self.coll == BCAST:
            return (self.nbytes, self.root)
        if self.coll == REDUCE_:
            return (self.count, self.root)
        if self.coll == BARRIER:
            return ()
        cdef Py_ssize_t b = self.nblocks
        cdef Py_ssize_t *cnt = self.counts
        if self.hood is not None:
            # (peer, offset, count) per message; a template's block j is (j, 1), filled in per call.
            if self.template:
                return (tuple([(m[0], m[1], 1) for m in self.hood.sends]),
                        tuple([(m[0], m[1], 1) for m in self.hood.recvs]))
            return (tuple([(m[0], cnt[b + m[1]], cnt[m[1]]) for m in self.hood.sends]),
                    tuple([(m[0], cnt[3 * b + m[1]], cnt[2 * b + m[1]]) for m in self.hood.recvs]))
        if self.template:
            marks = tuple([(i, 1) for i in range(p)])
            return (marks, marks)
        if self.once:
            return (tuple([(cnt[b + i], cnt[i]) for i in range(p)]),
                    tuple([(cnt[3 * b + i], cnt[2 * b + i]) for i in range(p)]))
        blocks = tuple([self.kcounts[i] for i in range(p)])
        if self.coll == ALLTOALL:
            # (offset, bytes) of the block for (and from) each rank.
            sends = tuple([(i * blocks[i], blocks[i]) for i in range(p)])
            return (sends, sends)
        if self.coll == ALLGATHER:
            return (blocks,)
        if self.coll == REDUCE_SCATTER:
            return (blocks, not self.in_place)
        return (blocks, self.root)

    cdef Py_ssize_t elements(self) noexcept:
        """The call's element count, for the timeline."""
        return self.recv.count if self.coll == BCAST else self.count


cdef int describe_elementwise(Call c, object sendbuf, object recvbuf, object op) except -1:
    """What Allreduce, Scan and Exscan share: one vector per rank, combined elementwise with
    ``op`` into ``recvbuf`` (ACC), read from ``sendbuf`` (IN, which is ACC in place)."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t nb
    name = c.method
    resolve(recvbuf, "recvbuf", True, 1, recv, c.held)
    if in_place_spec(sendbuf):
        send[0] = recv[0]
    else:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
        if send.count != recv.count:
            raise ValueError(f"{name}: sendbuf has {send.count} elements but recvbuf has {recv.count}")
        check_type(name, send, recv)
        if aliased(name, send, recv, True):
            send[0] = recv[0]
    c.opc, c.op = op_code(op, recv), op
    c.dtype = recv.code
    c.apart = send.ptr != recv.ptr
    nb = nbytes_of(recv)
    c.count, c.nbytes = recv.count, nb
    c.key[2], c.key[3], c.key[4], c.key[5] = recv.count, recv.code, c.opc, c.apart
    c.fields[0], c.fields[1], c.fields[2] = recv.count, recv.code, c.opc
    c.nfields, c.keys = 3, ("count", "dtype", "op")
    c.acc, c.acc_n, c.inp, c.in_n = recv.ptr, nb, send.ptr, nb
    c.ldtype, c.lop = recv.code, c.opc
    c.moves = recv.count and c.size > 1
    return 0


cdef int describe_allreduce(Call c, object sendbuf, object recvbuf, object op) except -1:
    cdef Py_ssize_t nb
    describe_elementwise(c, sendbuf, recvbuf, op)
    nb = c.nbytes
    bytes_copy(&c.fin, B_BODY, NULL, B_PTR, c.send.ptr, nb)
    bytes_copy(&c.fout, B_PTR, c.recv.ptr, B_BODY, NULL, nb)
    c.fbytes, c.fdtype, c.fop = nb, c.recv.code, c.opc
    if c.apart:
        bytes_copy(&c.pre, B_PTR, c.recv.ptr, B_PTR, c.send.ptr, nb, True)
    return 0


cdef int describe_scan(Call c, object sendbuf, object recvbuf, object op, bint exclusive) except -1:
    """Scan, or Exscan (``exclusive``); no fused form: every rank's result differs."""
    describe_elementwise(c, sendbuf, recvbuf, op)
    if c.apart and not exclusive:
        # Run when the schedule does not (one rank, or no elements): the prefix is the input.
        bytes_copy(&c.pre, B_PTR, c.recv.ptr, B_PTR, c.send.ptr, c.nbytes, True)
    return 0


cdef int describe_bcast(Call c, object buf, object root) except -1:
    cdef Arg *a = &c.recv
    cdef Py_ssize_t nb
    c.root = root_of(root, c.size, "Bcast")
    c.is_root = c.root == c.rank
    resolve(buf, "buf", True, 1, a, c.held)
    nb = nbytes_of(a)
    c.count = c.nbytes = nb
    c.key[2], c.key[3] = nb, c.root
    c.fields[0], c.fields[1] = nb, c.root
    c.nfields, c.keys = 2, ("nbytes", "root")
    bytes_copy(&c.fin, B_BODY, NULL, B_PTR, a.ptr, nb)
    bytes_copy(&c.fout, B_PTR, a.ptr, B_BODY, NULL, nb)
    c.fbytes, c.fhas = nb, c.is_root
    c.acc, c.acc_n = a.ptr, nb
    c.moves = nb and c.size > 1
    return 0


cdef int describe_reduce(Call c, object sendbuf, object recvbuf, object op, object root) except -1:
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t nb
    c.root = root_of(root, c.size, "Reduce")
    c.is_root = c.root == c.rank
    recv.ptr = NULL
    if c.is_root:
        resolve(recvbuf, "recvbuf", True, 1, recv, c.held)
    if in_place_spec(sendbuf):
        if not c.is_root:
            raise ValueError("Reduce: MPI.IN_PLACE is only valid at the root")
        send[0] = recv[0]
    else:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
        if c.is_root:
            if send.count != recv.count:
                raise ValueError(f"Reduce: sendbuf has {send.count} elements but recvbuf has {recv.count}")
            check_type("Reduce", send, recv)
            if aliased("Reduce", send, recv, True):
                send[0] = recv[0]
    c.opc, c.op = op_code(op, send), op
    c.dtype = send.code
    nb = nbytes_of(send)
    c.count, c.nbytes = send.count, nb
    c.key[2], c.key[3], c.key[4], c.key[5] = send.count, send.code, c.opc, c.root
    c.fields[0], c.fields[1], c.fields[2], c.fields[3] = send.count, send.code, c.opc, c.root
    c.nfields, c.keys = 4, ("count", "dtype", "op", "root")
    bytes_copy(&c.fin, B_BODY, NULL, B_PTR, send.ptr, nb)
    if c.is_root:
        bytes_copy(&c.fout, B_PTR, recv.ptr, B_BODY, NULL, nb)
    c.fbytes, c.fdtype, c.fop = nb, send.code, c.opc
    if c.is_root:
        c.acc, c.acc_n = recv.ptr, nb
    c.inp, c.in_n = send.ptr, nb
    c.ldtype, c.lop = send.code, c.opc
    c.moves = send.count > 0
    return 0


cdef int per_rank_fields(Call c, int64_t first, int64_t second, tuple keys) noexcept:
    """The fields [first, second, count0, count1, ...] from ``counts`` (UNKNOWN where a rank
    does not know one, -1 there)."""
    cdef int i
    c.fields[0], c.fields[1] = first, second
    for i in range(c.size):
        c.fields[2 + i] = c.counts[i] if c.counts[i] >= 0 else UNKNOWN
    c.nfields, c.keys, c.per_rank = 2 + c.size, keys, True
    return 0


cdef int one_count(object recvbuf, object method) except -1:
    """ValueError when ``method``'s recvbuf spec gives per-rank counts or displacements, which
    only its v-form takes."""
    if (type(recvbuf) is list or type(recvbuf) is tuple) and (
            len(recvbuf) == 4 or (len(recvbuf) == 3 and type(recvbuf[1]) is tuple)):
        raise ValueError(f"{method}: recvbuf may give one count, that of each rank's block; "
                         f"use {method}v for per-rank counts and displacements")
    return 0


cdef int describe_allgather(Call c, object sendbuf, object recvbuf) except -1:
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t i, n, p = c.size, each
    cdef char *own
    one_count(recvbuf, "Allgather")
    resolve(recvbuf, "recvbuf", True, p, recv, c.held)
    if in_place_spec(sendbuf):
        if recv.count % p:
            raise ValueError(f"Allgather: in-place recvbuf of {recv.count} elements is not divisible "
                             f"by {p} ranks")
        n = recv.count // p
        send[0] = recv[0]
        send.ptr = recv.ptr + c.rank * n * recv.size
        send.count = n
    else:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
        check_type("Allgather", send, recv)
        aliased("Allgather", send, recv, False)
        n = send.count
        if recv.count != n * p:
            raise ValueError(f"Allgather: recvbuf has {recv.count} elements, expected {p} x {n} = {n * p}")
    each = n * recv.size
    own = recv.ptr + c.rank * each
    for i in range(p):
        c.counts[i] = n
        c.kcounts[i] = each
    c.count, c.nbytes = n * p, each * p
    c.key[2] = each
    per_rank_fields(c, element_type(recv), recv.size, ("dtype", "itemsize"))
    bytes_copy(&c.fin, B_BODY, <char *>(c.rank * each), B_PTR, send.ptr, each)
    bytes_copy(&c.fout, B_PTR, recv.ptr, B_BODY, NULL, each * p)
    c.fbytes, c.fblock = each * p, each
    c.acc, c.acc_n, c.inp, c.in_n = recv.ptr, each * p, send.ptr, each
    c.moves = n and p > 1
    if send.ptr != own:
        bytes_copy(&c.pre, B_PTR, own, B_PTR, send.ptr, each, True)
    return 0


cdef int describe_allgatherv(Call c, object sendbuf, object recvbuf) except -1:
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t p = c.size, r = c.rank, total, i, size
    cdef Py_ssize_t *cnt = c.counts
    cdef Py_ssize_t *dis = cnt + p
    cdef Py_ssize_t *at = cnt + 2 * p
    cdef bint packed
    resolve_vector(recvbuf, "recvbuf", True, p, cnt, dis, recv, c.held)
    if in_place_spec(sendbuf):
        send[0] = recv[0]
        send.ptr = recv.ptr + dis[r] * recv.size
        send.count = cnt[r]
    else:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
        check_type("Allgatherv", send, recv)
        aliased("Allgatherv", send, recv, False)
        if send.count != cnt[r]:
            raise ValueError(f"Allgatherv: sendbuf has {send.count} elements but recvbuf expects "
                             f"{cnt[r]} from rank {r}")
    size = recv.size
    packed = packed_offsets(p, cnt, dis, at)
    total = at[p - 1] + cnt[p - 1]
    for i in range(p):
        c.kcounts[i] = cnt[i] * size
        c.uniform = c.uniform and cnt[i] == cnt[0]
    c.count, c.nbytes, c.key_counts = total, total * size, True
    c.key[2] = -1  # the v-form (Allgather's word is its block's bytes)
    per_rank_fields(c, element_type(recv), size, ("dtype", "itemsize"))
    # Equal blocks (the fused form's restriction) meet in the payload in rank order.
    bytes_copy(&c.fin, B_BODY, <char *>(at[r] * size), B_PTR, send.ptr, cnt[r] * size)
    blocks_copy(&c.fout, C_UNPACK, B_PTR, recv.ptr, B_BODY, NULL, size)
    c.fbytes, c.fblock = total * size, cnt[r] * size
    # The schedule wants the blocks in rank order from 0: other layouts go via scratch.
    c.stage = recv.ptr
    if not packed:
        c.scratch = total * size
        blocks_copy(&c.post, C_UNPACK, B_PTR, recv.ptr, B_STAGE, NULL, size)
    c.acc_base, c.acc, c.acc_n = B_STAGE, NULL, total * size
    c.inp, c.in_n = send.ptr, cnt[r] * size
    c.moves = total and p > 1
    if not packed or send.ptr != recv.ptr + at[r] * size:
        bytes_copy(&c.pre, B_STAGE, <char *>(at[r] * size), B_PTR, send.ptr, cnt[r] * size, True)
    return 0


cdef int describe_reduce_scatter(Call c, object sendbuf, object recvbuf, object recvcounts, object op,
                                 bint block) except -1:
    """Reduce_scatter_block (``block``: equal blocks, recvbuf one of them) or Reduce_scatter
    (``recvcounts`` None: every rank's recvbuf gives its count, gathered when the call runs)."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t p = c.size, i
    cdef Py_ssize_t *cnt = c.counts
    name = "Reduce_scatter_block" if block else "Reduce_scatter"
    c.in_place = in_place_spec(sendbuf)
    resolve(recvbuf, "recvbuf", True, 1, recv, c.held)
    if c.in_place:
        send[0] = recv[0]
    else:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
    check_type(name, send, recv)
    if not c.in_place and aliased(name, send, recv, True):
        c.in_place = True  # sendbuf is recvbuf exactly: MPI.IN_PLACE with explicit counts
    c.opc, c.op = op_code(op, recv), op
    c.dtype = recv.code
    if block or (recvcounts is None and c.in_place):
        if send.count % p:
            raise ValueError(f"{name}: {send.count} elements do not split evenly over {p} ranks")
        if block and not c.in_place and recv.count != send.count // p:
            # As mpi4py: the receive buffer holds exactly one block.
            raise ValueError(f"{name}: mismatch in send count {send.count // p} and receive count "
                             f"{recv.count}: recvbuf holds one block of {send.count // p} elements")
        for i in range(p):
            cnt[i] = send.count // p
    elif recvcounts is None:
        c.counts_pending = True  # the engine gathers every rank's recvbuf count, then finishes
        cnt[c.rank] = recv.count
        return 0
    else:
        try:
            integers(recvcounts, p, cnt, name, "recvcounts")
        except (ValueError, TypeError):
            raise ValueError(f"{name}: recvcounts must be {p} non-negative counts, got "
                             f"{tuple(np.atleast_1d(recvcounts).tolist())}") from None
    return finish_reduce_scatter(c)


cdef int finish_reduce_scatter(Call c) except -1:
    """The rest of a reduce-scatter's description, once ``counts`` holds every rank's count."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t p = c.size, r = c.rank, total = 0, start = 0, i, size = send.size, mine
    cdef Py_ssize_t *cnt = c.counts
    name = c.method
    c.counts_pending = False
    for i in range(p):
        if cnt[i] < 0:
            raise ValueError(f"{name}: recvcounts must be {p} non-negative counts, got "
                             f"{tuple(cnt[j] for j in range(p))}")
        total += cnt[i]
        start += cnt[i] if i < r else 0
        c.uniform = c.uniform and cnt[i] == cnt[0]
        c.kcounts[i] = cnt[i]
    if send.count != total:
        raise ValueError(f"{name}: sendbuf has {send.count} elements but the counts add up to {total}")
    if not c.in_place and recv.count < cnt[r]:
        raise ValueError(f"{name}: recvbuf has {recv.count} elements, rank {r} receives {cnt[r]}")
    mine = cnt[r] * size
    c.start = start
    c.count, c.nbytes, c.apart, c.key_counts = total, total * size, True, True
    c.key[2], c.key[3], c.key[4] = recv.code, c.opc, c.in_place
    per_rank_fields(c, recv.code, c.opc, ("dtype", "op"))
    bytes_copy(&c.fin, B_BODY, NULL, B_PTR, send.ptr, total * size)
    bytes_copy(&c.fout, B_PTR, recv.ptr, B_BODY, <char *>(start * size), mine)
    c.fbytes, c.fdtype, c.fop = total * size, recv.code, c.opc
    c.ldtype, c.lop = recv.code, c.opc
    if not total or p == 1:
        # Nothing to reduce; in place at p = 1 the block is copied onto itself.
        bytes_copy(&c.post, B_PTR, recv.ptr, B_PTR, send.ptr + start * size, mine)
        return 0
    # ACC is scratch: recvbuf past the rank's own block must stay untouched.  Not in place, the
    # schedule writes the rank's block straight into recvbuf (OUT).
    c.moves = True
    c.scratch = total * size
    c.acc_base, c.acc, c.acc_n = B_STAGE, NULL, total * size
    c.inp, c.in_n = send.ptr, total * size
    if c.in_place:
        # Writing recvbuf (IN) early would clobber input later steps still read.
        bytes_copy(&c.post, B_PTR, recv.ptr, B_STAGE, <char *>(start * size), mine)
    else:
        c.out, c.out_n = recv.ptr, mine
    return 0


cdef int describe_rooted(Call c, bint gather, bint vector, object sendbuf, object recvbuf, object root) except -1:
    """Gather(v) and Scatter(v): ``whole`` is the root's buffer of p blocks (Gather's receive
    buffer, Scatter's send buffer), ``own`` every rank's block (MPI.IN_PLACE at the root)."""
    cdef Arg *whole = &c.recv
    cdef Arg *own = &c.send
    cdef Py_ssize_t i, p = c.size, r = c.rank, total = 0, b, size
    cdef Py_ssize_t *cnt = c.counts
    cdef Py_ssize_t *dis = cnt + p
    cdef Py_ssize_t *at = cnt + 2 * p
    cdef bint packed = True, in_place
    whole_spec, own_spec = (recvbuf, sendbuf) if gather else (sendbuf, recvbuf)
    name = c.method
    in_place = in_place_spec(own_spec)
    root_name, own_name = ("recvbuf", "sendbuf") if gather else ("sendbuf", "recvbuf")
    c.root = root_of(root, p, name)
    c.is_root = c.root == r
    whole.ptr = NULL
    if c.is_root:
        if vector:
            resolve_vector(whole_spec, root_name, gather, p, cnt, dis, whole, c.held)
        else:
            resolve(whole_spec, root_name, gather, p, whole, c.held)
            if whole.count % p:
                raise ValueError(f"{root_name}: {whole.count} elements do not split evenly over {p} ranks")
            for i in range(p):
                cnt[i], dis[i] = whole.count // p, i * (whole.count // p)
    if in_place:
        if not c.is_root:
            raise ValueError(f"{name}: MPI.IN_PLACE is only valid at the root")
        # Gather sends the own block from where it lies; Scatter's stays there (NULL).
        own[0] = whole[0]
        own.ptr = whole.ptr + dis[r] * whole.size if gather else NULL
        own.count = cnt[r]
    else:
        resolve(own_spec, own_name, not gather, 1, own, c.held)
        if c.is_root:
            if gather:
                aliased(name, own, whole, False)
                check_type(name, own, whole)
            else:
                aliased(name, whole, own, False)
                check_type(name, whole, own)
            if own.count != cnt[r]:
                raise ValueError(f"{name}: the root's own block has {own.count} elements but the counts "
                                 f"give it {cnt[r]}")
    if not c.is_root:
        # Only the root knows every count of a Gatherv/Scatterv; a rank knows its own.
        for i in range(p):
            cnt[i] = own.count if i == r or not vector else -1
    size = (whole if c.is_root else own).size
    for i in range(p):
        c.kcounts[i] = cnt[i] * size if cnt[i] >= 0 else -1
    b = cnt[r] * size
    # Gatherv/Scatterv stay off the binomial algorithms even with equal counts: the other
    # ranks cannot know that, and every rank must choose alike.
    c.uniform = not vector
    c.count, c.nbytes, c.key_counts = cnt[r] * p, b * p, True
    c.key[2], c.key[3] = c.root, vector
    per_rank_fields(c, <int>c.root, size, ("root", "itemsize"))
    if c.is_root:
        packed = packed_offsets(p, cnt, dis, at)
        total = at[p - 1] + cnt[p - 1]
    # The fused forms: equal blocks only, so the root's buffer is its blocks in rank order.
    c.fbytes, c.fblock, c.fhas = b * p, b, gather or c.is_root
    if gather:
        bytes_copy(&c.fin, B_BODY, <char *>(r * b), B_PTR, own.ptr, b)
        if c.is_root:
            bytes_copy(&c.fout, B_PTR, whole.ptr, B_BODY, NULL, b * p)
    else:
        if c.is_root:
            bytes_copy(&c.fin, B_BODY, NULL, B_PTR, whole.ptr, b * p)
        if own.ptr != NULL:
            bytes_copy(&c.fout, B_PTR, own.ptr, B_BODY, <char *>(r * b), b)
    c.moves = True
    if c.is_root:
        c.stage = whole.ptr
        if not packed:
            c.scratch = total * size
    if gather:
        c.acc_base, c.acc, c.acc_n = B_STAGE, NULL, total * size
        c.inp, c.in_n = own.ptr, b
        if c.is_root and not packed:
            blocks_copy(&c.post, C_UNPACK, B_PTR, whole.ptr, B_STAGE, NULL, size)
    else:
        if c.is_root and not packed:
            blocks_copy(&c.pre, C_PACK, B_STAGE, NULL, B_PTR, whole.ptr, size)
        # In place, the root's own block is already where the schedule puts it.
        if own.ptr != NULL:
            c.acc, c.acc_n = own.ptr, b
        else:
            c.acc_base, c.acc, c.acc_n = B_STAGE, <char *>(at[r] * size), b
        c.in_base, c.inp, c.in_n = B_STAGE, NULL, total * size
    return 0


cdef int describe_alltoall(Call c, object sendbuf, object recvbuf) except -1:
    """Alltoall: block j of every rank's ``sendbuf`` to rank j, into block i of rank j's
    ``recvbuf`` for the sender i.  In place (MPI.IN_PLACE, or ``sendbuf`` that is ``recvbuf``
    exactly) the blocks to send are first copied to the stage: every block is overwritten."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t i, p = c.size, n, each
    one_count(recvbuf, "Alltoall")
    resolve(recvbuf, "recvbuf", True, p, recv, c.held)
    if recv.count % p:
        raise ValueError(f"Alltoall: recvbuf of {recv.count} elements is not divisible by {p} ranks")
    n = recv.count // p
    c.in_place = in_place_spec(sendbuf)
    if c.in_place:
        send[0] = recv[0]
    else:
        resolve(sendbuf, "sendbuf", False, p, send, c.held)
        check_type("Alltoall", send, recv)
        if send.count != recv.count:
            raise ValueError(f"Alltoall: sendbuf has {send.count} elements, recvbuf {recv.count}: each holds "
                             f"{p} blocks of the same count")
        c.in_place = aliased("Alltoall", send, recv, True)
    each = n * recv.size
    # counts: each block's, then its place in recvbuf, then where the fused form finds it: that
    # form gathers every rank's whole sendbuf into the payload in rank order, and block i of
    # this rank's recvbuf is block r of rank i's, at (i p + r) n.
    for i in range(p):
        c.counts[i], c.counts[p + i], c.counts[2 * p + i] = n, i * n, (i * p + c.rank) * n
        c.kcounts[i] = each
    c.count, c.nbytes = n * p, each * p
    c.key[2] = each
    c.fields[0], c.fields[1], c.fields[2] = n, element_type(recv), recv.size
    c.nfields, c.keys = 3, ("count", "dtype", "itemsize")
    bytes_copy(&c.fin, B_BODY, <char *>(c.rank * p * each), B_PTR, send.ptr, p * each)
    blocks_copy(&c.fout, C_UNPACK, B_PTR, recv.ptr, B_BODY, NULL, recv.size)
    c.fbytes, c.fblock = p * p * each, p * each
    c.acc, c.acc_n, c.in_n = recv.ptr, each * p, each * p
    c.moves = n and p > 1
    if not c.in_place:
        c.inp = send.ptr
        # Run when the schedule does not (one rank): the own block is the result.
        bytes_copy(&c.pre, B_PTR, recv.ptr + c.rank * each, B_PTR, send.ptr + c.rank * each, each, True)
    elif c.moves:
        c.scratch = each * p
        c.in_base, c.inp = B_STAGE, NULL
        bytes_copy(&c.pre, B_STAGE, NULL, B_PTR, recv.ptr, each * p)
    return 0


cdef int describe_alltoallv(Call c, object sendbuf, object recvbuf) except -1:
    """Alltoallv: ``sendcounts[j]`` elements at ``sdispls[j]`` of rank i's ``sendbuf`` to rank j,
    into ``recvcounts[i]`` elements at ``rdispls[i]`` of its ``recvbuf``.  In place (MPI.IN_PLACE)
    the receive counts and displacements are the send ones too, and the blocks to send are
    first copied to the stage.

    What one rank knows is checked here: its send and receive blocks fit their buffers, and it
    sends itself what it receives from itself.  That rank i's send count to j is rank j's
    receive count from i needs both ranks: the check sums ``digest`` over the ranks, one word
    per rank (collectives.agreement's "Counts that differ per rank").  The plan is a template
    of block markers, so counts that change from call to call do not make a new plan; a block
    over schedule.MAX_COUNT bytes, which the schedule cuts into pieces, is planned for its call
    alone."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t i, p = c.size, r = c.rank, size, total = 0, send_end = 0, recv_end = 0
    cdef Py_ssize_t *scnt = c.counts  # nblocks is p
    cdef Py_ssize_t *sdis = c.counts + p
    cdef Py_ssize_t *rcnt = c.counts + 2 * p
    cdef Py_ssize_t *rdis = c.counts + 3 * p
    cdef uint64_t digest = 0
    cdef Py_ssize_t limit = _schedule.MAX_COUNT  # read per call: the tests lower it
    resolve_vector(recvbuf, "recvbuf", True, p, rcnt, rdis, recv, c.held)
    c.in_place = in_place_spec(sendbuf)
    if c.in_place:
        send[0] = recv[0]
        for i in range(p):
            scnt[i], sdis[i] = rcnt[i], rdis[i]
    else:
        resolve_vector(sendbuf, "sendbuf", False, p, scnt, sdis, send, c.held)
        check_type("Alltoallv", send, recv)
        aliased("Alltoallv", send, recv, False)
    if scnt[r] != rcnt[r]:
        raise ValueError(f"Alltoallv: rank {r} sends itself {scnt[r]} elements but receives {rcnt[r]} "
                         "from itself")
    size = recv.size
    for i in range(p):
        scnt[i], sdis[i], rcnt[i], rdis[i] = scnt[i] * size, sdis[i] * size, rcnt[i] * size, rdis[i] * size
        digest += mix(mix(mix(0, r), i), scnt[i]) - mix(mix(mix(0, i), r), rcnt[i])
        c.once = c.once or scnt[i] > limit or rcnt[i] > limit
        c.kcounts[i] = rcnt[i]
        total += rcnt[i]
        send_end = max(send_end, sdis[i] + scnt[i])
        recv_end = max(recv_end, rdis[i] + rcnt[i])
    c.template, c.summed, c.digest, c.uniform = not c.once, True, digest, False
    c.count, c.nbytes = total // size if size else 0, total
    c.key[2] = -1  # the v-form (Alltoall's word is its block's bytes)
    c.fields[0], c.fields[1] = element_type(recv), size
    c.nfields, c.keys = 2, ("dtype", "itemsize")
    # Every rank runs the schedule, blocks of 0 bytes or not: it holds a message for every
    # peer whose count only the two ends know.
    c.moves = p > 1
    c.acc, c.acc_n = recv.ptr, recv_end
    if not c.moves:
        bytes_copy(&c.pre, B_PTR, recv.ptr + rdis[r], B_PTR, send.ptr + sdis[r], rcnt[r])
    elif c.in_place:
        c.scratch = recv_end
        c.in_base, c.inp, c.in_n = B_STAGE, NULL, recv_end
        bytes_copy(&c.pre, B_STAGE, NULL, B_PTR, recv.ptr, recv_end)
    else:
        c.inp, c.in_n = send.ptr, send_end
    return 0


cdef uint64_t edges_digest(object messages, Py_ssize_t frm, Py_ssize_t to, const Py_ssize_t *nbytes,
                           bint sent) noexcept:
    """The sum of H(sender, receiver, k, bytes) over a neighbourhood's ``messages`` (peer,
    block, k), this rank being the sender (``sent``: ``frm``) or the receiver (``to``)."""
    cdef uint64_t total = 0
    for peer, block, k in messages:
        total += mix(mix(mix(mix(0, frm if sent else peer), peer if sent else to), k), nbytes[block])
    return total


cdef int describe_neighbor(Call c, bint allgather, bint vector, object sendbuf, object recvbuf, object hood) except -1:
    """Neighbor_allgather(v) and Neighbor_alltoall(v) over ``hood`` (the communicator's
    collectives.neighbors.Neighbourhood): send block k to destination k (Neighbor_allgather:
    the whole send buffer to each), receive block k from source k.  MPI.IN_PLACE is not
    valid, as in MPI.  The counts' match across ranks is checked as Alltoallv's is, edge by
    edge (the k-th message between two ranks meets the k-th receive), and the plan is a
    template alike."""
    cdef Arg *send = &c.send
    cdef Arg *recv = &c.recv
    cdef Py_ssize_t i, n, size, total = 0, send_end = 0, recv_end = 0, r = c.rank
    cdef Py_ssize_t ind = hood.indegree, outd = hood.outdegree
    cdef Py_ssize_t limit = _schedule.MAX_COUNT
    cdef Py_ssize_t *scnt
    cdef Py_ssize_t *sdis
    cdef Py_ssize_t *rcnt
    cdef Py_ssize_t *rdis
    name = c.method
    c.hood = hood
    c.blocks(max(ind, outd, 1))
    scnt, sdis = c.counts, c.counts + c.nblocks
    rcnt, rdis = c.counts + 2 * c.nblocks, c.counts + 3 * c.nblocks
    if in_place_spec(sendbuf):
        raise ValueError(f"{name}: MPI.IN_PLACE is not valid for a neighbourhood collective")
    if vector:
        resolve_vector(recvbuf, "recvbuf", True, ind, rcnt, rdis, recv, c.held)
    else:
        one_count(recvbuf, name)
        resolve(recvbuf, "recvbuf", True, max(ind, 1), recv, c.held)
    if allgather:
        resolve(sendbuf, "sendbuf", False, 1, send, c.held)
        for i in range(outd):
            scnt[i], sdis[i] = send.count, 0
    elif vector:
        resolve_vector(sendbuf, "sendbuf", False, outd, scnt, sdis, send, c.held)
    else:
        resolve(sendbuf, "sendbuf", False, max(outd, 1), send, c.held)
        if outd and send.count % outd:
            raise ValueError(f"{name}: sendbuf of {send.count} elements is not divisible by {outd} destinations")
        n = send.count // outd if outd else 0
        for i in range(outd):
            scnt[i], sdis[i] = n, i * n
    check_type(name, send, recv)
    aliased(name, send, recv, False)
    if not vector:
        if ind and recv.count % ind:
            raise ValueError(f"{name}: recvbuf of {recv.count} elements is not divisible by {ind} sources")
        n = recv.count // ind if ind else 0
        if allgather and ind and n != send.count:
            raise ValueError(f"{name}: recvbuf holds {ind} blocks of {n} elements, sendbuf {send.count}")
        for i in range(ind):
            rcnt[i], rdis[i] = n, i * n
    size = recv.size
    for i in range(outd):
        scnt[i], sdis[i] = scnt[i] * size, sdis[i] * size
        c.once = c.once or scnt[i] > limit
        send_end = max(send_end, sdis[i] + scnt[i])
    for i in range(ind):
        rcnt[i], rdis[i] = rcnt[i] * size, rdis[i] * size
        c.once = c.once or rcnt[i] > limit
        total += rcnt[i]
        recv_end = max(recv_end, rdis[i] + rcnt[i])
    c.digest = edges_digest(hood.sends, r, 0, scnt, True) - edges_digest(hood.recvs, 0, r, rcnt, False)
    # A rank's messages to itself are copies in the schedule: both ends are here to compare.
    for k, out, into in hood.own:
        if out is not None and into is not None and scnt[out] == rcnt[into]:
            continue
        which = f" (message {k + 1} to itself)" if k else ""
        if out is None:
            raise ValueError(f"{name}: rank {r} receives from itself but sends itself no message{which}")
        theirs = "no message" if into is None else rcnt[into] // size
        raise ValueError(f"{name}: rank {r} sends {scnt[out] // size} elements to rank {r}, which receives {theirs} "
                         f"from rank {r}{which}")
    c.template, c.summed, c.uniform = not c.once, True, not vector
    c.count, c.nbytes = total // size if size else 0, total
    c.fields[0], c.fields[1] = element_type(recv), size
    c.nfields, c.keys = 2, ("dtype", "itemsize")
    c.moves = len(hood.sends) + len(hood.recvs) > 0
    c.acc, c.acc_n = recv.ptr, recv_end
    c.inp, c.in_n = send.ptr, send_end
    return 0


cdef int describe_barrier(Call c) except -1:
    c.moves = c.size > 1
    return 0
