"""mpi4py buffer specifications turned into flat NumPy views.

Accepted, as mpi4py accepts them: any object with the buffer interface (NumPy arrays,
``array.array``, ``bytearray``), ``[buf, datatype]``, ``[buf, count, datatype]``,
``[buf, (count, displ), datatype]``, and for the v-variants ``[buf, (counts, displs), datatype]``
or ``[buf, counts]``; ``MPI.IN_PLACE`` or ``None`` where mpi4py allows in-place.  A datatype
is an ``MPI.Datatype`` or a type character (``"d"``, ``"i"``, ...).  Arrays of Python objects
are refused: their bytes are addresses, meaningless in another process.

What mpi4py accepts but our algorithms do not cover raises ``Native`` with the reason, and
the caller hands the call to MPI: objects that expose DLPack or ``__cuda_array_interface__``
instead of the buffer interface, and derived datatypes (vector, indexed, struct, ...).  The
decision depends only on the kinds of the arguments, never on their sizes or contents, so
ranks that pass the same kinds of buffers decide alike.
"""
import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib


class Native(Exception):
    """Raised when MPI itself must run the call; the message says why."""


def is_in_place(spec):
    """True for MPI.IN_PLACE and None."""
    return spec is None or spec is MPI.IN_PLACE


def type_name(datatype):
    """The name of an MPI datatype (``MPI_FLOAT``), or of a type character, for messages."""
    if isinstance(datatype, MPI.Datatype):
        return datatype.Get_name() or f"derived datatype (combiner {datatype.combiner})"
    return repr(datatype)


def _dtype_of(datatype, name):
    if isinstance(datatype, MPI.Datatype) and (datatype == MPI.DATATYPE_NULL or not datatype.is_named):
        raise Native(f"{name}: {type_name(datatype)} is not a predefined datatype")
    try:
        if isinstance(datatype, str):
            return np.dtype(datatype)
        return dtlib.to_numpy_dtype(datatype)
    except (ValueError, TypeError, KeyError):
        if isinstance(datatype, MPI.Datatype):
            raise Native(f"{name}: {type_name(datatype)} has no NumPy equivalent") from None
        raise TypeError(f"{name}: datatype {datatype!r} has no NumPy equivalent") from None


def _flat(obj, name, writable):
    if isinstance(obj, np.ndarray):
        arr = np.asarray(obj)  # a subclass (np.matrix) would not flatten to 1-D
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except TypeError:
            if hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__"):
                raise Native(f"{name}: {type(obj).__name__} exposes DLPack or "
                             "__cuda_array_interface__, not the buffer interface") from None
            raise TypeError(f"{name}: {type(obj).__name__} does not expose the buffer interface") from None
    if arr.dtype.hasobject:
        raise TypeError(f"{name}: dtype {arr.dtype} holds Python objects, which cannot be sent as "
                        "a buffer; the lower-case methods (comm.bcast, comm.allreduce) take objects")
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        if writable:
            raise ValueError(f"{name}: non-contiguous buffer of shape {arr.shape} cannot be "
                             "written in place; pass a contiguous array")
        arr = np.ascontiguousarray(arr)
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name}: buffer is read-only")
    return arr.reshape(-1, order="A")


def parse(spec, name, writable=False, vector=False, blocks=1):
    """Resolve ``spec`` to (array, counts, displs).

    ``array`` is a flat view of the whole buffer in its element type.  For plain specs
    ``counts`` is the element count and ``displs`` the offset; with ``vector=True`` they are
    the per-rank tuples of a v-variant, or None when the spec gives none.  A plain spec's
    count is per block when the buffer holds ``blocks`` of them (mpi4py's rule for a Gather
    or Scatter buffer at the root); the count returned is the total.
    """
    counts = displs = None
    datatype = None
    if isinstance(spec, (list, tuple)):
        if not 1 <= len(spec) <= 4:
            raise ValueError(f"{name}: buffer spec must be [buf], [buf, datatype], "
                             "[buf, count, datatype] or [buf, counts, displs, datatype]")
        obj, *rest = spec
        if isinstance(obj, (int, float, complex)):
            raise TypeError(f"{name}: a {type(spec).__name__} of numbers is not a buffer; pass a "
                            "NumPy array (the lower-case methods take Python objects)")
        if rest and isinstance(rest[-1], (MPI.Datatype, str)):
            datatype = rest.pop()
        if len(rest) == 2:
            counts, displs = rest
        elif rest:
            counts = rest[0]
            if isinstance(counts, tuple) and len(counts) == 2 and not vector:
                counts, displs = counts
            elif isinstance(counts, tuple) and len(counts) == 2 and not np.isscalar(counts[0]):
                counts, displs = counts
    else:
        obj = spec
    arr = _flat(obj, name, writable)
    if datatype is not None:
        dtype = _dtype_of(datatype, name)
        if arr.dtype != dtype:
            whole, extra = divmod(arr.nbytes, dtype.itemsize)
            if extra and counts is None:
                raise ValueError(f"{name}: {arr.nbytes} bytes is not a whole number of "
                                 f"{type_name(datatype)} ({dtype.itemsize} bytes); give a count")
            # With a count, as in mpi4py, the buffer only needs to hold that many elements.
            arr = arr.view(np.uint8)[:whole * dtype.itemsize].view(dtype) if whole else np.empty(0, dtype)
    if vector:
        if counts is not None:
            counts = tuple(int(c) for c in np.atleast_1d(counts))
            displs = (tuple(int(d) for d in np.atleast_1d(displs)) if displs is not None
                      else tuple(int(d) for d in np.concatenate(([0], np.cumsum(counts)[:-1]))))
            if any(c < 0 for c in counts) or any(d < 0 for d in displs):
                raise ValueError(f"{name}: negative count or displacement")
            if len(displs) != len(counts):
                raise ValueError(f"{name}: {len(counts)} counts but {len(displs)} displacements")
            end = max((d + c for d, c in zip(displs, counts)), default=0)
            if end > arr.size:
                raise ValueError(f"{name}: counts and displacements reach element {end} "
                                 f"of a {arr.size}-element buffer")
        return arr, counts, displs
    count = arr.size if counts is None else int(counts) * blocks
    displ = 0 if displs is None else int(displs)
    if count < 0 or displ < 0 or displ + count > arr.size:
        raise ValueError(f"{name}: count {count} at displacement {displ} exceeds the "
                         f"{arr.size}-element buffer")
    return arr[displ:displ + count], count, displ
