"""Checkpoints that survive the scheduler: durable, pickle-free, resumable at another rank count.

A checkpoint is one ``.npz`` file (NumPy arrays only, read with ``allow_pickle=False``) whose
``meta`` entry is a JSON string: format version, rank count, model and optimizer settings,
epoch, step, clock, the optimizer's integer state and the history table.  Rank 0 writes it to
``PATH.tmp``, fsyncs the file, renames it over ``PATH`` and fsyncs the directory, so ``PATH``
is always the previous complete checkpoint or the new one, whatever kills the job.

Which state is written depends on the synchronisation model:

* ``replicated`` (sync, ddp, fedavg, L-BFGS, Newton): every rank holds the same parameters
  and optimizer state, so rank 0 writes its own and nothing moves; any rank count resumes.
* ``per-rank`` (local, gossip): each rank's parameters and optimizer state, stacked; they
  come to rank 0 with buffer collectives (Gather of the sizes, Gatherv of the packed
  float64 vectors).  The same rank count resumes exactly; another resumes every rank from
  their average (what the next averaging step would do).
* ``ps``: the servers' parameter and optimizer shards, gathered the same way and written
  whole, in the ``replicated`` layout; any rank and server count resumes, each server
  taking its new shard.

``Checkpoints`` is a run's checkpoint I/O on top of these files: which state a step writes
(the parameters, the optimizer's ``state_dict``, the compression state of
collectives.train.sums, the progress), reading it back checked against the job, and restoring
it.  Every one of its calls is collective.

One file rather than a shard per rank: the rename of one file is the commit, with no
manifest to keep consistent with shard files, and replicated state (the common case) is
written by one rank without any transfer.  Integer state travels as float64 (exact below
2^53).  Nothing on this path pickles: sizes, flags and error messages move as buffers too.
"""
import io
import json
import os
import zipfile

import numpy as np
from mpi4py import MPI

from .errors import DataError

FORMAT = 1
# Exit status after a SIGTERM's checkpoint (EX_TEMPFAIL): "try again", for a batch script to requeue.
PREEMPTED = 75
# settings a checkpoint must share with the job resuming it (the state's meaning depends on them)
SETTINGS = ("optimizer", "sync", "lam", "batch", "lr", "momentum", "schedule", "adam_decay", "history",
            "local_steps", "compress", "seed")
PER_RANK = ("local", "gossip")


def layout(sync):
    """How a checkpoint of ``sync`` stores its state: 'replicated' or 'per-rank'."""
    return "per-rank" if sync in PER_RANK else "replicated"


def _fsync_dir(path):
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, write):
    """Call ``write(f)`` on a new file that then durably replaces ``path``; DataError if it cannot.

    The temporary file is fsynced before the rename and the directory after it, so a crash or
    power loss leaves either the old ``path`` or the new one, never a torn one.
    """
    tmp = f"{path}.tmp"
    data = io.BytesIO()
    write(data)
    data = data.getbuffer()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path)
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror or exc}") from exc


def agree(comm, error):
    """Raise on every rank of mpi4py ``comm`` the DataError of the lowest rank that has one.

    The pickle-free counterpart of errors.together: the failing rank and its message travel
    as buffers.
    """
    first = np.array([comm.Get_rank() if error else comm.Get_size()], np.int64)
    comm.Allreduce(MPI.IN_PLACE, first, op=MPI.MIN)
    root = int(first[0])
    if root == comm.Get_size():
        return
    text = str(error).encode() if comm.Get_rank() == root else b""
    size = np.array([len(text)], np.int64)
    comm.Bcast(size, root)
    msg = np.frombuffer(text, np.uint8).copy() if comm.Get_rank() == root else np.empty(int(size[0]), np.uint8)
    comm.Bcast(msg, root)
    if error is not None:
        raise error
    raise DataError(msg.tobytes().decode())


def anyone(comm, flag):
    """Whether ``flag`` is true on any rank of mpi4py ``comm`` (a buffer all-reduce)."""
    buf = np.array([int(bool(flag))], np.int64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
    return bool(buf[0])


def pack(state):
    """``state`` (name -> array or int) as one float64 vector, in name order."""
    parts = [np.asarray(state[k], np.float64).ravel() for k in sorted(state)]
    return np.concatenate(parts) if parts else np.zeros(0)


def unpack(vector, shapes):
    """The dict ``pack`` made, given name -> shape (``()`` for an integer)."""
    out, at = {}, 0
    for k in sorted(shapes):
        n = int(np.prod(shapes[k], dtype=np.int64))
        part = vector[at:at + n]
        out[k] = int(part[0]) if shapes[k] == () else part.reshape(shapes[k]).copy()
        at += n
    return out


def shapes_of(state):
    """name -> shape of ``state``'s entries, ``()`` for the integers."""
    return {k: () if isinstance(v, (int, np.integer)) else np.shape(v) for k, v in state.items()}


def gather(comm, state, shapes_at):
    """Every rank's ``state`` on rank 0 of mpi4py ``comm``, as a list (None elsewhere).

    ``shapes_at(rank)`` gives rank 0 the names and shapes of that rank's state (for unpacking).
    """
    mine = pack(state)
    counts = np.zeros(comm.Get_size(), np.int64)
    comm.Gather(np.array([mine.size], np.int64), counts, root=0)
    if comm.Get_rank() != 0:
        comm.Gatherv(mine, None, root=0)
        return None
    out = np.empty(int(counts.sum()))
    displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    comm.Gatherv(mine, [out, (counts, displs), MPI.DOUBLE], root=0)
    return [unpack(out[d:d + c], shapes_at(r)) for r, (d, c) in enumerate(zip(displs, counts))]


def save(path, meta, state):
    """Write ``state`` (name -> array; integers go into ``meta``) and the JSON ``meta`` to ``path``."""
    arrays = {k: np.asarray(v) for k, v in state.items() if not isinstance(v, (int, np.integer))}
    meta = dict(meta, format=FORMAT, ints={k: int(v) for k, v in state.items() if k not in arrays})
    write_file(path, lambda f: np.savez(f, meta=np.array(json.dumps(meta)), **arrays))


def load(path):
    """(meta, state) read from ``path`` without pickle; DataError naming the problem."""
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            state = {k: f[k] for k in f.files if k != "meta"}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a checkpoint of this job ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{path}: checkpoint format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                        f"this version reads {FORMAT}")
    state.update(meta.pop("ints"))
    return meta, state


def check(path, meta, options, model_size, model=None):
    """DataError if the checkpoint ``meta`` cannot resume a job with ``options`` (and ``model``,
    the model's class name, when given)."""
    if model is not None and meta.get("model") != model:
        raise DataError(f"{path} was written by model {meta.get('model')!r}, this job's is {model!r}")
    if meta["model_size"] != model_size:
        raise DataError(f"{path} holds {meta['model_size']} parameters, this model has {model_size}")
    for k in SETTINGS:
        if meta["options"].get(k) != options[k]:
            raise DataError(f"{path} was written with {k}={meta['options'].get(k)!r}, resuming with {options[k]!r}")


def check_state(path, state, expected):
    """DataError unless ``state`` holds every entry of ``expected`` (name -> shape, ``()`` for an
    integer), each array with that trailing shape (a per-rank layout stacks a leading axis).
    An entry this job holds empty is a history that grows (L-BFGS's S and Y): only its presence
    is checked."""
    for k, shape in expected.items():
        if k not in state:
            raise DataError(f"{path} holds no {k!r} state (written by another model or optimizer)")
        got = np.shape(state[k])
        if shape != () and 0 not in shape and got[len(got) - len(shape):] != tuple(shape):
            raise DataError(f"{path} holds {k} of shape {got}, this job's is {tuple(shape)}")


def rank_state(state, nranks, rank, size):
    """This rank's share of a ``per-rank`` checkpoint: its own row at the same rank count, else
    the average over the saved ranks (integers agree across ranks and are kept)."""
    if nranks == size:
        return {k: v if isinstance(v, int) else v[rank] for k, v in state.items()}
    return {k: v if isinstance(v, int) else v.mean(axis=0) for k, v in state.items()}


class Checkpoints:
    """The checkpoint I/O of the run whose Context is ``ctx``: every call is collective."""

    def __init__(self, ctx):
        self.ctx = ctx

    def resuming(self):
        """Whether to resume: --resume and the checkpoint exists on some rank."""
        ctx = self.ctx
        o = ctx.o
        return bool(o["resume"] and o["checkpoint"] and anyone(ctx.comm.comm, os.path.exists(o["checkpoint"])))

    def save_step(self, path, epoch, step, w, opt):
        """Write the checkpoint of this step to ``path``: ``w``, optimizer ``opt``'s state and the
        compression state, in the layout of the run's synchronisation."""
        ctx = self.ctx
        state = dict(w=w, **opt.state_dict(), **ctx.sums.compression.state_dict())
        if layout(ctx.o["sync"]) == "per-rank":
            states = gather(ctx.comm.comm, state, lambda r: shapes_of(state))
            if ctx.rank == 0:
                state = {k: v if isinstance(v, int) else np.stack([s[k] for s in states]) for k, v in state.items()}
        self.write(path, epoch, step, state, layout(ctx.o["sync"]))

    def write(self, path, epoch, step, state, layout):
        """Rank 0 writes ``state`` with this job's metadata; every rank learns whether it could.

        A state that is no longer finite (training diverged) is not written: the checkpoint
        already at ``path`` is the last good one, and every rank raises a DataError saying so.
        """
        ctx = self.ctx
        error = None
        if ctx.rank == 0 and not all(np.isfinite(v).all() for v in state.values()
                                     if isinstance(v, np.ndarray) and v.dtype.kind == "f"):
            error = DataError(f"{ctx.reporter.diverged()}; {path} was not overwritten")
        elif ctx.rank == 0:
            meta = dict(nranks=ctx.size, layout=layout, model=type(ctx.model).__name__,
                        model_size=ctx.model.size, options={k: ctx.o[k] for k in SETTINGS},
                        epoch=epoch, step=step, **ctx.progress.state_dict())
            try:
                save(path, meta, state)
            except DataError as exc:
                error = exc
        agree(ctx.comm.comm, error)

    def read(self, path, expected):
        """(meta, state) of the checkpoint at ``path``, checked against this job on every rank
        (``expected``: name -> shape of the state it must hold, see check_state); restores the
        run's progress from it.

        DataError on every rank when any rank cannot use it: resuming some ranks but not
        others would train on silently mixed states.
        """
        ctx = self.ctx
        meta = state = error = None
        try:
            meta, state = load(path)
            check(path, meta, ctx.o, ctx.model.size, type(ctx.model).__name__)
            check_state(path, state, expected)
        except DataError as exc:
            error = exc
        agree(ctx.comm.comm, error)
        ctx.progress.load_state_dict(meta)
        return meta, state

    def restore(self, path, opt):
        """(w, epoch, step) restored from ``path`` into ``opt`` and the compression state, at any rank count."""
        ctx = self.ctx
        meta, state = self.read(path, shapes_of(dict(w=np.zeros(ctx.model.size), **opt.state_dict())))
        if meta["layout"] == "per-rank":
            state = rank_state(state, meta["nranks"], ctx.rank, ctx.size)
        w = np.array(state.pop("w"), np.float64)
        ctx.sums.compression.load_state_dict(state, meta["nranks"])
        opt.load_state_dict(state)
        return w, meta["epoch"], meta["step"]
