"""Imports of collectives.compression and collectives.train run one way: train ->
compression -> the collectives core, never back, with no cycle among their modules.

Imports inside functions count.  The graph is read from the sources (``ast``; the Cython
modules' import lines as text), so nothing is imported to check it.
"""
import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.serial

ROOT = pathlib.Path(__file__).resolve().parent.parent / "collectives"
COMPRESSION, TRAIN = "collectives.compression", "collectives.train"


def module_name(path):
    """The dotted name of the module at ``path``."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def under(name, package):
    """Whether module ``name`` is ``package`` or inside it."""
    return name == package or name.startswith(package + ".")


def core(name):
    """Whether module ``name`` is of the collectives core: the package's own modules (but the
    command line's ``__main__``), not its subpackages, and the algorithms."""
    return ((PATHS[name].parent == ROOT and name != "collectives.__main__")
            or under(name, "collectives.algorithms"))


def graph(paths):
    """Module name -> the collectives modules it imports (anywhere in its source), for the
    modules at ``paths`` (name -> path)."""
    edges = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(stem + ([node.module] if node.module else []))
                for a in node.names:
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base)
        edges[name] = {m for m in found if m in paths and m != name}
    return edges


PATHS = {module_name(p): p for p in ROOT.rglob("*.py")}
EDGES = graph(PATHS)


def test_no_cycle_among_compression_and_train():
    """Depth-first search over the modules of both packages: a module met again on the path is a cycle."""
    own = {m for m in EDGES if under(m, COMPRESSION) or under(m, TRAIN)}
    done, path = set(), []

    def visit(m):
        if m in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for n in sorted(EDGES[m] & own):
            visit(n)
        path.pop()
        done.add(m)

    for m in sorted(own):
        visit(m)


def test_compression_imports_the_core_only():
    """collectives.compression imports itself and the core, nothing above."""
    wrong = {m: sorted(n for n in EDGES[m] if not (core(n) or under(n, COMPRESSION)))
             for m in EDGES if under(m, COMPRESSION)}
    assert not any(wrong.values()), {m: bad for m, bad in wrong.items() if bad}


def test_core_imports_neither():
    """No module of the core, Python or Cython, imports collectives.compression or collectives.train."""
    wrong = {m: sorted(n for n in EDGES[m] if under(n, COMPRESSION) or under(n, TRAIN)) for m in EDGES if core(m)}
    assert not any(wrong.values()), {m: bad for m, bad in wrong.items() if bad}
    for path in ROOT.glob("*.py[xd]"):
        lines = [line for line in path.read_text().splitlines() if re.match(r"\s*(c?import|from)\s", line)]
        assert not [line for line in lines if re.search(r"\b(compression|train)\b", line)], path
