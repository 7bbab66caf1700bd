"""The ``auto`` decision table: JSON rows of rank range x message-size range -> algorithm.

The layout follows MPICH's JSON tuning files (``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``),
flattened to rows::

    {"format": "collectives-tuning/1",
     "metadata": {"machine": "...", "measured": "...", ...},
     "collectives": {
       "allreduce": [
         {"ranks": [2, 3], "bytes": [0, 16384], "algorithm": "allreduce_recursive_doubling"},
         {"ranks": [2, null], "bytes": [16385, null], "algorithm": "allreduce_ring"}]}}

Bounds are inclusive, ``null`` is unbounded; per collective the first row whose ranges hold the
communicator size and the message size (the whole vector in bytes, as the benchmark's size
column) and whose algorithm applies wins (``collectives.registry.decide``); a
``<collective>_fused`` row applies only with the cross-rank check on.  The package ships
``collectives/data/tuning.json`` (``collectives-bench tune`` writes it); COLLECTIVES_TUNING=path
selects another.  A malformed file raises TuningError naming the file and the problem.

This module knows the file's format; which algorithm names a row may give is the registry's:
``parse``, ``load`` and ``active`` take its ``flat_name`` (``collectives.registry.load_table``
passes it).
"""
import json
import os

from .config import COLLECTIVES

FORMAT = "collectives-tuning/1"
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tuning.json")


class TuningError(ValueError):
    """A decision table that cannot be used; the message names the file and the problem."""


class Row:
    """One decision: ranks lo..hi and bytes lo..hi (None: unbounded) choose ``algorithm``."""

    def __init__(self, ranks, nbytes, algorithm, index):
        self.ranks, self.bytes, self.algorithm, self.index = tuple(ranks), tuple(nbytes), algorithm, index

    def matches(self, size, nbytes):
        """Whether this row covers ``size`` ranks and an ``nbytes`` message."""
        return all(lo <= v and (hi is None or v <= hi) for v, (lo, hi) in ((size, self.ranks), (nbytes, self.bytes)))

    def describe(self):
        """The row as text, e.g. ``allreduce[2] (ranks 2..8, bytes 0..16384)``."""
        def span(lo, hi):
            return f"{lo}..{'' if hi is None else hi}"
        return f"row {self.index} (ranks {span(*self.ranks)}, bytes {span(*self.bytes)})"

    def as_json(self):
        """The row as the file holds it."""
        return {"ranks": list(self.ranks), "bytes": list(self.bytes), "algorithm": self.algorithm}


class Table:
    """A loaded decision table: ``rows[collective]`` in order, ``metadata``, the ``path`` it came from."""

    def __init__(self, rows, metadata=None, path=None):
        self.rows, self.metadata, self.path = rows, dict(metadata or {}), path

    def lookup(self, collective, size, nbytes):
        """The rows of ``collective`` covering ``size`` ranks and ``nbytes``, in table order."""
        return [row for row in self.rows.get(collective, ()) if row.matches(size, nbytes)]

    def as_json(self):
        """The table as the file holds it."""
        return {"format": FORMAT, "metadata": self.metadata,
                "collectives": {c: [r.as_json() for r in rows] for c, rows in self.rows.items()}}


def _range(value, where, lowest):
    if (not isinstance(value, list) or len(value) != 2 or isinstance(value[0], bool)
            or not isinstance(value[0], int) or not (value[1] is None or (isinstance(value[1], int)
                                                                       and not isinstance(value[1], bool)))):
        raise ValueError(f"{where}: want [low, high] with integer low and integer or null high, got {value!r}")
    if value[0] < lowest or (value[1] is not None and value[1] < value[0]):
        raise ValueError(f"{where}: empty or out of range ({value!r}; low >= {lowest}, high >= low)")
    return value


def parse(data, flat_name, path="<table>"):
    """A Table from the decoded JSON ``data``; TuningError naming ``path`` and the problem.
    ``flat_name(collective, name)``: the full name of a flat algorithm of ``collective``, or
    ValueError saying why ``name`` is none."""
    try:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a decision table: want an object with \"format\": \"{FORMAT}\"")
        if not isinstance(data.get("collectives"), dict):
            raise ValueError("\"collectives\" must be an object of collective name -> list of rows")
        rows = {}
        for collective, entries in data["collectives"].items():
            if collective not in COLLECTIVES:
                raise ValueError(f"unknown collective {collective!r}; one of {', '.join(COLLECTIVES)}")
            if not isinstance(entries, list):
                raise ValueError(f"collectives.{collective} must be a list of rows")
            rows[collective] = []
            for i, entry in enumerate(entries):
                where = f"collectives.{collective}[{i}]"
                if not isinstance(entry, dict) or set(entry) - {"ranks", "bytes", "algorithm"}:
                    raise ValueError(f"{where}: want an object with ranks, bytes and algorithm only")
                missing = {"ranks", "bytes", "algorithm"} - set(entry)
                if missing:
                    raise ValueError(f"{where}: missing {', '.join(sorted(missing))}")
                if not isinstance(entry["algorithm"], str):
                    raise ValueError(f"{where}.algorithm: want a name, got {entry['algorithm']!r}")
                try:
                    name = flat_name(collective, entry["algorithm"])
                except ValueError as exc:
                    raise ValueError(f"{where}.algorithm: {exc}") from None
                rows[collective].append(Row(_range(entry["ranks"], f"{where}.ranks", 1),
                                            _range(entry["bytes"], f"{where}.bytes", 0), name, i))
        return Table(rows, data.get("metadata"), path)
    except ValueError as exc:
        raise TuningError(f"tuning table {path}: {exc}") from None


def load(path, flat_name):
    """The Table in the JSON file ``path``; TuningError naming the file and the problem
    (``flat_name`` as for ``parse``)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise TuningError(f"tuning table {path}: cannot read it: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TuningError(f"tuning table {path}: not valid JSON: {exc}") from None
    return parse(data, flat_name, path)


def write(table, path):
    """Write ``table`` as JSON to ``path``."""
    with open(path, "w") as f:
        json.dump(table.as_json(), f, indent=1)
        f.write("\n")


_LOADED = {}


def active(path, flat_name):
    """The table ``auto`` uses: the file at ``path`` (a Comm's COLLECTIVES_TUNING), else the
    shipped one; each loaded once (``flat_name`` as for ``parse``)."""
    path = path or DEFAULT_PATH
    table = _LOADED.get(path)
    if table is None:
        table = _LOADED[path] = load(path, flat_name)
    return table
