# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""mpi4py buffer specifications resolved to (address, count, element type), once for every path.

Accepted, as mpi4py accepts them: any object with the buffer interface (NumPy arrays of any
contiguous layout, ``array.array``, ``bytearray``, ``memoryview``), ``[buf]``,
``[buf, datatype]``, ``[buf, count, datatype]``, ``[buf, (count, displ), datatype]``, and for
the v-variants ``[buf, (counts, displs), datatype]``, ``[buf, counts, displs, datatype]``,
``[buf, counts]`` and ``[buf, (counts, displs)]``, with counts and displacements as lists,
tuples or NumPy arrays of any integer dtype.  A datatype is a predefined ``MPI.Datatype`` or
a type character (``"d"``, ``"i"``, ...); ``MPI.IN_PLACE`` or ``None`` where mpi4py allows
in place.  A read-only send buffer that is not contiguous is copied; any other argument
that is not usable raises ValueError or TypeError naming it and the problem.  Arrays of
Python objects are refused: their bytes are addresses, meaningless in another process.

What mpi4py accepts but no algorithm here covers raises ``Native`` with the reason, and the
engine hands the call to MPI: objects exposing DLPack or ``__cuda_array_interface__``
instead of the buffer interface, derived datatypes (vector, indexed, struct, ...), ops that
are not predefined (MAXLOC, MINLOC, user-defined) and element types no kernel reduces (long
double).  The decision rests on the kinds of the arguments only, never on their sizes or
contents, so ranks that pass the same kinds of buffers decide alike.

The common forms (a contiguous NumPy array, a spec with a predefined datatype and integer
counts) resolve without a Python call; the others take the same steps through NumPy.
"""
from libc.stdlib cimport malloc, free
from cpython.ref cimport PyObject
from cpython.sequence cimport PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_FORMAT,
                             PyBUF_WRITABLE)
cimport numpy as cnp
import sys

import numpy as np
from mpi4py cimport MPI
from mpi4py import MPI as pyMPI
from mpi4py.libmpi cimport MPI_Datatype

from collectives.ops import DTYPE_CODE, OP_NAMES, Native, check_op, supports

cnp.import_array()

DEF MAX_DATATYPES = 128
DEF MAX_NPY = 64
DEF NOPS = 10
DEF NCODES = 14

IN_PLACE = pyMPI.IN_PLACE

cdef int _npy_code[MAX_NPY]          # NumPy type number -> kernel dtype code, -1: none
cdef int _npy_num[NCODES]            # kernel dtype code -> canonical NumPy type number
cdef MPI_Datatype _dt_handle[MAX_DATATYPES]  # predefined datatypes with a NumPy equivalent
cdef int _dt_num[MAX_DATATYPES]
cdef int _dt_size[MAX_DATATYPES]
cdef int _ndt = 0
cdef int _dt_last = 0                # the latest datatype found in the table
cdef bint _supports[NOPS][NCODES]    # op code x dtype code: MPI defines the reduction
cdef object _OPS = (pyMPI.SUM, pyMPI.PROD, pyMPI.MIN, pyMPI.MAX, pyMPI.LAND, pyMPI.LOR,
                    pyMPI.LXOR, pyMPI.BAND, pyMPI.BOR, pyMPI.BXOR)  # in OP_NAMES order
cdef void *_OP_OBJECTS[NOPS]  # the same, for comparing identities without Python calls
# The ops' names, interned as a literal in a program is: a name passed as one is found by
# identity too.
cdef object _OP_NAME_OBJECTS = tuple(sys.intern(name) for name in OP_NAMES)
cdef void *_OP_NAMES[NOPS]
for _i in range(NOPS):
    _OP_OBJECTS[_i] = <void *>_OPS[_i]
    _OP_NAMES[_i] = <void *>_OP_NAME_OBJECTS[_i]


def _tables():
    """Fill the type tables from collectives.ops and mpi4py's predefined datatypes."""
    global _ndt
    from mpi4py.util import dtlib
    cdef int i, j
    for i in range(MAX_NPY):
        _npy_code[i] = -1
    for dt, code in DTYPE_CODE.items():
        _npy_num[code] = dt.num
        for i, op in enumerate(OP_NAMES):
            _supports[i][code] = supports(op, dt)
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
        except Exception:  # no NumPy equivalent: MPI runs calls that name it
            continue
        if dt.num < MAX_NPY and dt.isnative and not dt.fields:
            _dt_handle[_ndt] = (<MPI.Datatype>obj).ob_mpi
            _dt_num[_ndt] = dt.num
            _dt_size[_ndt] = dt.itemsize
            _ndt += 1


_tables()


cdef class Views:
    """The buffers one call holds: Py_buffer views and temporary copies, released together."""

    def __cinit__(self):
        self.n = 0
        self.keep = []

    cdef void release(self) noexcept:
        cdef int i
        for i in range(self.n):
            PyBuffer_Release(&self.views[i])
        self.n = 0
        if self.keep:
            self.keep.clear()

    def __dealloc__(self):
        self.release()


cdef int npy_num(int code) noexcept:
    """The NumPy type number of kernel dtype code ``code``."""
    return _npy_num[code]


cdef object dtype_of(const Arg *a):
    """The NumPy dtype of ``a``'s elements (for messages)."""
    if a.descr != NULL:
        return <object>a.descr
    dt = cnp.PyArray_DescrFromType(a.num)
    return dt.newbyteorder() if a.swapped else dt


cdef inline void set_type(Arg *out, int num, Py_ssize_t size, bint swapped) noexcept:
    out.num, out.size, out.swapped = num, size, swapped
    out.descr = NULL
    out.code = _npy_code[num] if not swapped and num < MAX_NPY else -1


def type_name(datatype):
    """The name of an MPI datatype (``MPI_FLOAT``), or of a type character, for messages."""
    if isinstance(datatype, pyMPI.Datatype):
        return datatype.Get_name() or f"derived datatype (combiner {datatype.combiner})"
    return repr(datatype)


cdef int memory(object obj, object name, bint writable, Arg *out, Py_ssize_t *nbytes,
                Views held) except -1:
    """``obj``'s memory: address, length in bytes and element type, in memory order."""
    cdef cnp.ndarray a
    cdef Py_buffer *view
    cdef int code
    if cnp.PyArray_Check(obj):
        a = <cnp.ndarray>obj
        if not (cnp.PyArray_IS_C_CONTIGUOUS(a) or cnp.PyArray_IS_F_CONTIGUOUS(a)):
            if writable:
                raise ValueError(f"{name}: non-contiguous buffer of shape {obj.shape} cannot be "
                                 "written in place; pass a contiguous array")
            a = np.ascontiguousarray(a)
            held.keep.append(a)
        if writable and not cnp.PyArray_ISWRITEABLE(a):
            raise ValueError(f"{name}: buffer is read-only")
        if cnp.PyArray_TYPE(a) == cnp.NPY_OBJECT or (cnp.PyArray_TYPE(a) == cnp.NPY_VOID and a.dtype.hasobject):
            raise TypeError(f"{name}: dtype {obj.dtype} holds Python objects, which cannot be sent as "
                            "a buffer; the lower-case methods (comm.bcast, comm.allreduce) take objects")
        out.ptr = <char *>cnp.PyArray_DATA(a)
        held.base = a
        nbytes[0] = cnp.PyArray_NBYTES(a)
        set_type(out, cnp.PyArray_TYPE(a), cnp.PyArray_ITEMSIZE(a), not cnp.PyArray_ISNOTSWAPPED(a))
        out.descr = <void *>cnp.PyArray_DESCR(a)
        return 0
    if held.n < 4:
        view = &held.views[held.n]
        try:
            PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT
                               | (PyBUF_WRITABLE if writable else 0))
        except (BufferError, TypeError, ValueError):
            pass
        else:
            held.n += 1
            code = format_code(view.format, view.itemsize)
            if code >= 0:
                out.ptr = <char *>view.buf
                held.base = obj
                nbytes[0] = view.len
                set_type(out, _npy_num[code], view.itemsize, False)
                return 0
    # Anything else, the way NumPy sees it: its messages name what is wrong.
    try:
        arr = np.asarray(memoryview(obj))
    except TypeError:
        if hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__"):
            raise Native(f"{name}: {type(obj).__name__} exposes DLPack or "
                         "__cuda_array_interface__, not the buffer interface") from None
        raise TypeError(f"{name}: {type(obj).__name__} does not expose the buffer interface") from None
    held.keep.append(arr)
    return memory(arr, name, writable, out, nbytes, held)


cdef int format_code(const char *fmt, Py_ssize_t itemsize) noexcept:
    """Kernel dtype code of a struct-module format of one native item, -1 if none."""
    cdef char c
    cdef int want = -1
    if fmt == NULL:
        return 5 if itemsize == 1 else -1  # unsigned bytes
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<':
        fmt += 1  # x86 and ARM Linux are little-endian; big-endian formats go through NumPy
    c = fmt[0]
    if c == 0 or (fmt[1] != 0 and c != b'Z'):
        return -1
    if c == b'?':
        want = 0 if itemsize == 1 else -1
    elif c in b'bhilq':
        want = by_size(itemsize, 1)
    elif c in b'BHILQ':
        want = by_size(itemsize, 5)
    elif c in b'efd':
        want = by_size(itemsize, 8) if itemsize > 1 else -1
    elif c == b'Z' and fmt[2] == 0 and fmt[1] in b'fd':
        want = 12 if itemsize == 8 else 13 if itemsize == 16 else -1
    return want


cdef inline int by_size(Py_ssize_t itemsize, int first) noexcept:
    """The code of a 1-, 2-, 4- or 8-byte type of a family whose 1-byte member is ``first``."""
    return (first if itemsize == 1 else first + 1 if itemsize == 2 else first + 2 if itemsize == 4
            else first + 3 if itemsize == 8 else -1)


cdef dict _CHARACTERS = {}  # type character -> (NumPy type number, size), as NumPy reads it
cdef object _char_last = object()  # the latest type character looked up (held, so identity is sound)
cdef int _char_num
cdef Py_ssize_t _char_size


cdef int datatype(object dt, object name, int *num, Py_ssize_t *size) except -1:
    """The NumPy type number and size of datatype ``dt`` (an MPI.Datatype or type character)."""
    cdef int i
    cdef MPI_Datatype h
    global _dt_last, _char_last, _char_num, _char_size
    if type(dt) is MPI.Datatype:
        h = (<MPI.Datatype>dt).ob_mpi
        if _ndt and _dt_handle[_dt_last] == h:  # a program names the same datatype call after call
            num[0], size[0] = _dt_num[_dt_last], _dt_size[_dt_last]
            return 0
        for i in range(_ndt):
            if _dt_handle[i] == h:
                _dt_last = i
                num[0], size[0] = _dt_num[i], _dt_size[i]
                return 0
    if isinstance(dt, MPI.Datatype):
        if dt == pyMPI.DATATYPE_NULL or not dt.is_named:
            raise Native(f"{name}: {type_name(dt)} is not a predefined datatype")
        raise Native(f"{name}: {type_name(dt)} has no NumPy equivalent")
    if dt is _char_last:
        num[0], size[0] = _char_num, _char_size
        return 0
    known = _CHARACTERS.get(dt)
    if known is None:
        try:
            d = np.dtype(dt)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: datatype {dt!r} has no NumPy equivalent") from None
        known = _CHARACTERS[dt] = (d.num, d.itemsize)
    num[0], size[0] = known
    if type(dt) is str:
        _char_last, _char_num, _char_size = dt, num[0], size[0]
    return 0


cdef inline bint is_datatype(object obj) noexcept:
    return type(obj) is MPI.Datatype or type(obj) is str or isinstance(obj, MPI.Datatype)


cdef int retype(object dt, object name, bint counted, Arg *out, Py_ssize_t *nbytes) except -1:
    """View ``out``'s memory as elements of datatype ``dt``: whole elements only (with a count
    the buffer needs to hold only that many, as in mpi4py)."""
    cdef int num
    cdef Py_ssize_t size
    datatype(dt, name, &num, &size)
    if num == out.num and size == out.size and not out.swapped:
        return 0
    if nbytes[0] % size and not counted:
        raise ValueError(f"{name}: {nbytes[0]} bytes is not a whole number of {type_name(dt)} "
                         f"({size} bytes); give a count")
    nbytes[0] -= nbytes[0] % size
    set_type(out, num, size, False)
    return 0


cdef inline bint is_integer(object obj) noexcept:
    return type(obj) is int or isinstance(obj, (int, np.integer))


cdef inline bint is_number(object obj) noexcept:
    return type(obj) is int or type(obj) is float or type(obj) is complex or isinstance(obj, (int, float, complex))


cdef object spec_parts(object spec, object name, bint vector):
    """(buffer, counts, displs, datatype) of a list or tuple spec, as mpi4py reads them."""
    cdef Py_ssize_t n = len(spec)
    if not 1 <= n <= 4:
        raise ValueError(f"{name}: buffer spec must be [buf], [buf, datatype], "
                         "[buf, count, datatype] or [buf, counts, displs, datatype]")
    obj = spec[0]
    if is_number(obj):
        raise TypeError(f"{name}: a {type(spec).__name__} of numbers is not a buffer; pass a "
                        "NumPy array (the lower-case methods take Python objects)")
    rest = list(spec[1:])
    dt = rest.pop() if rest and is_datatype(rest[len(rest) - 1]) else None
    counts = displs = None
    if len(rest) == 2:
        counts, displs = rest
    elif rest:
        counts = rest[0]
        # A v-variant's tuple is (counts, displs) whatever they hold, as in mpi4py.
        if type(counts) is tuple and len(counts) == 2 and (vector or not is_integer(counts[0])):
            counts, displs = counts
    return obj, counts, displs, dt


cdef int resolve(object spec, object name, bint writable, Py_ssize_t blocks, Arg *out,
                 Views held) except -1:
    """A plain buffer spec as ``out`` (address and count of the part it names); the spec's
    count is per block when the buffer holds ``blocks`` of them (mpi4py's rule for a root's
    buffer of Gather or Scatter)."""
    cdef object obj = spec, dt = None, cnt = None, dis = None
    cdef Py_ssize_t n, nbytes, total, count, displ = 0
    cdef PyObject **item
    if type(spec) is list or type(spec) is tuple:
        # The common forms read through borrowed references; the others through spec_parts.
        n = PySequence_Fast_GET_SIZE(spec)
        item = PySequence_Fast_ITEMS(spec)
        if n == 2 and is_datatype(<object>item[1]):
            obj, dt = <object>item[0], <object>item[1]
        elif n == 3 and is_datatype(<object>item[2]) and (type(<object>item[1]) is int or (
                type(<object>item[1]) is tuple and PyTuple_GET_SIZE(<object>item[1]) == 2)):
            obj, cnt, dt = <object>item[0], <object>item[1], <object>item[2]
            if type(cnt) is tuple:
                cnt, dis = <object>PyTuple_GET_ITEM(cnt, 0), <object>PyTuple_GET_ITEM(cnt, 1)
        else:
            obj, cnt, dis, dt = spec_parts(spec, name, False)
    memory(obj, name, writable, out, &nbytes, held)
    if dt is not None:
        retype(dt, name, cnt is not None, out, &nbytes)
    total = nbytes // out.size if out.size else 0
    if cnt is None:
        count = total
    else:
        count = (<Py_ssize_t>cnt if type(cnt) is int else <Py_ssize_t>int(cnt)) * blocks
    if dis is not None:
        displ = <Py_ssize_t>dis if type(dis) is int else <Py_ssize_t>int(dis)
    if count < 0 or displ < 0 or displ + count > total:
        raise ValueError(f"{name}: count {count} at displacement {displ} exceeds the "
                         f"{total}-element buffer")
    out.ptr += displ * out.size
    out.count = count
    return 0


cdef Py_ssize_t element(cnp.ndarray a, Py_ssize_t i) except? -1:
    """Element ``i`` of the 0- or 1-d NumPy integer array ``a``."""
    cdef char *at = <char *>cnp.PyArray_DATA(a) + (i * cnp.PyArray_STRIDES(a)[0] if cnp.PyArray_NDIM(a) else 0)
    cdef int t = cnp.PyArray_TYPE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return int(a.reshape(-1)[i])
    if t == cnp.NPY_INT64:
        return (<cnp.int64_t *>at)[0]
    if t == cnp.NPY_INT32:
        return (<cnp.int32_t *>at)[0]
    if t == cnp.NPY_UINT64:
        return <Py_ssize_t>(<cnp.uint64_t *>at)[0]
    if t == cnp.NPY_UINT32:
        return (<cnp.uint32_t *>at)[0]
    if t == cnp.NPY_INT16:
        return (<cnp.int16_t *>at)[0]
    if t == cnp.NPY_UINT16:
        return (<cnp.uint16_t *>at)[0]
    if t == cnp.NPY_INT8:
        return (<cnp.int8_t *>at)[0]
    if t == cnp.NPY_UINT8:
        return (<cnp.uint8_t *>at)[0]
    return int(a.reshape(-1)[i])


cdef int integers(object seq, Py_ssize_t p, Py_ssize_t *out, object name, object what) except -1:
    """``p`` integers from a list, tuple or NumPy integer array (or one integer for p = 1)
    into ``out``; ValueError naming ``what`` when there are not ``p`` of them."""
    cdef Py_ssize_t i, n
    cdef cnp.ndarray a
    if type(seq) is list or type(seq) is tuple:
        n = len(seq)
        if n == p:
            for i in range(p):
                c = seq[i]
                out[i] = c if type(c) is int else int(c)
            return 0
    elif cnp.PyArray_Check(seq) and cnp.PyArray_ISINTEGER(<cnp.ndarray>seq) and cnp.PyArray_NDIM(<cnp.ndarray>seq) <= 1:
        a = <cnp.ndarray>seq
        n = cnp.PyArray_SIZE(a)
        if n == p:
            for i in range(p):
                out[i] = element(a, i)
            return 0
    else:
        values = np.atleast_1d(seq)
        n = len(values)
        if n == p:
            for i in range(p):
                out[i] = int(values[i])
            return 0
    raise ValueError(f"{name}: {n} {what} for a communicator of size {p}")


cdef Py_ssize_t how_many(object seq) except -1:
    """How many integers a list, tuple or NumPy array of them (or a single one) holds."""
    if type(seq) is list or type(seq) is tuple:
        return len(seq)
    if cnp.PyArray_Check(seq):
        return max(cnp.PyArray_SIZE(<cnp.ndarray>seq), 1) if cnp.PyArray_NDIM(<cnp.ndarray>seq) == 0 else \
            len(seq)
    return len(np.atleast_1d(seq))


cdef int resolve_vector(object spec, object name, bint writable, Py_ssize_t p, Py_ssize_t *counts,
                        Py_ssize_t *displs, Arg *out, Views held) except -1:
    """A v-variant's buffer spec as the whole buffer in ``out`` and ``p`` counts and
    displacements in elements, read as mpi4py reads them: no counts, the buffer split into p
    near-equal blocks (the first ones one longer); one count, every rank's; no displacements,
    the blocks in rank order; one displacement, a stride.  1 when the spec gives counts."""
    cdef object obj, cnt, dis, dt
    cdef Py_ssize_t i, nbytes, total, at = 0, end = 0, stride
    if type(spec) is not list and type(spec) is not tuple:
        obj, cnt, dis, dt = spec, None, None, None
    else:
        obj, cnt, dis, dt = spec_parts(spec, name, True)
    memory(obj, name, writable, out, &nbytes, held)
    if dt is not None:
        retype(dt, name, cnt is not None, out, &nbytes)
    total = nbytes // out.size if out.size else 0
    out.count = total
    if cnt is None:
        for i in range(p):
            counts[i] = total // p + (total % p > i)
    elif is_integer(cnt):
        for i in range(p):
            counts[i] = cnt
    else:
        nc = how_many(cnt)
        if dis is not None and not is_integer(dis) and how_many(dis) != nc:
            raise ValueError(f"{name}: {nc} counts but {how_many(dis)} displacements")
        if nc != p:
            raise ValueError(f"{name}: {nc} counts for a communicator of size {p}")
        integers(cnt, p, counts, name, "counts")
    if dis is None:
        for i in range(p):
            displs[i] = at
            at += counts[i]
    elif is_integer(dis):
        stride = dis
        for i in range(p):
            displs[i] = stride * i
    else:
        integers(dis, p, displs, name, "displacements")
    for i in range(p):
        if counts[i] < 0 or displs[i] < 0:
            raise ValueError(f"{name}: negative count or displacement")
        if displs[i] + counts[i] > end:
            end = displs[i] + counts[i]
    if end > total:
        raise ValueError(f"{name}: counts and displacements reach element {end} "
                         f"of a {total}-element buffer")
    return cnt is not None


cdef dict _OP_BY_NAME = {name: i for i, name in enumerate(OP_NAMES)}


cdef int op_code(object op, const Arg *a) except -1:
    """The kernel code of reduction ``op`` (an MPI.Op or a name) on ``a``'s elements;
    ValueError, TypeError or Native (MPI runs the call) as collectives.ops.check_op says."""
    cdef int i = -1, k
    for k in range(NOPS):
        if <void *>op == _OP_OBJECTS[k] or <void *>op == _OP_NAMES[k]:
            i = k
            break
    if i < 0 and type(op) is str:
        i = _OP_BY_NAME.get(op, -1)
        if i < 0:
            i = _OP_BY_NAME.get(op.lower(), -1)
    if i >= 0 and a.code >= 0 and _supports[i][a.code]:
        return i
    return check_op(op, dtype_of(a))[0]


def flat(buf, name="buf", writable=False):
    """``buf`` resolved as a plain spec, as a flat NumPy array of its elements (a view of its
    memory, or of a copy when it was not contiguous): for the Python-level callers."""
    cdef Arg a
    cdef Views held = Views()
    resolve(buf, name, writable, 1, &a, held)
    return _flat_view(&a, held)


cdef object _flat_view(const Arg *a, Views held):
    """The elements ``a`` names, as a NumPy array over the memory ``held`` resolved."""
    base = held.base
    raw = (np.asarray(base).reshape(-1, order="A").view(np.uint8) if isinstance(base, np.ndarray)
           else np.frombuffer(base, np.uint8))
    start = <Py_ssize_t>(a.ptr - <char *>cnp.PyArray_DATA(raw))
    return raw[start:start + a.count * a.size].view(dtype_of(a))


def vector(spec, name="buf", p=None, writable=False):
    """A v-variant's ``spec`` resolved: (flat NumPy array of the whole buffer, counts,
    displacements), the last two tuples of ``p`` (default: as many as the spec gives) or None
    when the spec gives no counts."""
    cdef Arg a
    cdef Views held = Views()
    cdef Py_ssize_t n, i
    cdef Py_ssize_t *buf
    if p is None:
        _, cnt, _, _ = spec_parts(spec, name, True) if type(spec) is list or type(spec) is tuple else (0, None, 0, 0)
        p = 0 if cnt is None else len(np.atleast_1d(cnt))
    n = p
    buf = <Py_ssize_t *>malloc(2 * (n + 1) * sizeof(Py_ssize_t))
    if buf == NULL:
        raise MemoryError()
    try:
        given = resolve_vector(spec, name, writable, n, buf, buf + n, &a, held)
        whole = _flat_view(&a, held)
        if not given:
            return whole, None, None
        return whole, tuple(buf[i] for i in range(n)), tuple(buf[n + i] for i in range(n))
    finally:
        free(buf)


def is_in_place(spec):
    """True for MPI.IN_PLACE and None."""
    return in_place_spec(spec)
