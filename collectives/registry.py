"""Which algorithm runs: the table of algorithms, their restrictions, and the ``auto`` policy.

Selection is data kept out of the algorithm modules (MPICH's coll selection, in small):

* ``ALGORITHMS`` lists, per collective, every algorithm with its restriction, if any;
  ``NODE_ALGORITHMS`` the node-aware ones, composed from collectives on a communicator's node
  and lane communicators; ``SHM`` the ones that run in a node's shared segment
  (collectives.shm), without MPI; ``FUSED`` the fused form of the checked exchange
  (``collectives.exchange``) of each collective that has one;
* a restriction sees the call's ``Shape`` (count, bytes, equal counts on every rank) and the
  communicator's ``Topology`` (ranks, ranks per node, the data a phase of its shared segment
  carries, the most a fused collective carries there);
* ``auto`` is a measured decision table (``collectives.tuning``: rows keyed by rank count and
  message size, and where they say so by the nodes, the ranks per node and the transport;
  shipped in collectives/data/tuning.json, COLLECTIVES_TUNING=file for another); the first row
  that covers the call and whose algorithm applies wins.  A fused row applies only with the
  cross-rank check on: it is the check and the collective at once;
* ``COLLECTIVES_<COLLECTIVE>=<name>`` in the environment forces one (``COLLECTIVES_ALLREDUCE=ring``);
* a forced algorithm whose restriction fails falls back to ``auto`` (a node-aware one first to
  another node-aware one that applies), logging the reason.

``decide`` returns the choice with the reason (which request, table row, restriction or
fallback chose it): ``Comm.explain`` shows it, COLLECTIVES_EXPLAIN=1 prints it per call.

Names are the module names, ``<collective>_<algorithm>``; users may drop the prefix.
"""
import functools
import importlib
import logging
from typing import NamedTuple

from . import config, tuning
from .constants import COLLECTIVES
from .exchange import BCAST, FUSED_BYTES, GATHER, HEADER, REDUCE

log = logging.getLogger("collectives")


class Shape(NamedTuple):
    """What a restriction may ask of a call: its element count, its bytes and whether every
    rank passes the same count."""

    count: int
    nbytes: int = 0
    uniform: bool = True


class Topology(NamedTuple):
    """What a restriction, and a row of the table, may ask of the communicator a call runs on:
    its ranks, the ranks on each of its nodes (in node order; one node of ``size`` when
    empty), the bytes one phase of its shared-memory segment carries (0: the ranks share no
    segment; collectives.shm), and the most a fused collective carries there
    (collectives.eager)."""

    size: int
    nodes: tuple = ()
    shared: int = 0
    fused_bytes: int = FUSED_BYTES

    @property
    def counts(self):
        """Ranks per node."""
        return self.nodes or (self.size,)

    @property
    def spans(self):
        """Whether the communicator spans several nodes."""
        return len(self.counts) > 1

    @property
    def multi(self):
        """Whether it spans several nodes with several ranks on some node."""
        return self.spans and max(self.counts) > 1

    @property
    def even(self):
        """Whether every node holds as many ranks."""
        return len(set(self.counts)) == 1


class Algorithm:
    """One row of the table: a schedule builder and the restriction it places on its use."""

    def __init__(self, name, restriction=None, why="", reads_in=False, node_aware=False, fused=None,
                 apart=False, shm=None):
        self.name = name
        # The checked exchange's payload kind (collectives.exchange) of a fused collective,
        # which has no schedule: the exchange is the collective.
        self.fused = fused
        # The form of a shared-memory algorithm (constants.SHM_FORMS: "direct", "pipelined"),
        # which runs in the node's segment, not as a schedule.
        self.shm = shm
        # Composed from collectives on the node communicators (collectives.node), not a schedule.
        self.node_aware = node_aware
        self.restriction = restriction
        self.why = why
        # Reads its input from IN itself (an all-reduce, reduce-scatter, scan or all-to-all); the others
        # get the input copied into ACC first.
        self.reads_in = reads_in
        # Its builder takes a last argument ``apart``: IN and ACC do not overlap (out of
        # place), so it may receive into ACC instead of scratch.
        self.apart = apart

    def applies(self, shape, topology):
        """None when usable for a call of ``shape`` on ``topology``, else the reason it is not."""
        if self.fused is not None and topology.shared:
            return "the check is a phase of the shared segment on this communicator (collectives.shm)"
        if self.fused is not None and shape.nbytes > topology.fused_bytes:
            return f"carries at most {topology.fused_bytes} bytes on this communicator (collectives.eager)"
        if self.shm is not None and not topology.shared:
            return "needs a shared-memory segment joining the communicator's ranks (collectives.shm)"
        if self.shm == "direct" and shape.nbytes > topology.shared:
            return f"carries at most {topology.shared} bytes in the segment (COLLECTIVES_SHM_BYTES)"
        if self.restriction is None or self.restriction(shape, topology):
            return None
        return self.why

    @functools.cached_property
    def build(self):
        """The builder function, imported on first use from collectives.algorithms.<name>."""
        return getattr(importlib.import_module(f"collectives.algorithms.{self.name}"), self.name)


def _uniform(shape, topology):
    return shape.uniform


def _scratch_ok(shape, topology):
    return (topology.size - 1) * shape.count <= MAX_SCRATCH_ELEMENTS


def _gathered_fits(shape, topology):
    return shape.uniform and topology.size * shape.nbytes <= topology.fused_bytes


def _several_nodes(shape, topology):
    return topology.multi


def _even_nodes(shape, topology):
    return topology.multi and topology.even


_EQUAL = "needs equal counts on every rank"
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
    "scan": [
        Algorithm("scan_recursive_doubling", reads_in=True, apart=True),
    ],
    "exscan": [
        Algorithm("exscan_recursive_doubling", reads_in=True, apart=True),
    ],
    "alltoall": [
        Algorithm("alltoall_pairwise", reads_in=True),
        Algorithm("alltoall_scattered", reads_in=True),
        Algorithm("alltoall_bruck", _uniform, _EQUAL + " (use Alltoall, not Alltoallv)", reads_in=True),
    ],
    "neighbor_allgather": [
        Algorithm("neighbor_allgather_linear", reads_in=True),
    ],
    "neighbor_alltoall": [
        Algorithm("neighbor_alltoall_linear", reads_in=True),
    ],
}

# Node-aware algorithms: for a communicator spanning more than one node with more than one
# rank on some node.
NODE_ALGORITHMS = {
    "allreduce": [
        Algorithm("allreduce_hierarchical", _even_nodes,
                  "needs several nodes, each with the same number of ranks, more than one", node_aware=True),
        Algorithm("allreduce_node_leader", _several_nodes,
                  "needs more than one node with several ranks on some node", node_aware=True),
    ],
}

# In the node's shared segment, one or more per collective.
SHM = {
    "allreduce": [Algorithm("allreduce_shm_direct", shm="direct"),
                  Algorithm("allreduce_shm_pipelined", shm="pipelined")],
    "bcast": [Algorithm("bcast_shm", shm="pipelined")],
    "reduce": [Algorithm("reduce_shm_direct", shm="direct"),
               Algorithm("reduce_shm_pipelined", shm="pipelined")],
    "allgather": [Algorithm("allgather_shm", shm="pipelined")],
    "reduce_scatter": [Algorithm("reduce_scatter_shm", shm="pipelined")],
    "gather": [Algorithm("gather_shm", _uniform, _EQUAL + " (use Gather, not Gatherv)", shm="pipelined")],
    "scatter": [Algorithm("scatter_shm", _uniform, _EQUAL + " (use Scatter, not Scatterv)", shm="pipelined")],
    "barrier": [Algorithm("barrier_shm", shm="pipelined")],
    "scan": [],
    "exscan": [],
    "alltoall": [],
    "neighbor_allgather": [],
    "neighbor_alltoall": [],
}
# The checked exchange carrying the payload (collectives.exchange), one per collective that
# has one: a prefix reduction gives every rank a different result, which the exchange's
# payload kinds (one result for all, or blocks in rank order) do not carry.  The all-to-all's
# gathers every rank's whole send buffer, p times the call's bytes, and keeps its own blocks.
FUSED = {
    "allreduce": Algorithm("allreduce_fused", fused=REDUCE),
    "bcast": Algorithm("bcast_fused", fused=BCAST),
    "reduce": Algorithm("reduce_fused", fused=REDUCE),
    "allgather": Algorithm("allgather_fused", _uniform, _EQUAL, fused=GATHER),
    "reduce_scatter": Algorithm("reduce_scatter_fused", fused=REDUCE),
    "gather": Algorithm("gather_fused", _uniform, _EQUAL, fused=GATHER),
    "scatter": Algorithm("scatter_fused", _uniform, _EQUAL, fused=BCAST),
    "barrier": Algorithm("barrier_fused", fused=HEADER),
    "alltoall": Algorithm("alltoall_fused", _gathered_fits,
                          "carries every rank's whole send buffer of equal blocks (use Alltoall, not Alltoallv), "
                          "at most what a fused collective carries", fused=GATHER),
}

if tuple(ALGORITHMS) != COLLECTIVES or tuple(SHM) != COLLECTIVES:
    raise ImportError("collectives.registry: ALGORITHMS and SHM must hold collectives.constants.COLLECTIVES, in order")

_BY_NAME = {a.name: a for table in (ALGORITHMS, NODE_ALGORITHMS, SHM) for rows in table.values() for a in rows}
_BY_NAME.update({a.name: a for a in FUSED.values()})


def row_name(collective, name):
    """The full name of an algorithm of ``collective`` that a row of the table may give (one
    of its table, its shared-memory ones, its fused form, a node-aware one); ValueError saying
    why ``name`` is none."""
    full = resolve_name(collective, name)
    if full == "auto":
        raise ValueError(f"{name!r} is not a {collective} algorithm")
    return full


def load_table(path):
    """The decision table in the JSON file ``path``, its algorithm names checked against this
    registry; tuning.TuningError naming the file and the problem."""
    return tuning.load(path, row_name)


def names(collective):
    """Every point-to-point algorithm name of ``collective``, in table order."""
    return [a.name for a in ALGORITHMS[collective]]


def shm_names(collective):
    """The names of ``collective``'s shared-memory algorithms."""
    return [a.name for a in SHM[collective]]


def fused_names(collective):
    """The name of ``collective``'s fused form in a list, empty when it has none."""
    return [FUSED[collective].name] if collective in FUSED else []


def choices(collective):
    """The algorithm indices the cross-rank agreement uses: the table's names, the fused
    form, the node-aware algorithms, the shared-memory ones, then "native" (MPI's own call),
    last so that a range of indices below it holds only algorithms that compare the same
    fields."""
    return (names(collective) + fused_names(collective)
            + [a.name for a in NODE_ALGORITHMS.get(collective, [])] + shm_names(collective) + ["native"])


def resolve_name(collective, name):
    """Full name of algorithm ``name`` ("ring" or "allreduce_ring") or "auto"; ValueError if unknown."""
    if name in (None, "", "auto"):
        return "auto"
    full = name if name.startswith(collective + "_") else f"{collective}_{name}"
    if full not in _BY_NAME or not full.startswith(collective + "_"):
        known = (names(collective) + shm_names(collective) + [a.name for a in NODE_ALGORITHMS.get(collective, [])]
                 + fused_names(collective))
        raise ValueError(f"unknown {collective} algorithm {name!r}; choose auto or one of "
                         + ", ".join(n[len(collective) + 1:] for n in known))
    return full


def decide(collective, requested, shape, topology, source="requested", checked=False, table=None):
    """(Algorithm, reason): ``requested`` when it applies to a call of ``shape`` on
    ``topology``, else the ``auto`` choice.

    ``source`` says where a named request came from (per call, per Comm, environment); the
    reason names it, or the table row, restriction or fallback that chose.  ``checked``: the
    cross-rank check is on, which lets ``auto`` take the fused form.  ``table``: the decision
    table's path, empty for the shipped one; a Comm passes the COLLECTIVES_TUNING it read when
    made, and None (tools without a Comm) reads it now.
    """
    name = resolve_name(collective, requested)
    fell_back = ""
    if name != "auto":
        algo = _BY_NAME[name]
        reason = algo.applies(shape, topology)
        if reason is None:
            return algo, f"{name} ({source})"
        log.info("collectives: %s does not apply (%s); falling back to auto", name, reason)
        fell_back = f"{name} ({source}) does not apply: {reason}; "
        if algo.node_aware and shape.count:
            for other in NODE_ALGORITHMS.get(collective, ()):
                if other.applies(shape, topology) is None:
                    return other, f"{fell_back}the node-aware {other.name} does"
    table = tuning.active(config.get("COLLECTIVES_TUNING") if table is None else table, row_name)
    skipped = []
    for row in table.lookup(collective, topology, shape.nbytes):
        algo = _BY_NAME[row.algorithm]
        if algo.fused is not None and not checked:
            why = "needs the cross-rank check on: the fused form is that check"
        elif algo.node_aware and not shape.count:
            why = "moves no data: the call has none"
        else:
            why = algo.applies(shape, topology)
        if why is None:
            return algo, (f"{fell_back}auto: {collective} {row.describe()} of {table.path}"
                          + "".join(f"; skipped {s}" for s in skipped))
        skipped.append(f"{row.describe()} ({row.algorithm}: {why})")
    algo = next(a for a in ALGORITHMS[collective] if a.applies(shape, topology) is None)
    return algo, (f"{fell_back}auto: no usable {collective} row of {table.path} for {topology.size} ranks and "
                  f"{shape.nbytes} bytes{''.join(f'; skipped {s}' for s in skipped)}; first applicable algorithm")


def decide_for(collective, per_call, per_comm, per_env, shape, topology, checked=False, table=None):
    """(Algorithm, reason) for a call: its ``algorithm=``, else the Comm's, else ``per_env``
    (the Comm's snapshot of COLLECTIVES_<COLLECTIVE>), else ``auto`` (``shape``, ``topology``,
    ``checked`` and ``table`` as for ``decide``)."""
    requested, source = "auto", "requested"
    for name, where in ((per_call, "per call"), (per_comm, "per Comm"),
                        (per_env, f"COLLECTIVES_{collective.upper()}")):
        if resolve_name(collective, name) != "auto":
            requested, source = name, where
            break
    return decide(collective, requested, shape, topology, source, checked, table)


def select(collective, requested, size, count, nbytes, uniform=True, checked=False):
    """The Algorithm to run for a call on one node of ``size`` ranks: ``requested`` when it
    applies, else the ``auto`` choice."""
    return decide(collective, requested, Shape(count, nbytes, uniform), Topology(size), checked=checked)[0]


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
