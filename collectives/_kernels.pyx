# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin wrapper over csrc/reduce.c: the native chunk reductions."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE

from collectives._csrc cimport ck_reduce, ck_reduce_blocks, ck_reduce_scaled, ck_sum_f16_f32, ck_itemsize
from collectives._payload import check_blocks


cdef class _Pair:
    """dst and src buffers held for one call, with their element counts under one dtype
    (which must be equal unless ``same`` is false)."""
    cdef Py_buffer d, s
    cdef bint held_d, held_s
    cdef size_t nd, ns

    def __cinit__(self, dst, src, size_t size, str name, bint same=True):
        PyObject_GetBuffer(dst, &self.d, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE)
        self.held_d = True
        PyObject_GetBuffer(src, &self.s, PyBUF_ANY_CONTIGUOUS)
        self.held_s = True
        if size == 0 or self.d.len % size or self.s.len % size:
            raise TypeError(f"{name}: buffer sizes {self.d.len}, {self.s.len} are not whole "
                            f"elements of {size} bytes")
        self.nd = <size_t>self.d.len // size
        self.ns = <size_t>self.s.len // size
        if same and self.nd != self.ns:
            raise ValueError(f"{name}: dst has {self.d.len} bytes, src {self.s.len}")

    def __dealloc__(self):
        if self.held_s:
            PyBuffer_Release(&self.s)
        if self.held_d:
            PyBuffer_Release(&self.d)


def reduce_into(dst, src, int dtype, int op):
    """dst[:] = op(dst, src) elementwise; ``dtype`` and ``op`` are kernel codes (collectives.ops)."""
    cdef _Pair p = _Pair(dst, src, ck_itemsize(dtype), "reduce_into")
    cdef int rc
    with nogil:
        rc = ck_reduce(p.d.buf, p.s.buf, p.nd, dtype, op)
    if rc:
        raise TypeError(f"reduce_into: op code {op} not defined on dtype code {dtype}")


def reduce_blocks(dst, src, int dtype, int op, Py_ssize_t nblocks, Py_ssize_t blocklen,
                  Py_ssize_t dst_stride, Py_ssize_t src_stride):
    """dst[b*dst_stride:][:blocklen] = op(that, src[b*src_stride:][:blocklen]) for each block b."""
    cdef _Pair p = _Pair(dst, src, ck_itemsize(dtype), "reduce_blocks", False)
    cdef int rc
    check_blocks("dst", p.nd, nblocks, blocklen, dst_stride)
    check_blocks("src", p.ns, nblocks, blocklen, src_stride)
    with nogil:
        rc = ck_reduce_blocks(p.d.buf, p.s.buf, nblocks, blocklen, dst_stride, src_stride, dtype, op)
    if rc:
        raise TypeError(f"reduce_blocks: op code {op} not defined on dtype code {dtype}")


def reduce_scaled(dst, src, int dtype, double scale):
    """dst[:] = (dst + src) * scale for a float16/32/64 dtype code (float16 computed in float)."""
    cdef _Pair p = _Pair(dst, src, ck_itemsize(dtype), "reduce_scaled")
    cdef int rc
    with nogil:
        rc = ck_reduce_scaled(p.d.buf, p.s.buf, p.nd, dtype, scale)
    if rc:
        raise TypeError(f"reduce_scaled: dtype code {dtype} is not a floating type")


def sum_f16_f32(float[::1] acc, src):
    """acc += src, float16 values summed into a float32 accumulator without rounding to half."""
    cdef _Pair p = _Pair(acc, src, 2, "sum_f16_f32", False)
    if p.ns != <size_t>len(acc):
        raise ValueError(f"sum_f16_f32: acc has {len(acc)} elements, src {p.ns}")
    if p.ns:
        with nogil:
            ck_sum_f16_f32(&acc[0], p.s.buf, p.ns)
