"""How a Comm's collectives run: algorithm choice, scratch, the executors, MPI's own call.

A job is a function of no arguments that runs one collective to completion; the builders in
``collectives.jobs`` make them.  ``run`` executes a job at once, or behind the nonblocking
ones still pending on the progress thread; ``start`` hands it to that thread and returns a
Request.  ``execute`` runs a planned schedule in the Cython executor (``_executor.execute``,
without the GIL) or, under COLLECTIVES_PUREPYTHON=1 or without the extension, in
``schedule.run_python``; a native failure marks the Comm unusable.  ``plan_fast`` is what
the fast path (``_engine.Fast``) calls to plan a call shape it has not cached.
``choose`` records the choice in ``last_algorithm`` (``explain`` gives the reason, and
COLLECTIVES_EXPLAIN=1 prints it per call).  ``native_job`` delegates a call no algorithm
covers to mpi4py's method on the private communicator, where it keeps its place in the
order of the Comm's collectives.
"""
import sys

import numpy as np
from mpi4py import MPI

from . import kernels
from .agreement import agree
from .exchange import FUSED_BYTES, SCHEDULE_TAG
from .nonblocking import Progress, completed
from .ops import DTYPES, OP_NAMES, dtype_code, supports
from .registry import ALGORITHMS, choices, decide_for, log, plan
from .schedule import ACC, COPY, IN, IRECV, ISEND, NONE, OUT, REDUCE, SENDRECV, TMP, WAITALL, run_python
from .watchdog import StallError, call_number, stalled

try:
    from ._executor import ScheduleError, execute as _native_execute
except ImportError:
    _native_execute = None

NATIVE = _native_execute is not None and not kernels.PUREPYTHON
# Whether the all-reduce's overlapped first step (``leading``) may post its receives before the
# checked exchange agrees.  A disagreeing peer may then send a longer message, which MPI
# truncates (MPI_ERR_TRUNCATE): MPICH 5.0.2 keeps it within the receive buffer, but Open MPI
# 5.0.11's ob1 writes a truncated rendezvous message past the buffer's end (in plain mpi4py
# at np=2, 8 KB into 4 KB and 160 KB into 80 KB overwrote everything after the buffer, over
# shared memory and over TCP; not over shared memory with OMPI_MCA_smsc=^cma).  That
# corrupted the heap behind the scratch buffer and the next call aborted.  Elsewhere only the
# sends start early and the receives are posted once the exchange agrees.
# tests/test_check_overlap.py checks the MPI's truncation wherever this is on.
EARLY_RECEIVES = MPI.Get_library_version().startswith("MPICH")
# An all-gather that receives at most this many bytes sends its own block from the input and
# copies it into the result as late as the schedule allows (``late_copy``), not before it.
# Copied first, its cache lines are dirty in this core's cache when the peer reads them, which
# costs more than the copy: at np=2, default Comm against the same with the copy first, three
# launches, 1.45-1.47x at 64 KiB in all, 1.68-1.74x at 256 KiB, 1.35-1.38x at 1 MiB,
# 1.20-1.23x at 2 MiB (1 MiB received), equal at 4 MiB.  Receiving more, the copy at the end
# reads an input the received blocks have pushed out of the 2 MiB L2: at np=4 the ring lost
# 4% at 2 MiB (1.5 MiB received) and 6-18% at 4 MiB.
LATE_COPY_BYTES = 1 << 20

# One tag per collective on the private communicator.
TAG = {name: SCHEDULE_TAG + i for i, name in enumerate(ALGORITHMS)}
BYTE = dtype_code(np.uint8)
_NO_STEPS = np.empty((0, 9), np.int64)  # a fused collective's: the checked exchange is all of it


def as_bytes(arr):
    """``arr``'s memory as a flat uint8 array (an empty one for an empty ``arr``)."""
    return arr.view(np.uint8) if arr.size else np.empty(0, np.uint8)


def choose(comm, collective, algorithm, count, nbytes, uniform=True):
    """The Algorithm for this call: per call, then per Comm, then environment, then ``auto``."""
    algo, reason = decide_for(collective, algorithm, comm.algorithms.get(collective),
                              comm._env.algorithms[collective], comm.size, count, nbytes, uniform,
                              checked=comm.check, spans=spans(comm), table=comm._env.tuning)
    comm.last_algorithm = algo.name
    if comm._env.explain:
        explain_line(comm, collective, f"{nbytes} B -> {algo.name}: {reason}")
    return algo


def explain_line(comm, collective, text):
    """Print COLLECTIVES_EXPLAIN's line for one call."""
    print(f"[collectives explain] rank {comm.rank}/{comm.size} {collective} {text}",
          file=sys.stderr, flush=True)


def explain(comm, collective, count=0, dtype="float32", algorithm=None):
    """Why ``collective`` over ``count`` elements of ``dtype`` on ``comm`` would run the algorithm
    it would, as "<algorithm>: <reason>" (the request, table row, restriction or fallback)."""
    if collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; one of {', '.join(ALGORITHMS)}")
    nbytes = count * np.dtype(dtype).itemsize
    algo, reason = decide_for(collective, algorithm, comm.algorithms.get(collective),
                              comm._env.algorithms[collective], comm.size,
                              nbytes if collective == "bcast" else count, nbytes, checked=comm.check,
                              spans=spans(comm), table=comm._env.tuning)
    return f"{algo.name}: {reason}"


def spans(comm):
    """Whether ``comm`` is known to span several nodes (its first Allreduce finds out)."""
    return comm._nodes is not None and comm._nodes.spans


def buffer(comm, purpose, nbytes):
    """A reused, pre-touched scratch buffer of at least ``nbytes`` for ``purpose``."""
    buf = comm._scratch.get(purpose)
    if buf is None or buf.nbytes < nbytes:
        buf = np.zeros(max(nbytes, 64), np.uint8)
        comm._scratch[purpose] = buf
    return buf[:nbytes]


def plan_args(algo, args, apart):
    """``args`` of ``algo``'s builder, with ``apart`` (IN and ACC do not overlap) if it takes it."""
    return (*args, apart) if algo.apart else args


def execute(comm, algo, args, acc, inp, dtype, op, collective, out=None):
    """Run ``algo``'s schedule for ``args`` on ``acc`` (input ``inp``, output block ``out``) in
    this process's executor."""
    steps, tmp_count, nreq = plan(algo.name, comm.rank, comm.size,
                                  *plan_args(algo, args, inp is not None and inp is not acc))
    execute_steps(comm, steps, tmp_count, nreq, acc, inp, dtype, op, TAG[collective],
                  f"{collective} ({algo.name})", out)


def execute_steps(comm, steps, tmp_count, nreq, acc, inp, dtype, op, tag, name, out=None):
    """Run planned ``steps`` on ``tag``, watched when ``comm.timeout`` is set; a failure or
    a stall marks the Comm unusable (a stall aborts the job in the watchdog's abort mode)."""
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    tmp = buffer(comm, "tmp", tmp_count * itemsize) if tmp_count else None
    try:
        if NATIVE:
            try:
                _native_execute(comm._coll, steps, acc, tmp, inp, dtype, op, tag, nreq, name,
                                comm.timeout, out)
            except ScheduleError as exc:
                comm._broken = str(exc)
                raise
        else:
            bufs = [None if b is None else as_bytes(b) for b in (acc, tmp, inp, out)]
            run_python(comm._coll, steps, bufs, dtype, op, tag, comm.timeout, name)
    except StallError as exc:
        stalled(comm, exc, call_number(comm, False))
        raise


def plan_fast(comm, collective, algorithm, count, nbytes, uniform, args, op=None, dtype=None,
              apart=False):
    """What the fast path caches for one call shape: (steps, tmp_count, nreq, reads_in, name,
    index of the algorithm, payload kind of a fused one or -1, leading rows that may start
    before the checked exchange); ``op`` and ``dtype`` codes of a reduction are checked;
    ``apart``: the input and output do not overlap."""
    if op is not None and not supports(OP_NAMES[op], DTYPES[dtype]):
        raise TypeError(f"{collective}: op {OP_NAMES[op]} is not defined on {np.dtype(DTYPES[dtype])}")
    algo = choose(comm, collective, algorithm, count, nbytes, uniform)
    index = choices(collective).index(algo.name)
    if algo.fused is not None:
        return (_NO_STEPS, 0, 0, False, algo.name, index, algo.fused, 0)
    steps, tmp_count, nreq = plan(algo.name, comm.rank, comm.size, *plan_args(algo, args, apart))
    lead, copied = 0, False
    # Fast.allreduce alone overlaps the checked exchange, above the fused sizes whose exchange
    # is the whole collective.
    if collective == "allreduce" and nbytes > FUSED_BYTES:
        steps, lead, copied = leading(steps, apart, 0 if algo.reads_in or not apart else count,
                                      EARLY_RECEIVES)
    elif collective == "allgather" and len(args[0]) > 1:
        blocks = args[0]
        if sum(blocks) - blocks[comm.rank] <= LATE_COPY_BYTES:
            steps, copied = late_copy(steps, sum(blocks[:comm.rank]), blocks[comm.rank])
    return (steps, tmp_count, nreq, algo.reads_in or copied, algo.name, index, -1, lead)


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


def native_job(comm, collective, why, method, *args):
    """A job running mpi4py's ``method(*args)`` on the private communicator."""
    log.info("%s: %s; native MPI call", method, why)
    comm.last_algorithm = "native"
    if comm._env.explain:
        explain_line(comm, collective, f"-> native: {why}; delegated to MPI's {method}")
    call = getattr(comm._coll, method)

    def job():
        if comm.check:
            agree(comm, collective, "native")
        call(*args)
    return job


def _usable(comm):
    if comm._broken is not None:
        raise RuntimeError(f"collectives.Comm is unusable: {comm._broken}")


def _counted(comm, job):
    """``job``, counting itself among the Comm's collectives when it starts (the watchdog's call
    numbers; jobs start in the order they were issued)."""
    def counted():
        comm._jobs += 1
        job()
    return counted


def run(comm, job):
    """Run ``job`` now, or after the nonblocking collectives still pending on ``comm``."""
    _usable(comm)
    job = _counted(comm, job)
    if comm._progress is not None and comm._progress.busy():
        comm._progress.submit(job).wait()
    else:
        job()


def start(comm, job):
    """Start ``job`` on ``comm``'s progress thread; return its Request."""
    _usable(comm)
    job = _counted(comm, job)
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        # A progress thread would call MPI beside the caller, which needs THREAD_MULTIPLE.
        log.info("collectives: MPI thread level below THREAD_MULTIPLE; nonblocking "
                 "collectives complete before they return")
        return completed(job)
    if comm._progress is None:
        comm._progress = Progress()
    return comm._progress.submit(job)


__all__ = ["BYTE", "NATIVE", "TAG", "as_bytes", "buffer", "choose", "execute", "execute_steps",
           "explain", "native_job", "plan_fast", "run", "start"]
