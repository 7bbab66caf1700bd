"""The ``auto`` decision table: JSON rows of rank range x message-size range -> algorithm.

The layout follows MPICH's JSON tuning files (``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``),
flattened to rows::

    {"format": "collectives-tuning/1",
     "metadata": {"machine": "...", "measured": "...", ...},
     "collectives": {
       "allreduce": [
         {"ranks": [2, null], "nodes": [2, null], "per_node": [2, null], "bytes": [65537, null],
          "algorithm": "allreduce_hierarchical"},
         {"ranks": [2, 3], "bytes": [0, 16384], "algorithm": "allreduce_recursive_doubling"},
         {"ranks": [2, null], "bytes": [16385, null], "algorithm": "allreduce_ring"}]}}

A row's keys:

* ``ranks``, ``bytes`` (both required): the communicator's size and the message's bytes (the
  whole vector, as the benchmark's size column);
* ``nodes``, ``per_node`` (optional): how many nodes the communicator spans, and the most ranks
  on one of them (collectives.node); a row without them covers every layout;
* ``transport`` (optional): ``"p2p"``, any communicator, or ``"shm"``, only where a shared
  segment joins each node's ranks;
* ``algorithm``: the algorithm's name, one of the collective's (``row_name`` of
  collectives.registry says which may appear: its table's, its fused form, a node-aware one).

Bounds are inclusive, ``null`` is unbounded; per collective the first row whose keys hold the
call and whose algorithm applies wins (``collectives.registry.decide``); a ``<collective>_fused``
row applies only with the cross-rank check on.  So rows for a layout (several nodes, a
transport) go before the rows that cover every layout.  The package ships
``collectives/data/tuning.json`` (``collectives-bench tune`` writes it); COLLECTIVES_TUNING=path
selects another.  A malformed file raises TuningError naming the file and the problem.

This module knows the file's format; which algorithm names a row may give is the registry's:
``parse``, ``load`` and ``active`` take its ``row_name`` (``collectives.registry.load_table``
passes it).
"""
import json
import os

from .constants import COLLECTIVES

FORMAT = "collectives-tuning/1"
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tuning.json")


class TuningError(ValueError):
    """A decision table that cannot be used; the message names the file and the problem."""


KEYS = ("ranks", "nodes", "per_node", "bytes", "transport", "algorithm")
TRANSPORTS = ("p2p", "shm")


class Row:
    """One decision: ``algorithm`` for ranks lo..hi and bytes lo..hi (None: unbounded), and
    where given for nodes and ranks per node lo..hi and a transport."""

    def __init__(self, ranks, nbytes, algorithm, index, nodes=None, per_node=None, transport=None):
        self.ranks, self.bytes, self.algorithm, self.index = tuple(ranks), tuple(nbytes), algorithm, index
        self.nodes = None if nodes is None else tuple(nodes)
        self.per_node = None if per_node is None else tuple(per_node)
        self.transport = transport

    def matches(self, topology, nbytes):
        """Whether this row covers a message of ``nbytes`` on ``topology`` (a
        collectives.registry.Topology, or a rank count: that many ranks on one node)."""
        size, counts, shared = ((topology, (topology,), False) if isinstance(topology, int)
                                else (topology.size, topology.counts, topology.shared))
        ranges = [(size, self.ranks), (nbytes, self.bytes)]
        if self.nodes is not None:
            ranges.append((len(counts), self.nodes))
        if self.per_node is not None:
            ranges.append((max(counts), self.per_node))
        if self.transport == "shm" and not shared:
            return False
        return all(lo <= v and (hi is None or v <= hi) for v, (lo, hi) in ranges)

    def describe(self):
        """The row as text, e.g. ``row 2 (ranks 2..8, bytes 0..16384)``."""
        def span(lo, hi):
            return f"{lo}..{'' if hi is None else hi}"
        keys = [f"ranks {span(*self.ranks)}"]
        keys += [f"nodes {span(*self.nodes)}"] if self.nodes is not None else []
        keys += [f"ranks per node {span(*self.per_node)}"] if self.per_node is not None else []
        keys += [f"bytes {span(*self.bytes)}"]
        keys += [f"transport {self.transport}"] if self.transport is not None else []
        return f"row {self.index} ({', '.join(keys)})"

    def as_json(self):
        """The row as the file holds it."""
        out = {"ranks": list(self.ranks)}
        if self.nodes is not None:
            out["nodes"] = list(self.nodes)
        if self.per_node is not None:
            out["per_node"] = list(self.per_node)
        out["bytes"] = list(self.bytes)
        if self.transport is not None:
            out["transport"] = self.transport
        out["algorithm"] = self.algorithm
        return out


class Table:
    """A loaded decision table: ``rows[collective]`` in order, ``metadata``, the ``path`` it came from."""

    def __init__(self, rows, metadata=None, path=None):
        self.rows, self.metadata, self.path = rows, dict(metadata or {}), path

    def lookup(self, collective, topology, nbytes):
        """The rows of ``collective`` covering ``nbytes`` on ``topology`` (as ``Row.matches``
        takes it), in table order."""
        return [row for row in self.rows.get(collective, ()) if row.matches(topology, nbytes)]

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


def parse(data, row_name, path="<table>"):
    """A Table from the decoded JSON ``data``; TuningError naming ``path`` and the problem.
    ``row_name(collective, name)``: the full name of an algorithm of ``collective`` a row may
    give, or ValueError saying why ``name`` is none."""
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
                if not isinstance(entry, dict) or set(entry) - set(KEYS):
                    raise ValueError(f"{where}: want an object of {', '.join(KEYS)} only")
                missing = {"ranks", "bytes", "algorithm"} - set(entry)
                if missing:
                    raise ValueError(f"{where}: missing {', '.join(sorted(missing))}")
                if not isinstance(entry["algorithm"], str):
                    raise ValueError(f"{where}.algorithm: want a name, got {entry['algorithm']!r}")
                if entry.get("transport", "p2p") not in TRANSPORTS:
                    raise ValueError(f"{where}.transport: one of {', '.join(TRANSPORTS)}, got {entry['transport']!r}")
                try:
                    name = row_name(collective, entry["algorithm"])
                except ValueError as exc:
                    raise ValueError(f"{where}.algorithm: {exc}") from None
                layout = {key: _range(entry[key], f"{where}.{key}", 1) for key in ("nodes", "per_node") if key in entry}
                rows[collective].append(Row(_range(entry["ranks"], f"{where}.ranks", 1),
                                            _range(entry["bytes"], f"{where}.bytes", 0), name, i,
                                            transport=entry.get("transport"), **layout))
        return Table(rows, data.get("metadata"), path)
    except ValueError as exc:
        raise TuningError(f"tuning table {path}: {exc}") from None


def load(path, row_name):
    """The Table in the JSON file ``path``; TuningError naming the file and the problem
    (``row_name`` as for ``parse``)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise TuningError(f"tuning table {path}: cannot read it: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TuningError(f"tuning table {path}: not valid JSON: {exc}") from None
    return parse(data, row_name, path)


def write(table, path):
    """Write ``table`` as JSON to ``path``."""
    with open(path, "w") as f:
        json.dump(table.as_json(), f, indent=1)
        f.write("\n")


_LOADED = {}


def active(path, row_name):
    """The table ``auto`` uses: the file at ``path`` (a Comm's COLLECTIVES_TUNING), else the
    shipped one; each loaded once (``row_name`` as for ``parse``)."""
    path = path or DEFAULT_PATH
    table = _LOADED.get(path)
    if table is None:
        table = _LOADED[path] = load(path, row_name)
    return table
