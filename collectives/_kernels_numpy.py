"""NumPy fallback for collectives._kernels, with identical signatures (COLLECTIVES_PUREPYTHON=1)."""
import numpy as np

from .ops import DTYPES, OP_NAMES, supports

_UFUNC = {
    "sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
    "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
}


def _view(buf, dtype):
    return np.frombuffer(memoryview(buf).cast("B"), dtype=dtype)


def reduce_into(dst, src, dtype, op):
    """dst[:] = op(dst, src) elementwise; ``dtype`` and ``op`` are kernel codes (collectives.ops)."""
    t, name = np.dtype(DTYPES[dtype]), OP_NAMES[op]
    if not supports(name, t):
        raise TypeError(f"reduce_into: op code {op} not defined on dtype code {dtype}")
    d, s = _view(dst, t), _view(src, t)
    if not d.flags.writeable:
        raise ValueError("reduce_into: dst is read-only")
    if d.nbytes != s.nbytes:
        raise ValueError(f"reduce_into: dst has {d.nbytes} bytes, src {s.nbytes}")
    _UFUNC[name](d, s, out=d)
