# A collective call as a value: everything one call's description resolves, for the engine
# that plans, agrees and runs it (collectives._engine).
from libc.stdint cimport int64_t, uint64_t

from collectives._buffers cimport Arg, Views

cdef enum:
    KEY_WORDS = 7
    # Copy.kind: nothing; n bytes (memmove: they may overlap); the blocks of ``counts`` at their
    # displacements into rank order (packed offsets), or back.
    C_NONE = 0
    C_BYTES = 1
    C_PACK = 2
    C_UNPACK = 3
    # What a pointer is relative to: nothing (an address), the stage (a root's or a result's
    # blocks in rank order: the caller's buffer, or the engine's scratch when the call asks for
    # it), or the checked exchange's payload.
    B_PTR = 0
    B_STAGE = 1
    B_BODY = 2


cdef inline uint64_t mix(uint64_t h, uint64_t word) noexcept:
    """One word into a hash (splitmix64's finalizer over the sum)."""
    h = (h ^ word) + 0x9E3779B97F4A7C15ULL
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL
    return h ^ (h >> 31)


cdef struct Copy:
    int kind, dst_base, src_base
    char *dst
    char *src
    Py_ssize_t n           # bytes (C_BYTES), or the element size (C_PACK, C_UNPACK)
    bint unless_reads_in   # skipped when the plan reads IN itself (it copies what it needs)


cdef class Call:
    # What the call is: the collective's index, mpi4py's name of the method and its arguments
    # (MPI's own call takes them), the algorithm asked for and the op as given.
    cdef readonly int coll
    cdef readonly object method
    cdef tuple args
    cdef object algorithm, op
    # Native's reason when no algorithm covers the call; this rank's ValueError or TypeError.
    cdef object native, error
    cdef Views held
    cdef readonly int rank, size
    cdef Arg send, recv
    cdef int opc, dtype        # the reduction's op and the elements' kernel dtype code, -1: none
    cdef Py_ssize_t root, count, nbytes, start
    cdef bint uniform, apart, in_place, is_root
    # Reduce_scatter without counts: the counts come from every rank, when it runs.
    cdef bint counts_pending
    # Per rank: counts, then displacements, then packed offsets; Alltoallv's and the
    # neighbourhood collectives': the byte counts and offsets of the send blocks, then of the
    # receive blocks, ``nblocks`` apart (room for ``room`` of each).
    cdef Py_ssize_t *counts
    cdef Py_ssize_t nblocks, room
    # A neighbourhood collective's messages (collectives.neighbors.Neighbourhood).
    cdef object hood
    # The plan key: KEY_WORDS words, and the per-rank byte counts when ``key_counts``.
    cdef int64_t key[KEY_WORDS]
    cdef bint key_counts
    # Alltoallv: the plan is a template of block markers, filled in with ``counts`` per call
    # (``template``), or, with a block over MAX_COUNT, made for this call alone (``once``);
    # and the digest of its counts that the check sums over the ranks (``summed``).
    cdef bint template, once, summed
    cdef uint64_t digest
    cdef int64_t *kcounts
    # The agreement: ``nfields`` fields named by ``keys``, then count0 .. count{p-1} with ``per_rank``.
    cdef int64_t *fields
    cdef int nfields
    cdef tuple keys
    cdef bint per_rank
    # The fused form: the copies into and out of the exchange's payload, its length, block,
    # dtype and op, and whether this rank's payload holds data yet.
    cdef Copy fin, fout
    cdef Py_ssize_t fbytes, fblock
    cdef int fdtype, fop
    cdef bint fhas
    # The schedule: ACC, IN and OUT with their byte lengths (ACC and IN may lie in the stage:
    # then their pointers are offsets), the stage (``scratch`` > 0: the engine's scratch of that
    # many bytes), the dtype and op it runs with, whether it moves any data, and the copies
    # before and after it.
    cdef char *acc
    cdef char *inp
    cdef char *out
    cdef char *stage
    cdef Py_ssize_t acc_n, in_n, out_n, scratch
    cdef int acc_base, in_base, ldtype, lop
    cdef bint moves
    cdef Copy pre, post

    cdef int begin(self, int coll, object method, object algorithm) except -1
    cdef int blocks(self, Py_ssize_t n) except -1
    cdef int refused(self, object exc, tuple args) except -1
    cdef void release(self) noexcept
    cdef tuple builder_args(self)
    cdef Py_ssize_t elements(self) noexcept


cdef int describe_allreduce(Call c, object sendbuf, object recvbuf, object op) except -1
cdef int describe_scan(Call c, object sendbuf, object recvbuf, object op, bint exclusive) except -1
cdef int describe_bcast(Call c, object buf, object root) except -1
cdef int describe_reduce(Call c, object sendbuf, object recvbuf, object op, object root) except -1
cdef int describe_allgather(Call c, object sendbuf, object recvbuf) except -1
cdef int describe_allgatherv(Call c, object sendbuf, object recvbuf) except -1
cdef int describe_reduce_scatter(Call c, object sendbuf, object recvbuf, object recvcounts, object op,
                                 bint block) except -1
cdef int finish_reduce_scatter(Call c) except -1
cdef int describe_rooted(Call c, bint gather, bint vector, object sendbuf, object recvbuf, object root) except -1
cdef int describe_alltoall(Call c, object sendbuf, object recvbuf) except -1
cdef int describe_alltoallv(Call c, object sendbuf, object recvbuf) except -1
cdef int describe_neighbor(Call c, bint allgather, bint vector, object sendbuf, object recvbuf, object hood) except -1
cdef int describe_barrier(Call c) except -1
