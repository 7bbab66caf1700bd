"""Every ``COLLECTIVES_*`` environment variable, declared once.

Each variable has a name, a type, a default, the moment it is read and one line of doc
(``VARIABLES``; the configuration page of the docs is generated from it).  When it is read:

* ``process``: once, when the module that uses it is imported;
* ``communicator``: when a ``Comm`` is made, into its ``Settings`` snapshot; nothing on a
  collective's path reads the environment, so a variable changed later takes effect on the
  communicators made after the change;
* ``run``: when a command (``python -m collectives ...``) or a training run starts.

A value that does not parse raises ValueError naming the variable, where it is read.  This
module imports only collectives.constants, so every other module may import it.
"""
import math
import os
from typing import Callable, NamedTuple

from .constants import COLLECTIVES


class Variable(NamedTuple):
    """One environment variable: how to parse it and what it does."""

    name: str
    type: str
    default: object
    when: str
    doc: str
    parse: Callable


def _flag(name, text):
    return text.strip() not in ("", "0")


def _seconds(name, text):
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be finite and >= 0 seconds (0: off), got {text!r}")
    return value


def _count(name, text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {text!r}")
    return value


def _positive(name, text):
    value = _count(name, text)
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {text!r}")
    return value


def _ratio(name, text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {text!r}")
    return value


def _choice(*allowed):
    def parse(name, text):
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)} (got {text!r})")
        return value
    return parse


def _text(name, text):
    return text.strip()


VARIABLES = (
    Variable("COLLECTIVES_CHECK", "bool", True, "communicator",
             "Agree across ranks on every collective's arguments before (or as) it runs, so a "
             "mismatch raises the same ValueError on every rank; 0 turns the check off.", _flag),
    Variable("COLLECTIVES_TIMEOUT", "seconds", 1800.0, "communicator",
             "The stall watchdog: seconds a collective may wait without progress before it "
             "raises StallError (or aborts); 0 turns it off.  The default, 30 minutes, is PyTorch's "
             "for its CPU backend (Gloo): longer than a CPU job's I/O between collectives.", _seconds),
    Variable("COLLECTIVES_TIMEOUT_MODE", "raise | abort", "raise", "communicator",
             "What a stall does: raise StallError on the rank that waited, or abort the job "
             "with exit status 124.", _choice("raise", "abort")),
    Variable("COLLECTIVES_ABORT_ON_ERROR", "bool", True, "communicator",
             "Once a program has made a Comm, an uncaught exception or a non-zero sys.exit on any "
             "rank ends the whole job with MPI_Abort (exit status 124 for a stall, else 1 or the "
             "sys.exit status) instead of leaving the other ranks waiting; 0 keeps Python's own "
             "handling (read when the first Comm is made; interactive sessions and pytest keep "
             "theirs).", _flag),
    Variable("COLLECTIVES_<COLLECTIVE>", "algorithm name", "auto", "communicator",
             "Force an algorithm for one collective, e.g. COLLECTIVES_ALLREDUCE=ring (one variable "
             "per collective: " + ", ".join(c.upper() for c in COLLECTIVES) + "); a per-Comm or "
             "per-call choice wins over it.", _text),
    Variable("COLLECTIVES_EAGER_BYTES", "bytes", None, "communicator",
             "The largest message MPI sends eagerly between two ranks of one node; schedules split "
             "larger messages (up to COLLECTIVES_SPLIT_BYTES) into pieces of at most this size. "
             "Unset: read from the MPI library's control variables (collectives.eager); 0: never "
             "split.", _count),
    Variable("COLLECTIVES_SPLIT_BYTES", "bytes", None, "communicator",
             "The largest message that is split into eager pieces. Unset: the size up to which pieces "
             "beat the MPI library's own protocol, measured (collectives.eager: 16 KiB for MPICH, 48 KiB "
             "with its CMA off, 4 KiB for Open MPI).", _count),
    Variable("COLLECTIVES_SHM", "auto | 1 | 0", "auto", "communicator",
             "Run the collectives of a Comm whose ranks share a node in a shared-memory segment "
             "(collectives.shm): auto, where the node's ranks fit its cores; 1, wherever a segment "
             "can be made; 0, never (point-to-point through MPI).", _choice("auto", "1", "0")),
    Variable("COLLECTIVES_SHM_BYTES", "bytes", 1 << 20, "communicator",
             "The shared segment's bytes per rank (two regions of half that); a larger message goes "
             "through it in rounds.", _positive),
    Variable("COLLECTIVES_TUNING", "path", "", "communicator",
             "The decision table auto uses (JSON, as collectives-bench tune writes it) instead of "
             "the shipped collectives/data/tuning.json.", _text),
    Variable("COLLECTIVES_TIMELINE", "path", "", "communicator",
             "Record every collective call of the process, with its phases and waits, and write a "
             "Chrome trace file per rank and one merged at the end (collectives.timeline).", _text),
    Variable("COLLECTIVES_EXPLAIN", "bool", False, "communicator",
             "Print one line per collective call on stderr saying which algorithm ran and why.", _flag),
    Variable("COLLECTIVES_NODE", "layout", "", "communicator",
             "Pretend the ranks sit on nodes, for testing node-aware algorithms on one host: K "
             "(nodes of K ranks), NxK, or a,b,c (uneven).", _text),
    Variable("COLLECTIVES_NODE_RATIO", "number", None, "communicator",
             "Bandwidth between nodes over that within a node, which decides when the compressed "
             "all-reduce goes node-aware (unset: collectives.compression.NODE_RATIO, 1/8).", _ratio),
    Variable("COLLECTIVES_PUREPYTHON", "bool", False, "process",
             "Run the NumPy twins of the executor, the checked exchange and the kernels instead "
             "of the native ones (the same dispatch otherwise).", _flag),
    Variable("COLLECTIVES_SIMD", "none | avx2", "", "process",
             "Cap the hand-written SIMD paths of the C kernels (read by csrc/cpu.h at the first "
             "kernel call), to test the paths other CPUs take; unset: every path this CPU has.",
             _choice("none", "avx2")),
    Variable("COLLECTIVES_CACHE_BYTES", "bytes", 32 << 20, "communicator",
             "The most bytes of plans a Comm keeps; the least recently used go first.", _count),
    Variable("COLLECTIVES_MAX_SCRATCH", "elements", 1 << 28, "process",
             "The scratch the naive all-to-all all-reduce may use, (p - 1) x count elements; "
             "above it auto and a forced choice take another algorithm.", _count),
    Variable("COLLECTIVES_MAX_COUNT", "elements", 2**31 - 1, "process",
             "The most elements one message of a schedule carries; longer ones are split. Lower "
             "it to test the split paths.", _positive),
    Variable("COLLECTIVES_DEBUG", "bool", False, "run",
             "Commands print a full traceback for an unexpected error instead of one line.", _flag),
    Variable("COLLECTIVES_REPRODUCIBLE", "bool", False, "run",
             "Training sums gradients in a fixed tree, so a run gives the same bits at any rank "
             "count and with any all-reduce algorithm.", _flag),
)
_BY_NAME = {v.name: v for v in VARIABLES}


def get(name, environ=None):
    """The parsed value of variable ``name`` (its default when unset or empty); ValueError
    naming the variable when it does not parse.  ``COLLECTIVES_ALLREDUCE`` and the other
    per-collective names resolve to the ``COLLECTIVES_<COLLECTIVE>`` entry."""
    environ = os.environ if environ is None else environ
    var = _BY_NAME.get(name)
    if var is None:
        collective = name[len("COLLECTIVES_"):].lower()
        if collective not in COLLECTIVES:
            raise KeyError(f"{name} is not a collectives variable")
        var = _BY_NAME["COLLECTIVES_<COLLECTIVE>"]
    text = environ.get(name, "")
    if not text.strip():
        return var.default
    return var.parse(name, text)


def is_set(name, environ=None):
    """Whether variable ``name`` is set to something other than blanks."""
    return bool((os.environ if environ is None else environ).get(name, "").strip())


class Settings(NamedTuple):
    """What a Comm reads from the environment when it is made."""

    check: bool
    timeout: float
    timeout_mode: str
    abort_on_error: bool
    algorithms: dict
    tuning: str
    timeline: str
    explain: bool
    node: str
    eager: object
    split: object
    cache_bytes: int
    node_ratio: object
    shm: str
    shm_bytes: int


def snapshot(environ=None):
    """The ``communicator`` variables as they are now."""
    return Settings(
        check=get("COLLECTIVES_CHECK", environ),
        timeout=get("COLLECTIVES_TIMEOUT", environ),
        timeout_mode=get("COLLECTIVES_TIMEOUT_MODE", environ),
        abort_on_error=get("COLLECTIVES_ABORT_ON_ERROR", environ),
        algorithms={c: get(f"COLLECTIVES_{c.upper()}", environ) for c in COLLECTIVES},
        tuning=get("COLLECTIVES_TUNING", environ),
        timeline=get("COLLECTIVES_TIMELINE", environ),
        explain=get("COLLECTIVES_EXPLAIN", environ),
        node=get("COLLECTIVES_NODE", environ),
        eager=get("COLLECTIVES_EAGER_BYTES", environ),
        split=get("COLLECTIVES_SPLIT_BYTES", environ),
        cache_bytes=get("COLLECTIVES_CACHE_BYTES", environ),
        node_ratio=get("COLLECTIVES_NODE_RATIO", environ),
        shm=get("COLLECTIVES_SHM", environ),
        shm_bytes=get("COLLECTIVES_SHM_BYTES", environ),
    )


__all__ = ["COLLECTIVES", "Settings", "VARIABLES", "Variable", "get", "is_set", "snapshot"]
