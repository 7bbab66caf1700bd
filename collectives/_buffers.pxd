# mpi4py buffer specifications resolved to (address, count, element type), for the descriptions
# of collectives._call.
from cpython.buffer cimport Py_buffer


cdef struct Arg:
    char *ptr
    Py_ssize_t count   # elements
    Py_ssize_t size    # bytes per element
    int code           # kernel dtype code (collectives.ops.DTYPES); -1 when no kernel reduces it
    int num            # NumPy type number of the element
    bint swapped       # not in native byte order
    void *descr        # the array's dtype (borrowed, for messages), NULL: the type of ``num``


cdef class Views:
    """The buffers one call holds: Py_buffer views and temporary copies, released together."""
    cdef Py_buffer views[4]
    cdef int n
    cdef list keep
    cdef object base   # the object whose memory the latest resolved buffer lies in
    cdef void release(self) noexcept


cdef object IN_PLACE

cdef inline bint in_place_spec(object spec) noexcept:
    """Whether a send buffer argument asks for in place (None or MPI.IN_PLACE)."""
    return spec is None or spec is IN_PLACE


cdef inline bint shares(const Arg *a, const Arg *b) noexcept:
    """Whether the two buffers share any byte."""
    return a.ptr < b.ptr + b.count * b.size and b.ptr < a.ptr + a.count * a.size


cdef int resolve(object spec, object name, bint writable, Py_ssize_t blocks, Arg *out,
                 Views held) except -1
cdef int resolve_vector(object spec, object name, bint writable, Py_ssize_t p, Py_ssize_t *counts,
                        Py_ssize_t *displs, Arg *out, Views held) except -1
cdef int integers(object seq, Py_ssize_t p, Py_ssize_t *out, object name, object what) except -1
cdef int op_code(object op, const Arg *a) except -1
cdef object dtype_of(const Arg *a)
cdef int npy_num(int code) noexcept
