# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The timeline's ring of records: a file mapped into memory, written from C.

A record is ``WIDTH`` doubles (start and end in seconds of CLOCK_MONOTONIC, kind, code,
algorithm, bytes, count, peer); the engine writes one per collective call and per phase
(check, transfer), the waits write one each with the rank waited for, the training loop
one per phase.  The ring keeps the latest ``capacity`` records.  Because the ring is a
shared mapping of a file, what a rank recorded is on disk even when the launcher kills the
rank without warning (MPI_Abort on another rank): ``collectives.timeline`` turns the rings
into Chrome trace files.

The file: a header of HEADER int64 words (MAGIC, VERSION, rank, size, capacity, records
written, then the clock offset to rank 0's clock and rank 0's start time as float64 bits),
then the records.
"""
import mmap
import os

import numpy as np

MAGIC = 0x4C544C43  # "CLTL"
VERSION = 1
HEADER = 8


cdef extern from *:
    """
    static inline void ck_prefetch_for_write(const void *p) { __builtin_prefetch(p, 1, 3); }
    """
    void prefetch_for_write "ck_prefetch_for_write"(const void *p) noexcept nogil

# Records ahead of the next one whose cache line put asks for: a record is one cache line, and
# a store to a line not in the cache waits for memory, which at one record per wait was a
# measurable part of an 8-byte call.
cdef enum:
    AHEAD = 4


cdef void put(Ring *ring, double t0, double t1, int kind, int code, int algorithm, double nbytes,
              double count, double peer) noexcept nogil:
    """Append a record (overwriting the oldest once the ring is full)."""
    cdef long long k = ring.written[0]
    cdef double *r = ring.records + (k % ring.capacity) * WIDTH
    r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] = t0, t1, kind, code, algorithm, nbytes, count, peer
    ring.written[0] = k + 1
    prefetch_for_write(ring.records + ((k + AHEAD) % ring.capacity) * WIDTH)


cdef class Recorder:
    """The ring of one rank in the file at ``path``, for ``capacity`` records; ``offset`` is
    what this rank adds to its clock to read rank 0's, ``epoch`` rank 0's start time."""

    def __init__(self, path, int rank, int size, long long capacity, double offset, double epoch):
        cdef Py_ssize_t nbytes = 8 * (HEADER + capacity * WIDTH)
        cdef long long[:] header
        cdef double[:] body
        self.rank, self.size = rank, size
        with open(path, "wb+") as f:
            # Blocks allocated now, not by the page faults of the first records.
            os.posix_fallocate(f.fileno(), 0, nbytes)
            self.mapping = mmap.mmap(f.fileno(), nbytes)
        words = np.frombuffer(self.mapping, np.int64, HEADER)
        words[:6] = (MAGIC, VERSION, rank, size, capacity, 0)
        words[6:8] = np.array([offset, epoch], np.float64).view(np.int64)
        header = words
        body = np.frombuffer(self.mapping, np.float64, capacity * WIDTH, 8 * HEADER)
        # A store to every page now, so that the records' stores find them mapped and writable
        # instead of faulting one page in 64 records.
        body[::4096 // 8] = 0
        self.view = (words, body)
        self.ring.written = &header[5]
        self.ring.records = &body[0]
        self.ring.capacity = capacity

    def add(self, int kind, int code, int algorithm, double t0, double t1, double nbytes=0, double count=0,
            double peer=-1):
        """Append a record (the training loop's phases come this way)."""
        put(&self.ring, t0, t1, kind, code, algorithm, nbytes, count, peer)

    @property
    def written(self):
        """Records written so far."""
        return self.ring.written[0]

    def flush(self):
        """Push the records to the file now (the kernel does it anyway, the process alive or not)."""
        self.mapping.flush()


def read(path):
    """(header dict, records array of shape (n, WIDTH), oldest first) of the ring at ``path``;
    ValueError when it is no ring."""
    raw = np.fromfile(path, np.int64, HEADER)
    if raw.size < HEADER or raw[0] != MAGIC or raw[1] != VERSION:
        raise ValueError(f"{path}: not a collectives timeline ring")
    rank, size, capacity, written = (int(v) for v in raw[2:6])
    offset, epoch = raw[6:8].view(np.float64)
    body = np.fromfile(path, np.float64, capacity * WIDTH, offset=8 * HEADER).reshape(capacity, WIDTH)
    n = min(written, capacity)
    start = written % capacity if written > capacity else 0
    records = np.concatenate([body[start:n], body[:start]]) if start else body[:n]
    return dict(rank=rank, size=size, capacity=capacity, written=written, offset=float(offset),
                epoch=float(epoch), path=os.fspath(path)), records


KINDS = {"call": CALL, "check": CHECK, "transfer": TRANSFER, "wait": WAIT, "phase": PHASE}
