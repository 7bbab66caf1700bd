"""Imports run one way in collectives/: no cycle among its modules, Python and Cython, and
train -> compression -> the collectives core, never back.

Imports inside functions count.  The graph is read from the sources (``ast``; the Cython
modules' import and cimport lines as text), so nothing is imported to check it.
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
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
        edges[name] = {m for m in found if m in MODULES and m != name}
    return edges


PATHS = {module_name(p): p for p in ROOT.rglob("*.py")}
MODULES = set(PATHS) | {module_name(p) for p in ROOT.glob("*.p[xy][xd]")}  # the Cython ones too
EDGES = graph(PATHS)
CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+\(?([\w\s,]+)|c?import\s+([\w.]+))", re.M)


def cython_edges():
    """Module name -> the collectives modules it imports or cimports, for the .pyx and .pxd files
    (a module's .pyx and .pxd together)."""
    names = MODULES
    edges = {}
    for path in ROOT.glob("*.p[xy][xd]"):
        name = module_name(path)
        found = edges.setdefault(name, set())
        for base, what, plain in CYTHON_IMPORT.findall(path.read_text()):
            if plain:
                found.add(plain)
                continue
            for item in what.replace("\n", " ").split(","):
                item = item.strip().split(" as ")[0].strip()
                found.add(f"{base}.{item}" if f"{base}.{item}" in names else base)
        found &= names
        found.discard(name)
    return edges


def cycle(edges):
    """An import cycle of ``edges`` as a list of modules, or None."""
    done, path = set(), []

    def visit(m):
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        path.append(m)
        for n in sorted(edges.get(m, ())):
            found = visit(n)
            if found:
                return found
        path.pop()
        done.add(m)
        return None

    for m in sorted(edges):
        found = visit(m)
        if found:
            return found
    return None


def test_no_cycle_in_collectives():
    """Depth-first search over every module of collectives/, the Cython ones included."""
    edges = {m: set(n) for m, n in EDGES.items()}
    for m, n in cython_edges().items():
        edges.setdefault(m, set()).update(n)
    found = cycle(edges)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_cycle_search_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


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


# What the core must not import: the packages built on it, and the benchmark (bench/, installed
# as collectives.bench), which measures it.
ABOVE = (COMPRESSION, TRAIN, "collectives.ml", "collectives.parallel", "collectives.bench", "bench")


def imported(path, name):
    """Every module name ``path`` (module ``name``) imports, relative imports made absolute,
    and each ``from X import Y`` also as X.Y."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(stem + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def test_core_imports_nothing_above_it():
    """No module of the core, Python or Cython, imports collectives.compression, train, ml,
    parallel or the benchmark (collectives.bench, bench/); the command line's __main__ is
    not of the core, since its commands run them."""
    wrong = {m: sorted(n for n in imported(PATHS[m], m) if any(under(n, up) for up in ABOVE))
             for m in PATHS if core(m)}
    assert not any(wrong.values()), {m: bad for m, bad in wrong.items() if bad}
    for path in ROOT.glob("*.p[xy][xd]"):
        lines = [line for line in path.read_text().splitlines() if re.match(r"\s*(c?import|from)\s", line)]
        assert not [line for line in lines if re.search(r"\b(compression|train|ml|parallel|bench)\b", line)], path


def test_the_layer_check_sees_an_import_from_above(tmp_path):
    """The check itself: a core module importing the benchmark or ml is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from .bench import cli\nimport collectives.ml.text\n")
    found = imported(bad, "collectives.bad")
    assert any(under(n, "collectives.bench") for n in found) and any(under(n, "collectives.ml") for n in found)
