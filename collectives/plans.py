"""Select and plan: a call's shape -> the algorithm that runs and its schedule, for the engine.

``make`` is what ``collectives._engine.Engine`` calls on a miss of its plan cache: it asks the
registry for the algorithm (per call, per Comm, the Comm's snapshot of
COLLECTIVES_<COLLECTIVE>, else ``auto``; node-aware rows when the Comm spans nodes of several
ranks), builds the algorithm's schedule (``registry.schedule``) and fits it to the call:
``late_copy`` moves an all-gather's copy of its own block as late as it can go,
``split_messages`` cuts messages into MPI's eager pieces, and ``leading`` lets an all-reduce
start its first step before the argument check's exchange.  The result is a ``Plan``, which
the engine keeps.  ``explain`` says why a call would run what it would.
"""
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .constants import SHM_FORMS
from .ops import DTYPES
from .registry import ALGORITHMS, Shape, Topology, choices, decide_for, schedule
from .schedule import ACC, COPY, IN, IRECV, ISEND, NONE, OUT, REDUCE, SENDRECV, TMP, WAITALL, blocks

_NO_STEPS = np.empty((0, 9), np.int64)  # a fused collective's: the checked exchange is all of it
# Whether the all-reduce's overlapped first step (``leading``) may post its receives before the
# checked exchange agrees.  A disagreeing peer may then send a longer message, which MPI
# truncates (MPI_ERR_TRUNCATE): MPICH keeps it within the receive buffer, but Open MPI's ob1
# writes a truncated rendezvous message past the buffer's end (in plain mpi4py at np=2, 8 KB
# into 4 KB and 160 KB into 80 KB overwrote everything after the buffer, over shared memory and
# over TCP), which corrupts the heap behind the scratch buffer.  Elsewhere only the sends start
# early and the receives are posted once the exchange agrees.  tests/test_check_overlap.py
# checks the MPI's truncation wherever this is on.
EARLY_RECEIVES = MPI.Get_library_version().startswith("MPICH")
# An all-gather that receives at most this many bytes sends its own block from the input and
# copies it into the result as late as the schedule allows (``late_copy``), not before it:
# copied first, its cache lines are dirty in this core's cache when the peer reads them, which
# costs more than the copy.  Receiving more, the copy at the end reads an input the received
# blocks have pushed out of a 2 MiB L2.  Measured: docs/results/collectives.md.
LATE_COPY_BYTES = 1 << 20


def topology(engine):
    """The registry.Topology of ``engine``'s communicator (collectives._engine.Engine)."""
    shared = engine.segment.cap if engine.segment is not None else 0
    return Topology(engine.size, engine.nodes.ranks_per_node(engine.size), shared, engine.fused_bytes)


def select(engine, collective, algorithm, count, nbytes, uniform=True):
    """(Algorithm, reason) for a call on ``engine`` (a collectives._engine.Engine)."""
    return decide_for(collective, algorithm, engine.algorithms.get(collective),
                      engine.settings.algorithms[collective], Shape(count, nbytes, uniform), topology(engine),
                      checked=engine.check, table=engine.settings.tuning)


def explain(engine, collective, count=0, dtype="float32", algorithm=None):
    """Why ``collective`` over ``count`` elements of ``dtype`` would run the algorithm it would,
    as "<algorithm>: <reason>" (the request, table row, restriction or fallback)."""
    if collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; one of {', '.join(ALGORITHMS)}")
    nbytes = count * np.dtype(dtype).itemsize
    algo, reason = select(engine, collective, algorithm, nbytes if collective == "bcast" else count, nbytes)
    return f"{algo.name}: {reason}"


def plan_args(algo, args, apart):
    """``args`` of ``algo``'s builder, with ``apart`` (IN and ACC do not overlap) if it takes it."""
    return (*args, apart) if algo.apart else args


class Plan(NamedTuple):
    """What the engine caches for one call shape."""

    steps: object        # the schedule's rows (collectives.schedule), empty but for a schedule's plan
    tmp_count: int       # the scratch it needs, in elements
    nreq: int            # the most requests its rows hold pending
    reads_in: bool       # it reads the caller's input itself (no copy into ACC first)
    name: str            # the algorithm
    index: int           # the algorithm's index in registry.choices (the agreement compares it)
    fused: int           # the exchange's payload kind of a fused form, else -1
    lead: int            # the leading rows that may start before the checked exchange (``leading``)
    node_aware: object   # the Algorithm when it runs node-aware phases, else None
    reason: str          # why it was chosen (COLLECTIVES_EXPLAIN, Comm.explain)
    shm: int = -1        # the form of a shared-memory algorithm (constants.SHM_FORMS), else -1


def make(engine, collective, algorithm, count, nbytes, uniform, args, op=None, dtype=-1, apart=False):
    """The Plan of one call shape on ``engine``: ``algorithm`` asked for, ``count`` elements of
    ``nbytes``, ``uniform`` (equal counts on every rank), the schedule builder's ``args``, the
    reduction's ``op`` and ``dtype`` codes (None and -1 for the others); ``apart``: the input
    and output do not overlap."""
    algo, reason = select(engine, collective, algorithm, count, nbytes, uniform)
    index = choices(collective).index(algo.name)
    if algo.fused is not None:
        return Plan(_NO_STEPS, 0, 0, False, algo.name, index, algo.fused, 0, None, reason)
    if algo.shm is not None:
        return Plan(_NO_STEPS, 0, 0, False, algo.name, index, -1, 0, None, reason, SHM_FORMS[algo.shm])
    if algo.node_aware:
        return Plan(_NO_STEPS, 0, 0, False, algo.name, index, -1, 0, algo, reason)
    steps, tmp_count, nreq = schedule(algo.name, engine.rank, engine.size, *plan_args(algo, args, apart))
    lead, copied = 0, False
    if collective == "allgather" and len(args[0]) > 1:
        blocks = args[0]
        if sum(blocks) - blocks[engine.rank] <= LATE_COPY_BYTES:
            steps, copied = late_copy(steps, sum(blocks[:engine.rank]), blocks[engine.rank])
    # The all-reduce alone overlaps the checked exchange, above the fused sizes whose exchange
    # is the whole collective; the NumPy twin of the executor runs no overlap, and on a shared
    # segment the check is a phase there, cheaper than any overlap.
    overlaps = (collective == "allreduce" and nbytes > engine.fused_bytes and not engine.pure
                and engine.segment is None)
    # Messages cut into eager pieces (collectives.eager), on one node; not the overlapped
    # all-reduce's under the check, whose leading sends are synchronous: a handshake each.
    if engine.eager and not engine.nodes.spans and not (overlaps and engine.check):
        steps, nreq = split_messages(steps, 1 if dtype is None or dtype < 0 else np.dtype(DTYPES[dtype]).itemsize,
                                     engine.eager, engine.split_most)
    if overlaps:
        steps, lead, copied = leading(steps, apart, 0 if algo.reads_in or not apart else count,
                                      EARLY_RECEIVES)
    return Plan(steps, tmp_count, nreq, algo.reads_in or copied, algo.name, index, -1, lead, None, reason)


def split_messages(steps, itemsize, eager, most):
    """(steps, nreq) with every message of more than ``eager`` bytes and at most ``most`` split
    into near-equal pieces of at most ``eager`` bytes (whole elements of ``itemsize``), all
    in flight at once, so that each piece takes MPI's eager path (collectives.eager);
    ``nreq``, the most requests the new steps hold pending.

    A send-receive row met with no request pending becomes its receives, its sends and a
    wait; with requests pending (a wait would complete them early) it becomes send-receive
    rows of one piece each, in order.  A nonblocking row becomes its pieces.  Both ends of a
    message give it the same count, so they cut it at the same places, and MPI matches the
    pieces in order.  ``eager`` 0 splits nothing.
    """
    steps = np.asarray(steps)
    per = eager // itemsize
    if per < 1 or not len(steps):
        return steps, _pending_most(steps)

    def split(cnt, peer):
        if peer == NONE or cnt * itemsize <= eager or cnt * itemsize > most:
            return [(0, cnt)]
        counts, displs = blocks(cnt, -(-cnt // per))
        return list(zip(displs, counts))

    out, pending = [], 0
    for row in steps.tolist():
        kind, ab, ao, ac, ap, bb, bo, bc, bp = row
        sends, recvs = split(ac, ap), split(bc, bp)
        if kind == SENDRECV and (len(sends) > 1 or len(recvs) > 1):
            if not pending:
                out += [[IRECV, NONE, 0, 0, NONE, bb, bo + o, c, bp] for o, c in recvs if bp != NONE]
                out += [[ISEND, ab, ao + o, c, ap, NONE, 0, 0, NONE] for o, c in sends if ap != NONE]
                out.append([WAITALL] + [NONE, 0, 0, NONE] * 2)
            else:
                for k in range(max(len(sends), len(recvs))):
                    so, sc = sends[k] if k < len(sends) and ap != NONE else (0, 0)
                    ro, rc = recvs[k] if k < len(recvs) and bp != NONE else (0, 0)
                    out.append([SENDRECV, ab if sc else NONE, ao + so, sc, ap if sc else NONE,
                                bb if rc else NONE, bo + ro, rc, bp if rc else NONE])
        elif kind == ISEND and len(sends) > 1:
            out += [[ISEND, ab, ao + o, c, ap, NONE, 0, 0, NONE] for o, c in sends]
            pending += len(sends)
        elif kind == IRECV and len(recvs) > 1:
            out += [[IRECV, NONE, 0, 0, NONE, bb, bo + o, c, bp] for o, c in recvs]
            pending += len(recvs)
        else:
            out.append(row)
            pending = 0 if kind == WAITALL else pending + (kind in (ISEND, IRECV))
    new = np.array(out, np.int64).reshape(-1, 9)
    return new, _pending_most(new)


def _pending_most(steps):
    """The most requests ``steps`` hold pending at once (the executor's room besides a row's own)."""
    most = pending = 0
    for kind in np.asarray(steps)[:, 0].tolist() if len(steps) else ():
        pending = 0 if kind == WAITALL else pending + (kind in (ISEND, IRECV))
        most = max(most, pending)
    return most


def late_copy(steps, offset, count):
    """(steps, copied) for an all-gather whose own block (``count`` elements at ``offset`` of
    ACC) the caller would copy from IN before the schedule (LATE_COPY_BYTES says when): each row
    that sends exactly that block sends it from IN instead, and the copy moves to just before
    the first row that reads any of the block from ACC otherwise (a larger send, say), or to
    the end.  ``copied``: the schedule now reads IN and copies the block itself, the caller
    copies nothing; False (steps unchanged) when no send moves or a row receives into the
    block, which no all-gather does.
    """
    steps = np.asarray(steps)
    end = offset + count
    if not len(steps) or not count:
        return steps, False

    def touches(buf, off, cnt):
        return buf == ACC and off < end and off + cnt > offset

    out, at, moved = steps.copy(), len(steps), False
    for i, r in enumerate(out):
        writes = (r[0] in (SENDRECV, IRECV) and touches(r[5], r[6], r[7])) or (
            r[0] in (COPY, REDUCE) and touches(r[1], r[2], r[3]))
        if writes:
            return steps, False
        if at < len(steps):
            continue
        if r[0] in (SENDRECV, ISEND) and tuple(r[1:4]) == (ACC, offset, count):
            r[1], r[2], moved = IN, 0, True
        elif (r[0] in (SENDRECV, ISEND) and touches(r[1], r[2], r[3])) or (
                r[0] == COPY and touches(r[5], r[6], r[3])) or (
                r[0] == REDUCE and (touches(r[4], r[8], r[3]) or touches(r[5], r[6], r[3]))):
            at = i
    if not moved:
        return steps, False
    copy = [COPY, ACC, offset, count, NONE, IN, 0, 0, NONE]
    return np.insert(out, at, copy, axis=0), True


def leading(steps, apart, copy, receives=True):
    """(steps, lead, copied) for an all-reduce whose exchange runs after its first ``lead``
    rows, receives and sends, have started (collectives.agreement's "Overlap").

    A first send-receive row is split into its receive, send and wait rows.  Without
    ``receives`` (EARLY_RECEIVES) the first rows' sends move ahead of their receives and lead
    alone.  The leading rows count only if no receive lands in a buffer carrying input (the
    all-reduce's ACC and OUT do not when ``apart``).  ``copy`` > 0: the caller would copy
    that many elements from IN to ACC before the schedule; the copy becomes a row after the
    leading ones, which send from IN instead and receive into TMP only, so that nothing is
    written before the exchange agrees (``copied``: the schedule itself then reads IN).
    """
    steps = np.asarray(steps)
    if len(steps) and steps[0, 0] == SENDRECV:
        r = steps[0]
        rows = [row for row, used in (([IRECV, NONE, 0, 0, NONE, *r[5:]], r[8] != NONE),
                                      ([ISEND, *r[1:5], NONE, 0, 0, NONE], r[4] != NONE)) if used]
        steps = np.concatenate([np.array(rows + [[WAITALL] + [NONE, 0, 0, NONE] * 2], steps.dtype),
                                steps[1:]])
    lead = 0
    while lead < len(steps) and steps[lead, 0] in (ISEND, IRECV):
        lead += 1
    if not receives:
        head = steps[:lead]
        sends = head[:, 0] == ISEND
        steps = np.concatenate([head[sends], head[~sends], steps[lead:]])
        lead = int(sends.sum())
    safe = (TMP, ACC, OUT) if apart and not copy else (TMP,)
    if lead == 0 or any(r[0] == IRECV and r[5] not in safe for r in steps[:lead]):
        return steps, 0, False
    if copy:
        steps = steps.copy()
        sends = (steps[:lead, 0] == ISEND) & (steps[:lead, 1] == ACC)
        steps[:lead, 1][sends] = IN
        steps = np.insert(steps, lead, [COPY, ACC, 0, copy, NONE, IN, 0, 0, NONE], axis=0)
    return steps, lead, bool(copy)


__all__ = ["EARLY_RECEIVES", "LATE_COPY_BYTES", "Plan", "explain", "late_copy", "leading", "make", "plan_args",
           "select", "split_messages", "topology"]
