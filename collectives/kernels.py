"""The native kernels, or their NumPy fallback when COLLECTIVES_PUREPYTHON=1 or the build is missing."""
import os
import warnings

PUREPYTHON = os.environ.get("COLLECTIVES_PUREPYTHON", "0") not in ("", "0")

if PUREPYTHON:
    from ._kernels_numpy import reduce_into
else:
    try:
        from ._kernels import reduce_into
    except ImportError as exc:
        warnings.warn(f"collectives: native kernels not built ({exc}); using the NumPy fallback. "
                      "Run 'make build' to build them.", RuntimeWarning, stacklevel=2)
        PUREPYTHON = True
        from ._kernels_numpy import reduce_into

__all__ = ["reduce_into", "PUREPYTHON"]
