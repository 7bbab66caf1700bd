# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin wrapper over csrc/reduce.c: the native chunk reduction."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE

cdef extern from "reduce.h" nogil:
    int ck_reduce(void *dst, const void *src, size_t n, int dtype, int op)
    size_t ck_itemsize(int dtype)


def reduce_into(dst, src, int dtype, int op):
    """dst[:] = op(dst, src) elementwise; ``dtype`` and ``op`` are kernel codes (collectives.ops)."""
    cdef Py_buffer d, s
    cdef size_t n, size = ck_itemsize(dtype)
    cdef int rc
    PyObject_GetBuffer(dst, &d, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            if d.len != s.len:
                raise ValueError(f"reduce_into: dst has {d.len} bytes, src {s.len}")
            if size == 0 or d.len % size:
                raise TypeError(f"reduce_into: {d.len} bytes is not a whole number of dtype code {dtype}")
            n = <size_t>d.len // size
            with nogil:
                rc = ck_reduce(d.buf, s.buf, n, dtype, op)
            if rc:
                raise TypeError(f"reduce_into: op code {op} not defined on dtype code {dtype}")
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
