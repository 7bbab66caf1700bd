"""A timeline of every rank: where a job's time goes, in Chrome's Trace Event Format.

Turn it on with ``COLLECTIVES_TIMELINE=trace.json`` or ``Comm(comm, timeline="trace.json")``
(every rank alike): every collective call of every Comm of the process is recorded, with
the collective, the algorithm that ran, its bytes and count, and its phases: the argument
``check``, the ``transfer`` (the schedule, or a fused call's exchange, which carries the
data) and each ``wait`` inside them, with the rank waited for.  ``python -m collectives
train --timeline trace.json`` adds the training loop's phases: gradient, communication,
update, evaluation, checkpoint (and the wait for the slowest rank before an exchange).

Each rank records into a ring of the latest RECORDS records (collectives._timeline), a file
mapped into memory, ``trace.rank<R>.ring``: its records are on disk even if the launcher
kills the rank.  When a rank ends, normally or by an uncaught error (before collectives.abort
calls MPI_Abort), it writes ``trace.rank<R>.json``, its events in the Trace Event Format with
its clock aligned to rank 0's at start-up (a few round trips, the least delayed kept).  When
the job ends normally rank 0 merges the ranks' files into ``trace.json``, one track per rank,
which Perfetto and chrome://tracing open; ``collectives-bench timeline merge trace.json``
does the same by hand (from the rings of ranks that were killed), and
``collectives-bench timeline trace.json -o timeline.png`` draws it: ranks as rows, time
across, one colour per phase.
"""
import atexit
import contextlib
import glob
import json
import os
import re
import time

from . import abort
from ._timeline import KINDS, Recorder, read
from .agreement import COLLECTIVE_INDEX
from .constants import TAG_ALIGN
from .registry import ALGORITHMS, choices

# Records each rank keeps: the latest ones (64 bytes each).
RECORDS = 1 << 18
# The training loop's phases, as PHASE records name them.
PHASES = ("gradient", "communication", "update", "evaluation", "checkpoint", "wait")
# Seconds rank 0 waits at the end of a job for the other ranks' files before merging them.
MERGE_WAIT_S = 10.0
ROUNDS = 8

_recorder = None
_path = None
_world_rank = 0


def ring_path(path, rank):
    """The ring file of ``rank`` for the timeline at ``path``."""
    return f"{_stem(path)}.rank{rank}.ring"


def rank_path(path, rank):
    """The trace file ``rank`` writes for the timeline at ``path``."""
    return f"{_stem(path)}.rank{rank}.json"


def _stem(path):
    root, ext = os.path.splitext(os.fspath(path))
    return root if ext == ".json" else os.fspath(path)


def align(coll):
    """(offset, epoch) of this rank on mpi4py communicator ``coll``: what to add to this
    rank's monotonic clock to read rank 0's (the round trip of ROUNDS with the least delay),
    and rank 0's clock when the timeline started.  Collective over ``coll``."""
    rank, size, now = coll.Get_rank(), coll.Get_size(), time.monotonic
    offset, epoch = 0.0, None
    if rank == 0:
        epoch = now()
        for r in range(1, size):
            for _ in range(ROUNDS):
                coll.recv(source=r, tag=TAG_ALIGN)
                coll.send(now(), dest=r, tag=TAG_ALIGN)
    else:
        best = float("inf")
        for _ in range(ROUNDS):
            t0 = now()
            coll.send(None, dest=0, tag=TAG_ALIGN)
            root = coll.recv(source=0, tag=TAG_ALIGN)
            t1 = now()
            if t1 - t0 < best:
                best, offset = t1 - t0, root - (t0 + t1) / 2
    return offset, coll.bcast(epoch, root=0)


def recorder(path, coll):
    """This process's Recorder, started by the first call with a ``path`` (collective over
    mpi4py communicator ``coll``: the clocks are aligned on it); once started, every Comm
    records into it; None while no timeline is on."""
    global _recorder, _path, _world_rank
    if _recorder is None and not path:
        return None
    if _recorder is None:
        from mpi4py import MPI

        _world_rank = MPI.COMM_WORLD.Get_rank()
        offset, epoch = align(coll)
        _path = os.path.abspath(os.fspath(path))
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        _recorder = Recorder(ring_path(_path, _world_rank), _world_rank, MPI.COMM_WORLD.Get_size(), RECORDS,
                             offset, epoch)
        atexit.register(_at_exit)
        abort.BEFORE_ABORT.append(flush)  # the other ranks' rings are on disk; this rank's trace file goes first
    return _recorder


@contextlib.contextmanager
def phase(name):
    """Record the block as the training phase ``name`` (one of PHASES), if a timeline is on."""
    if _recorder is None:
        yield
        return
    t0 = time.monotonic()
    try:
        yield
    finally:
        _recorder.add(PHASE, PHASES.index(name), -1, t0, time.monotonic())


def flush():
    """Write this rank's trace file now (before an abort)."""
    if _recorder is not None:
        write(ring_path(_path, _world_rank), rank_path(_path, _world_rank))


def _at_exit():
    flush()
    # The trace file holds what the ring did; the ring is only for a rank that is killed.
    os.unlink(ring_path(_path, _world_rank))
    if _world_rank == 0:
        files = [rank_path(_path, r) for r in range(_recorder.size)]
        deadline = time.monotonic() + MERGE_WAIT_S
        while time.monotonic() < deadline and not all(os.path.exists(f) for f in files):
            time.sleep(0.05)
        if all(os.path.exists(f) for f in files):
            merge(files, _path)


_COLLECTIVES = list(COLLECTIVE_INDEX)
_KINDS = {code: name for name, code in KINDS.items()}
CALL, TRANSFER, WAIT, PHASE = KINDS["call"], KINDS["transfer"], KINDS["wait"], KINDS["phase"]


def _algorithm(collective, index):
    if index < 0:
        return None
    return choices(collective)[index] if collective in ALGORITHMS else collective


def events(ring):
    """The Trace Event Format events of the ring file ``ring``: per rank (pid), the
    collectives on thread 0 with their phases and waits nested in them, the training phases
    on thread 1; microseconds from rank 0's start."""
    header, records = read(ring)
    rank, offset, epoch = header["rank"], header["offset"], header["epoch"]
    out = [{"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
           {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
           {"ph": "M", "name": "thread_name", "pid": rank, "tid": 0, "args": {"name": "collectives"}},
           {"ph": "M", "name": "thread_name", "pid": rank, "tid": 1, "args": {"name": "training"}}]
    for t0, t1, kind, code, algorithm, nbytes, count, peer in records.tolist():
        kind, code = int(kind), int(code)
        ts = round((t0 + offset - epoch) * 1e6, 3)
        dur = round(max(t1 - t0, 0.0) * 1e6, 3)
        if kind == PHASE:
            out.append({"name": PHASES[code], "cat": "training", "ph": "X", "ts": ts, "dur": dur, "pid": rank,
                        "tid": 1})
            continue
        collective = _COLLECTIVES[code]
        event = {"name": collective if kind == CALL else _KINDS[kind], "cat": _KINDS[kind], "ph": "X",
                 "ts": ts, "dur": dur, "pid": rank, "tid": 0}
        if kind == WAIT:
            event["args"] = {"collective": collective, "waited_for": int(peer)}
        else:
            event["args"] = {"collective": collective, "algorithm": _algorithm(collective, int(algorithm))}
            if kind in (CALL, TRANSFER):
                event["args"].update(bytes=int(nbytes), count=int(count))
        out.append(event)
    # Within a thread, a viewer nests events by time: the enclosing ones first at equal starts.
    out[4:] = sorted(out[4:], key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    return header, out


def write(ring, out):
    """Write the trace file ``out`` (JSON object format) of the ring file ``ring``."""
    header, trace = events(ring)
    data = {"traceEvents": trace, "displayTimeUnit": "ms",
            "otherData": {"rank": header["rank"], "size": header["size"], "records": header["written"],
                          "dropped": max(header["written"] - header["capacity"], 0),
                          "clock_offset_s": header["offset"]}}
    tmp = f"{out}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, out)


def load(path):
    """The events of a trace file, or of a ring file (a rank that was killed)."""
    if os.fspath(path).endswith(".ring"):
        return events(path)[1]
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def inputs(path):
    """The rank files of the timeline at ``path``: each rank's trace file, else its ring."""
    found = {}
    for f in glob.glob(f"{glob.escape(_stem(path))}.rank*.ring") + glob.glob(f"{glob.escape(_stem(path))}.rank*.json"):
        rank = int(re.search(r"\.rank(\d+)\.(ring|json)$", f).group(1))
        if f.endswith(".json") or rank not in found:
            found[rank] = f
    return [found[r] for r in sorted(found)]


def merge(files, out):
    """Merge rank files (trace files or rings) into the trace file ``out``: one track per rank."""
    trace = [e for f in files for e in load(f)]
    tmp = f"{out}.tmp"
    with open(tmp, "w") as f:
        json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)
    os.replace(tmp, out)
    return out


__all__ = ["PHASES", "RECORDS", "align", "events", "flush", "inputs", "load", "merge", "phase", "rank_path",
           "recorder", "ring_path", "write"]
