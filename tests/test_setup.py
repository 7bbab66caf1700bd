"""setup.py's list of the extensions built with the MPI's flags (``MPI``), against the Cython
sources: a module whose .pyx or .pxd cimports mpi4py, directly or through a .pxd of the package,
includes mpi.h and needs them.  The mpich wheel's mpi.h sits on Python's include path, so a
module missing from the list still builds there; only a build against a site MPI fails.
"""
import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.serial

ROOT = pathlib.Path(__file__).resolve().parent.parent
CIMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+cimport|cimport[ \t]+([\w.]+))", re.M)


def cimports(path):
    """The modules a Cython source cimports (none when it does not exist)."""
    return {a or b for a, b in CIMPORT.findall(path.read_text())} if path.exists() else set()


def needs_mpi(module, package):
    """Whether Cython module ``module`` (``pkg._x``) reaches mpi4py's declarations: its .pyx
    or .pxd cimports mpi4py, or a module of the package whose .pxd does (a cimport includes
    the .pxd only)."""
    base = package / module.split(".")[-1]
    return any(reaches(name, package, set())
               for name in cimports(base.with_suffix(".pyx")) | cimports(base.with_suffix(".pxd")))


def reaches(name, package, seen):
    """Whether a cimport of ``name`` brings in mpi4py's declarations."""
    if name == "mpi4py" or name.startswith("mpi4py."):
        return True
    if not name.startswith(package.name + ".") or name in seen:
        return False
    seen.add(name)
    return any(reaches(n, package, seen) for n in cimports((package / name.split(".")[-1]).with_suffix(".pxd")))


def listed(setup_py):
    """The names of setup.py's ``MPI`` tuple, read without running it."""
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MPI" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no MPI = (...) list")


def test_every_extension_that_includes_mpi_h_gets_the_mpi_flags():
    package = ROOT / "collectives"
    modules = {f"collectives.{p.stem}" for p in package.glob("_*.pyx")}
    want = {m for m in modules if needs_mpi(m, package)}
    assert "collectives._shm" in want  # through _requests.pxd
    assert listed(ROOT / "setup.py") == want


def test_the_search_follows_a_pxd(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "_a.pyx").write_text("from pkg._b cimport thing\n")
    (package / "_b.pxd").write_text("from pkg._c cimport other\n")
    (package / "_c.pxd").write_text("from mpi4py.libmpi cimport MPI_Comm\n")
    (package / "_d.pyx").write_text("cimport numpy as cnp\nfrom pkg._e cimport x\n")
    (package / "_e.pxd").write_text("# from mpi4py cimport MPI would be a comment\n")
    (package / "_e.pyx").write_text("from mpi4py cimport MPI\n")  # the .pyx alone: not included by a cimport
    assert needs_mpi("pkg._a", package)
    assert not needs_mpi("pkg._d", package)
    assert needs_mpi("pkg._e", package)
