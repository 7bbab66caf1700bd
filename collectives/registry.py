"""Which algorithm runs: the table of algorithms, their restrictions, and the ``auto`` policy.

Selection is data kept out of the algorithm modules (MPICH's coll selection, in small):

* ``ALGORITHMS`` lists, per collective, every algorithm with its restriction, if any;
* ``FUSED`` adds, per collective, the fused form of the checked exchange
  (``collectives.exchange``), for messages of at most ``FUSED_BYTES``;
* ``auto`` is a measured decision table (``collectives.tuning``: rank range x message-size
  range -> algorithm, shipped in collectives/data/tuning.json, COLLECTIVES_TUNING=file for
  another); the first row that covers the call and whose algorithm applies wins.  A fused row
  applies only with the cross-rank check on: it is the check and the collective at once;
* ``COLLECTIVES_<COLLECTIVE>=<name>`` in the environment forces one (``COLLECTIVES_ALLREDUCE=ring``);
* a forced algorithm whose restriction fails falls back to ``auto``, logging the reason.

``decide`` returns the choice with the reason (which request, table row, restriction or
fallback chose it): ``Comm.explain`` shows it, COLLECTIVES_EXPLAIN=1 prints it per call.

Names are the module names, ``<collective>_<algorithm>``; users may drop the prefix.
"""
import functools
import importlib
import logging

from . import config, tuning
from .exchange import BCAST, FUSED_BYTES, GATHER, HEADER, REDUCE

log = logging.getLogger("collectives")


class Algorithm:
    """One row of the table: a schedule builder and the restriction it places on its use."""

    def __init__(self, name, restriction=None, why="", reads_in=False, node_aware=False, fused=None,
                 apart=False):
        self.name = name
        # The checked exchange's payload kind (collectives.exchange) of a fused collective,
        # which has no schedule: the exchange is the collective.
        self.fused = fused
        # Composed from collectives on the node communicators (collectives.node), not a schedule.
        self.node_aware = node_aware
        self.restriction = restriction
        self.why = why
        # Reads its input from IN itself (an all-reduce or reduce-scatter); the others get
        # the input copied into ACC first.
        self.reads_in = reads_in
        # Its builder takes a last argument ``apart``: IN and ACC do not overlap (out of
        # place), so it may receive into ACC instead of scratch.
        self.apart = apart

    def applies(self, size, count, uniform, nbytes=0, fused_bytes=FUSED_BYTES):
        """None when usable for this call, else the reason it is not; ``fused_bytes``: the most
        a fused collective carries on this communicator (collectives.eager)."""
        if self.fused is not None and nbytes > fused_bytes:
            return f"carries at most {fused_bytes} bytes on this communicator (collectives.eager)"
        if self.restriction is None or self.restriction(size, count, uniform):
            return None
        return self.why

    @functools.cached_property
    def build(self):
        """The builder function, imported on first use from collectives.algorithms.<name>."""
        return getattr(importlib.import_module(f"collectives.algorithms.{self.name}"), self.name)


def _uniform(size, count, uniform):
    return uniform


def _scratch_ok(size, count, uniform):
    return (size - 1) * count <= MAX_SCRATCH_ELEMENTS


# The naive all-to-all holds p - 1 incoming vectors at once.
MAX_SCRATCH_ELEMENTS = config.get("COLLECTIVES_MAX_SCRATCH")

ALGORITHMS = {
    "allreduce": [
        Algorithm("allreduce_all_to_all", _scratch_ok,
                  "needs (p - 1) x count elements of scratch, over COLLECTIVES_MAX_SCRATCH"),
        Algorithm("allreduce_reduce_bcast"),
        Algorithm("allreduce_binomial"),
        Algorithm("allreduce_round_robin", reads_in=True),
        Algorithm("allreduce_recursive_doubling"),
        Algorithm("allreduce_rabenseifner", reads_in=True),
        Algorithm("allreduce_ring", reads_in=True, apart=True),
        Algorithm("allreduce_ring_segmented", reads_in=True),
    ],
    "bcast": [
        Algorithm("bcast_binomial"),
        Algorithm("bcast_scatter_allgather"),
    ],
    "reduce": [
        Algorithm("reduce_binomial"),
    ],
    "allgather": [
        Algorithm("allgather_ring"),
        Algorithm("allgather_recursive_doubling"),
        Algorithm("allgather_pairwise"),
    ],
    "reduce_scatter": [
        Algorithm("reduce_scatter_ring", reads_in=True, apart=True),
        Algorithm("reduce_scatter_recursive_halving", reads_in=True),
        Algorithm("reduce_scatter_pairwise", reads_in=True),
    ],
    "gather": [
        Algorithm("gather_linear"),
        Algorithm("gather_binomial", _uniform, "needs equal counts on every rank (use Gather, not Gatherv)"),
    ],
    "scatter": [
        Algorithm("scatter_linear"),
        Algorithm("scatter_binomial", _uniform, "needs equal counts on every rank (use Scatter, not Scatterv)"),
    ],
    "barrier": [
        Algorithm("barrier_dissemination"),
        Algorithm("barrier_linear"),
    ],
}

# Node-aware algorithms: for a communicator spanning more than one node with more than one
# rank on some node; their restriction takes whether every node holds as many ranks.
NODE_ALGORITHMS = {
    "allreduce": [
        Algorithm("allreduce_hierarchical", _uniform, "needs the same number of ranks on every node",
                  node_aware=True),
        Algorithm("allreduce_node_leader", node_aware=True),
    ],
}

_EQUAL = "needs equal counts on every rank"
# The checked exchange carrying the payload (collectives.exchange), one per collective.
FUSED = {
    "allreduce": Algorithm("allreduce_fused", fused=REDUCE),
    "bcast": Algorithm("bcast_fused", fused=BCAST),
    "reduce": Algorithm("reduce_fused", fused=REDUCE),
    "allgather": Algorithm("allgather_fused", _uniform, _EQUAL, fused=GATHER),
    "reduce_scatter": Algorithm("reduce_scatter_fused", fused=REDUCE),
    "gather": Algorithm("gather_fused", _uniform, _EQUAL, fused=GATHER),
    "scatter": Algorithm("scatter_fused", _uniform, _EQUAL, fused=BCAST),
    "barrier": Algorithm("barrier_fused", fused=HEADER),
}

_BY_NAME = {a.name: a for table in (ALGORITHMS, NODE_ALGORITHMS) for rows in table.values() for a in rows}
_BY_NAME.update({a.name: a for a in FUSED.values()})

# auto across nodes: (largest message in bytes, algorithm) rows, first match that applies wins;
# None: the flat choice.  Up to 64 KiB the best flat algorithm beat both node-aware ones on the
# 2 nodes x 2 ranks testbed, and from 1 MiB hierarchical beat node_leader in every launch
# (docs/results/testbed.md).  node_leader stays for layouts that hierarchical does not take
# (nodes of different sizes).
NODE_AUTO = {
    "allreduce": [
        (64 << 10, None),
        (None, "allreduce_hierarchical"),
        (None, "allreduce_node_leader"),
    ],
}


# auto's flat choice on a communicator that spans several nodes (collectives.node: ``spans``),
# one rank per node included: (largest message in bytes, algorithm) rows, first match that
# applies wins, in place of the table's rows, which are measured on one node (the fused rows,
# taken with the check on, stay first).  On the testbed's links recursive doubling was the
# fastest up to 64 KiB and the ring from 1 MiB, where the one-node table's choices ran up to
# 1.7x slower (docs/results/testbed.md).
SPREAD_AUTO = {
    "allreduce": [
        (64 << 10, "allreduce_recursive_doubling"),
        (None, "allreduce_ring"),
    ],
}


def may_be_node_aware(name):
    """Whether the resolved choice ``name`` ("auto" or a full name) can run node-aware."""
    return name == "auto" or _BY_NAME[name].node_aware


def select_node(collective, requested, nbytes, uniform):
    """The node-aware Algorithm to run, or None for a flat one: ``requested`` when it is
    node-aware and applies, else the NODE_AUTO choice (a forced node-aware algorithm that does
    not apply falls back to the node-aware rows only)."""
    name = resolve_name(collective, requested)
    if name != "auto" and not _BY_NAME[name].node_aware:
        return None
    if name != "auto":
        algo = _BY_NAME[name]
        reason = algo.applies(None, None, uniform)
        if reason is None:
            return algo
        log.info("collectives: %s does not apply (%s); falling back to auto", name, reason)
    for max_bytes, auto_name in NODE_AUTO[collective]:
        if max_bytes is not None and nbytes > max_bytes or auto_name is None and name != "auto":
            continue
        if auto_name is None:
            return None
        algo = _BY_NAME[auto_name]
        if algo.applies(None, None, uniform) is None:
            return algo
    return None


def flat_name(collective, name):
    """The full name of a flat algorithm of ``collective`` (a row of its table, or its fused
    form) that ``name`` gives; ValueError saying why it is none."""
    full = resolve_name(collective, name)
    if full == "auto" or full not in names(collective) + [FUSED[collective].name]:
        raise ValueError(f"{name!r} is not a flat {collective} algorithm")
    return full


def load_table(path):
    """The decision table in the JSON file ``path``, its algorithm names checked against this
    registry; tuning.TuningError naming the file and the problem."""
    return tuning.load(path, flat_name)


def names(collective):
    """Every algorithm name of ``collective``, in table order."""
    return [a.name for a in ALGORITHMS[collective]]


def choices(collective):
    """The algorithm indices the cross-rank agreement uses: the table's names, the fused
    form, the node-aware algorithms, then "native" (MPI's own call), last so that a range of
    indices below it holds only algorithms that compare the same fields."""
    return (names(collective) + [FUSED[collective].name]
            + [a.name for a in NODE_ALGORITHMS.get(collective, [])] + ["native"])


def resolve_name(collective, name):
    """Full name of algorithm ``name`` ("ring" or "allreduce_ring") or "auto"; ValueError if unknown."""
    if name in (None, "", "auto"):
        return "auto"
    full = name if name.startswith(collective + "_") else f"{collective}_{name}"
    if full not in _BY_NAME or not full.startswith(collective + "_"):
        known = (names(collective) + [a.name for a in NODE_ALGORITHMS.get(collective, [])]
                 + [FUSED[collective].name])
        raise ValueError(f"unknown {collective} algorithm {name!r}; choose auto or one of "
                         + ", ".join(n[len(collective) + 1:] for n in known))
    return full


def decide(collective, requested, size, count, nbytes, uniform=True, source="requested", checked=False,
           spans=False, table=None, fused_bytes=FUSED_BYTES):
    """(Algorithm, reason): ``requested`` when it applies, else the ``auto`` choice.

    ``source`` says where a named request came from (per call, per Comm, environment); the
    reason names it, or the table row, restriction or fallback that chose.  ``checked``: the
    cross-rank check is on, which lets ``auto`` take the fused form.  ``spans``: the
    communicator spans several nodes, where SPREAD_AUTO's rows come after the fused ones.
    ``table``: the decision table's path, empty for the shipped one; a Comm passes the
    COLLECTIVES_TUNING it read when made, and None (tools without a Comm) reads it now.
    ``fused_bytes``: the most a fused form carries on the communicator.
    """
    name = resolve_name(collective, requested)
    fell_back = ""
    if name != "auto":
        algo = _BY_NAME[name]
        reason = ("needs more than one node with several ranks on some node" if algo.node_aware
                  else algo.applies(size, count, uniform, nbytes, fused_bytes))
        if reason is None:
            return algo, f"{name} ({source})"
        log.info("collectives: %s does not apply (%s); falling back to auto", name, reason)
        fell_back = f"{name} ({source}) does not apply: {reason}; "
    table = tuning.active(config.get("COLLECTIVES_TUNING") if table is None else table, flat_name)
    skipped = []
    rows = table.lookup(collective, size, nbytes)
    spread = SPREAD_AUTO.get(collective, ()) if spans else ()
    if spread:
        rows = [row for row in rows if _BY_NAME[row.algorithm].fused is not None]
    for row in rows:
        algo = _BY_NAME[row.algorithm]
        why = (algo.applies(size, count, uniform, nbytes, fused_bytes) if checked or algo.fused is None
               else "needs the cross-rank check on: the fused form is that check")
        if why is None:
            return algo, (f"{fell_back}auto: {collective} {row.describe()} of {table.path}"
                          + "".join(f"; skipped {s}" for s in skipped))
        skipped.append(f"{row.describe()} ({row.algorithm}: {why})")
    for max_bytes, spread_name in spread:
        algo = _BY_NAME[spread_name]
        if (max_bytes is None or nbytes <= max_bytes) and algo.applies(size, count, uniform, nbytes) is None:
            return algo, (f"{fell_back}auto across nodes: registry.SPREAD_AUTO "
                          f"(bytes ..{'' if max_bytes is None else max_bytes})"
                          + "".join(f"; skipped {s}" for s in skipped))
    algo = next(a for a in ALGORITHMS[collective] if a.applies(size, count, uniform) is None)
    return algo, (f"{fell_back}auto: no usable {collective} row of {table.path} for {size} ranks and "
                  f"{nbytes} bytes{''.join(f'; skipped {s}' for s in skipped)}; first applicable algorithm")


def decide_for(collective, per_call, per_comm, per_env, size, count, nbytes, uniform=True, checked=False,
               spans=False, table=None, nodes=None, fused_bytes=FUSED_BYTES):
    """(Algorithm, reason) for a call: its ``algorithm=``, else the Comm's, else ``per_env``
    (the Comm's snapshot of COLLECTIVES_<COLLECTIVE>), else ``auto`` (``checked``, ``spans``
    and ``table`` as for ``decide``).  ``nodes``: the communicator's collectives.node.Nodes
    when it spans several nodes with several ranks on some node; the node-aware rows
    (NODE_ALGORITHMS, NODE_AUTO) then come first for a call that moves data; ``fused_bytes``
    as for ``decide``."""
    requested, source = "auto", "requested"
    for name, where in ((per_call, "per call"), (per_comm, "per Comm"),
                        (per_env, f"COLLECTIVES_{collective.upper()}")):
        if resolve_name(collective, name) != "auto":
            requested, source = name, where
            break
    if nodes is not None and count and collective in NODE_AUTO and may_be_node_aware(resolve_name(collective, requested)):
        algo = select_node(collective, requested, nbytes, nodes.uniform)
        if algo is not None:
            if resolve_name(collective, requested) == algo.name:
                return algo, f"{algo.name} ({source})"
            return algo, f"auto across nodes: registry.NODE_AUTO (bytes {nbytes}, nodes of {nodes.counts} ranks)"
    return decide(collective, requested, size, count, nbytes, uniform, source, checked, spans, table, fused_bytes)


def select(collective, requested, size, count, nbytes, uniform=True, checked=False):
    """The Algorithm to run: ``requested`` when it applies, else the ``auto`` choice."""
    return decide(collective, requested, size, count, nbytes, uniform, checked=checked)[0]


# Bytes a cached plan holds besides its steps: two array headers (the steps are a reshaped
# view), the plan object with its integers, and the cache's own node (tracemalloc: ~0.6 KiB).
PLAN_OVERHEAD = 640


def schedule(name, rank, size, *args):
    """The schedule of algorithm ``name`` for one rank of ``size``: (steps, tmp_count, nreq),
    built by the algorithm's module from ``args``; the engine that asks keeps its plans."""
    from .schedule import Schedule

    sched = Schedule(rank, size)
    _BY_NAME[name].build(sched, *args)
    steps = sched.finish()
    steps.setflags(write=False)
    return steps, sched.tmp_count, sched.nreq
