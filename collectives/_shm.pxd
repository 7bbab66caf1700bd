# A node's shared segment (csrc/shm.h): its C side, for the engine that runs collectives in it.
from libc.stdint cimport int64_t, uint64_t

cdef extern from "shm.h" nogil:
    enum:
        SHM_DISAGREED
        SHM_TIMED_OUT
        SHM_BAD_OP

    ctypedef struct shm_seg:
        char *base
        size_t bytes
        int rank, size
        size_t region, cap
        uint64_t phase
        double spin_s, yield_s, max_pause_s, limit, waited
        int late, step
        void (*park)(shm_seg *s) noexcept
        void (*unpark)(shm_seg *s) noexcept
        void *parked
        void (*poke)(shm_seg *s) noexcept nogil
        void *poke_arg

    size_t shm_region_bytes(int size, size_t cap)
    int shm_map(shm_seg *s, const char *name, int create, size_t bytes, int rank, int size, size_t region)
    void shm_init_own(shm_seg *s)
    int shm_unlink_name(const char *name)
    void shm_unmap(shm_seg *s)
    int shm_agree(shm_seg *s, int64_t *vec, int nf, int w)
    int shm_barrier(shm_seg *s, int64_t *vec, int nf, int w, int check)
    int shm_allreduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out,
                      size_t count, int dtype, int op, size_t slice)
    int shm_reduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out,
                   size_t count, int dtype, int op, int root, size_t slice)
    int shm_bcast(shm_seg *s, int64_t *vec, int nf, int w, int check, void *buf, size_t nbytes, int root,
                  size_t chunk)
    int shm_allgather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out,
                      const int64_t *nbytes, const int64_t *displs, size_t chunk)
    int shm_reduce_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out,
                           const int64_t *counts, int dtype, int op, size_t slice)
    int shm_gather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out, size_t block,
                   int root, size_t chunk)
    int shm_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *inp, void *out, size_t block,
                    int root, size_t chunk)
    int shm_arrived(const shm_seg *s, int r)


# The park hooks of a wait called with the GIL held: release it, take it back.
cdef void release_gil(shm_seg *s) noexcept
cdef void take_gil(shm_seg *s) noexcept


cdef class Segment:
    cdef shm_seg s
    cdef readonly object name
    cdef readonly Py_ssize_t chunk   # the bytes per round of the pipelined forms
    cdef int64_t *words              # room for 2 x size words (per-rank byte counts and offsets)
