"""Reduction operations and element types: the names users pass and the codes the kernels take.

An ``MPI.Op`` outside the table (MAXLOC, MINLOC, user-defined) and an element type
MPI reduces but no kernel handles (long double) raise ``Native``: MPI runs the call.
"""
import numpy as np
from mpi4py import MPI


# Kernel codes; the order matches enum ck_dtype and enum ck_op in csrc/reduce.h.
DTYPES = (
    np.bool_,
    np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64,
    np.complex64, np.complex128,
)
DTYPE_CODE = {np.dtype(t): code for code, t in enumerate(DTYPES)}

OP_NAMES = ("sum", "prod", "min", "max", "land", "lor", "lxor", "band", "bor", "bxor")
OP_CODE = {name: code for code, name in enumerate(OP_NAMES)}
MPI_OP = {
    "sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
    "land": MPI.LAND, "lor": MPI.LOR, "lxor": MPI.LXOR,
    "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR,
}



class Native(Exception):
    """Raised when MPI itself must run the call (no algorithm here covers its arguments); the
    message says why."""


_INTEGER = frozenset(np.dtype(t) for t in DTYPES[1:9])
_REAL = _INTEGER | {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}


def supports(op, dtype):
    """Whether reduction ``op`` (a name) is defined on ``dtype``, with MPI's rules."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return op in ("min", "max", "land", "lor", "lxor")
    if op in ("sum", "prod"):
        return dtype in DTYPE_CODE
    if op in ("min", "max"):
        return dtype in _REAL
    return dtype in _INTEGER


def op_name(op):
    """Normalise an MPI.Op or a name such as ``"sum"`` to its name; ValueError otherwise."""
    if isinstance(op, str):
        name = op.lower()
        if name in OP_CODE:
            return name
    else:
        for name, mpi_op in MPI_OP.items():
            if op == mpi_op:
                return name
        # REPLACE and NO_OP are for one-sided calls only; MPI refuses them here too.
        if isinstance(op, MPI.Op) and op not in (MPI.OP_NULL, MPI.REPLACE, MPI.NO_OP):
            raise Native(f"op {_op_label(op)} has no kernel")
    raise ValueError(f"unsupported reduction op {op!r}; use one of {', '.join(OP_NAMES)} "
                     "or the matching MPI.Op")


def _op_label(op):
    return ("MPI.MAXLOC" if op == MPI.MAXLOC else "MPI.MINLOC" if op == MPI.MINLOC
            else "user-defined")


def _mpi_reduces(dtype):
    """Whether MPI reduces ``dtype`` though no kernel does: long double, complex long double."""
    return dtype.isnative and dtype.kind in "fc" and dtype not in DTYPE_CODE


def dtype_code(dtype):
    """Kernel code of ``dtype``; TypeError naming the type when no kernel handles it."""
    dtype = np.dtype(dtype)
    try:
        return DTYPE_CODE[dtype.newbyteorder("=")] if dtype.isnative else _nonnative(dtype)
    except KeyError:
        raise TypeError(f"unsupported dtype {dtype}; supported: "
                        + ", ".join(str(np.dtype(t)) for t in DTYPES)) from None


def _nonnative(dtype):
    raise TypeError(f"dtype {dtype} is not in native byte order")


def check_op(op, dtype):
    """Resolve ``op`` and ``dtype`` to kernel codes, rejecting pairs MPI does not define."""
    name = op_name(op)
    dtype = np.dtype(dtype)
    if _mpi_reduces(dtype):
        raise Native(f"dtype {dtype} has no kernel")
    code = dtype_code(dtype)
    if not supports(name, dtype):
        raise TypeError(f"reduction op {name!r} is not defined on dtype {np.dtype(dtype)}")
    return OP_CODE[name], code
