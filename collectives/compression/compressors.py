"""The compressors by name, the table behind ``allreduce(comm, g, "topk")`` and ``--compress topk``."""
from .base import Compressor
from .quantizers import FP16, QSGD, Int8, Sign
from .sparsifiers import DGC, RandK, Threshold, TopK

COMPRESSORS = {c.name: c for c in (Compressor, FP16, Int8, QSGD, Sign, TopK, DGC, Threshold, RandK)}
