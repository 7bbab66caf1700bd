"""Build the native parts of collectives: C kernels in csrc/ behind thin Cython wrappers.

MPI: by default the headers and libmpi of the ``mpich`` wheel installed in this Python
environment.  For a cluster's own MPI set MPICC to its compiler wrapper (``MPICC=mpicc
pip install .``): its flags are read from ``mpicc -show`` (MPICH) or ``--showme`` (Open MPI).
"""
import glob
import os
import shlex
import subprocess
import sys

import mpi4py
import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

CFLAGS = ["-O3", "-fwrapv", "-std=gnu11"]


def mpi_flags():
    """Include dirs, library dirs and libraries for MPI, as Extension keyword arguments."""
    mpicc = os.environ.get("MPICC")
    if not mpicc:
        prefix = sys.prefix
        lib = os.path.join(prefix, "lib")
        if not os.path.exists(os.path.join(prefix, "include", "mpi.h")):
            sys.exit("setup.py: no mpi.h under %s/include; install the 'mpich' wheel "
                     "or set MPICC to your MPI's compiler wrapper" % prefix)
        return dict(include_dirs=[os.path.join(prefix, "include")], library_dirs=[lib],
                    libraries=["mpi"], runtime_library_dirs=[lib])
    for flag in ("-show", "--showme"):
        try:
            out = subprocess.run([mpicc, flag], capture_output=True, text=True, check=True).stdout
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    else:
        sys.exit(f"setup.py: cannot read flags from MPICC={mpicc} (-show / --showme)")
    words = shlex.split(out)[1:]
    flags = dict(include_dirs=[], library_dirs=[], libraries=[], runtime_library_dirs=[])
    for w in words:
        for prefix, key in (("-I", "include_dirs"), ("-L", "library_dirs"), ("-l", "libraries")):
            if w.startswith(prefix):
                flags[key].append(w[2:])
    flags["runtime_library_dirs"] = list(flags["library_dirs"])
    return flags


def extension(name, sources, mpi=False):
    kw = mpi_flags() if mpi else dict(include_dirs=[], library_dirs=[], libraries=[])
    kw["include_dirs"] = ["csrc", mpi4py.get_include(), numpy.get_include()] + kw["include_dirs"]
    depends = sorted(glob.glob("csrc/*.h"))
    return Extension(name, sources, extra_compile_args=CFLAGS, depends=depends, **kw)


EXTENSIONS = [
    extension("collectives._kernels", ["collectives/_kernels.pyx", "csrc/reduce.c"]),
    extension("collectives._compress", ["collectives/_compress.pyx", "csrc/quantize.c",
                                        "csrc/sparsify.c"]),
    extension("collectives._requests", ["collectives/_requests.pyx"], mpi=True),
    extension("collectives._exchange", ["collectives/_exchange.pyx", "csrc/reduce.c"], mpi=True),
    extension("collectives._executor", ["collectives/_executor.pyx", "csrc/reduce.c"], mpi=True),
    extension("collectives._buffers", ["collectives/_buffers.pyx", "csrc/reduce.c"], mpi=True),
    extension("collectives._dispatch", ["collectives/_dispatch.pyx", "csrc/reduce.c"], mpi=True),
]

setup(
    name="collectives",
    version="0.1.0",
    description="MPI collective algorithms on mpi4py point-to-point, with native kernels",
    # bench/ installs beside the package: collectives-bench is bench.cli:main.
    packages=find_packages(include=["collectives", "collectives.*", "bench"]),
    package_data={"collectives": ["data/*"]},
    ext_modules=cythonize(EXTENSIONS, compiler_directives={"language_level": 3}, quiet=True),
    install_requires=["mpi4py>=4.0", "numpy>=1.24", "scipy>=1.10"],
    entry_points={"console_scripts": ["collectives-bench = bench.cli:main"]},
    python_requires=">=3.9",
)
