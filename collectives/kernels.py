"""The native kernels, or their NumPy fallback when COLLECTIVES_PUREPYTHON=1 or the build is missing.

Both sides have the same signatures: reductions from collectives._kernels /
collectives._kernels_numpy, compression kernels from collectives._compress /
collectives._compress_numpy.  ``native`` and ``numpy`` name the two compression modules
(``native`` is None when unbuilt), so tests and benchmarks can compare them.
"""
import warnings

from . import _compress_numpy, _kernels_numpy, config

PUREPYTHON = config.get("COLLECTIVES_PUREPYTHON")

REDUCE = ("reduce_into", "reduce_blocks", "reduce_scaled", "sum_f16_f32")
COMPRESS = (
    "fp16_compress", "fp16_decompress", "fp16_decompress_add",
    "int8_compress", "int8_decompress", "int8_decompress_add",
    "qsgd_compress", "qsgd_decompress", "qsgd_decompress_add",
    "sign_compress", "sign_decompress", "sign_decompress_add",
    "topk", "approx_topk", "threshold_count", "threshold",
    "randk_indices", "randk", "randk_scatter_add", "scatter_add",
)

try:
    from . import _compress as native, _kernels as native_reduce
except ImportError as exc:
    native = native_reduce = None
    if not PUREPYTHON:
        warnings.warn(f"collectives: native kernels not built ({exc}); using the NumPy fallback. "
                      "Run 'make build' to build them.", RuntimeWarning, stacklevel=2)
numpy = _compress_numpy
if native is None:
    PUREPYTHON = True

_reduce_mod = _kernels_numpy if PUREPYTHON else native_reduce
_compress_mod = _compress_numpy if PUREPYTHON else native
globals().update({name: getattr(_reduce_mod, name) for name in REDUCE})
globals().update({name: getattr(_compress_mod, name) for name in COMPRESS})

__all__ = ["PUREPYTHON", "native", "numpy", *REDUCE, *COMPRESS]
