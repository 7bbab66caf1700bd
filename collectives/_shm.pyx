# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A node's shared segment: the mapping csrc/shm.c runs collectives in (collectives.shm makes it).

The segment is a POSIX shared-memory object that one rank creates and every rank of the node
maps; it is unlinked as soon as all have mapped it, so the kernel frees it when the last rank
unmaps it or ends, and nothing is left in /dev/shm, even by a job that was killed.  Unmapping
is local: a Comm freed, or collected, frees its segment without a collective call.
"""
from cpython.pystate cimport PyThreadState
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

from collectives._requests cimport NEVER_S

from collectives.watchdog import MAX_PAUSE_S, SPIN_S, YIELD_S

cdef extern from "Python.h":
    PyThreadState *PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState *state)


def region_bytes(int size, Py_ssize_t cap):
    """Bytes of one region of a segment for ``size`` ranks holding ``cap`` bytes of data."""
    return shm_region_bytes(size, cap)


cdef void release_gil(shm_seg *s) noexcept:
    """A wait called holding the GIL that outlasts its spin lets the other threads run: a
    phase that completes while it spins costs no release."""
    s.parked = <void *>PyEval_SaveThread()


cdef void take_gil(shm_seg *s) noexcept:
    PyEval_RestoreThread(<PyThreadState *>s.parked)


cdef class Segment:
    """This rank's mapping of a node's segment: ``size`` ranks, two regions each of
    ``region`` bytes, ``cap`` bytes of data per phase, ``chunk`` bytes per round of the
    pipelined forms."""

    def __cinit__(self):
        self.words = NULL

    def __init__(self, name, bint create, Py_ssize_t nbytes, int rank, int size, Py_ssize_t region,
                 Py_ssize_t chunk):
        """Map ``name`` (``create``: make it first); OSError naming the reason when it cannot be."""
        cdef int rc
        cdef bytes encoded = name.encode()
        self.name = name
        rc = shm_map(&self.s, encoded, create, nbytes, rank, size, region)
        if rc:
            raise OSError(rc, f"shared segment {name} of {nbytes} bytes")
        self.words = <int64_t *>malloc(2 * size * sizeof(int64_t))
        if self.words == NULL:
            shm_unmap(&self.s)
            raise MemoryError()
        self.chunk = min(chunk, <Py_ssize_t>self.s.cap)
        self.s.spin_s, self.s.yield_s, self.s.max_pause_s = SPIN_S, YIELD_S, MAX_PAUSE_S
        self.s.limit = NEVER_S

    def __dealloc__(self):
        shm_unmap(&self.s)
        free(self.words)

    def init_own(self):
        """Zero this rank's regions (before any rank uses the segment)."""
        shm_init_own(&self.s)

    def unlink(self):
        """Remove the segment's name (its memory lives on while mapped)."""
        rc = shm_unlink_name(self.name.encode())
        if rc:
            raise OSError(rc, f"unlinking shared segment {self.name}")

    def close(self):
        """Unmap the segment; later calls must not use it."""
        shm_unmap(&self.s)

    def watch(self, double limit):
        """Give up a wait after ``limit`` seconds without a rank arriving (0: never)."""
        self.s.limit = limit if limit > 0 else NEVER_S

    @property
    def cap(self):
        """Data bytes a phase may put in a region."""
        return self.s.cap

    @property
    def region(self):
        return self.s.region

    @property
    def nbytes(self):
        """Bytes of the whole mapping."""
        return self.s.bytes

    @property
    def phase(self):
        """Phases this rank has published."""
        return self.s.phase

    @property
    def mapped(self):
        return self.s.base != NULL
