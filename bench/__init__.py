"""Benchmarks of collectives beside native MPI; ``collectives-bench`` is ``bench.cli:main``."""
