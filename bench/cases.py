"""The benchmark's cases: per collective, the buffers, the call and the exact expected result, and
the contenders timed on it (native MPI, our ``default`` and ``auto`` rows, every algorithm by name,
compressed all-reduces).

Inputs are small integers (multiples of 2**-10 below 2 in magnitude for floats), so every
summation order gives the same result exactly, and a case's ``check`` counts the elements that
differ from it.  The timing of the calls is in harness.py, and of their nonblocking forms
(``Case.started``) in nonblocking.py.
"""
import contextlib
import functools
import importlib.util
import os

import numpy as np
from mpi4py import MPI

import collectives
from collectives import compression
from collectives.registry import SHM, Shape, Topology

# The neighbourhood collectives run on a periodic two-dimensional grid (MPI.Compute_dims):
# four neighbours per rank, below and above in each dimension, as a stencil's halo exchange
# has; at 2 ranks one dimension has size 2 and the other 1, MPI's edge cases of a rank that
# is its neighbour on both sides.
GRID_DIMS = 2
NEIGHBOURS = 2 * GRID_DIMS
# Per collective: the mpi4py method (ours has the same name), the nccl-tests bus-bandwidth
# factor, and the blocks a vector splits into, as a function of p (so counts are their
# multiples): p where every rank holds 1/p of the data, a neighbourhood's size, else 1.
SPEC = {
    "allreduce": ("Allreduce", lambda p: 2 * (p - 1) / p, lambda p: 1),
    "bcast": ("Bcast", lambda p: 1.0, lambda p: 1),
    "allgather": ("Allgather", lambda p: (p - 1) / p, lambda p: p),
    "reduce_scatter": ("Reduce_scatter_block", lambda p: (p - 1) / p, lambda p: p),
    "reduce": ("Reduce", lambda p: 1.0, lambda p: 1),
    "alltoall": ("Alltoall", lambda p: (p - 1) / p, lambda p: p),
    "alltoallv": ("Alltoallv", lambda p: (p - 1) / p, lambda p: p),
    "gather": ("Gather", lambda p: (p - 1) / p, lambda p: p),
    "scatter": ("Scatter", lambda p: (p - 1) / p, lambda p: p),
    "barrier": ("Barrier", lambda p: 0.0, lambda p: 1),
    "scan": ("Scan", lambda p: 1.0, lambda p: 1),
    "exscan": ("Exscan", lambda p: 1.0, lambda p: 1),
    "neighbor_allgather": ("Neighbor_allgather", lambda p: 1.0, lambda p: NEIGHBOURS),
    "neighbor_alltoall": ("Neighbor_alltoall", lambda p: 1.0, lambda p: NEIGHBOURS),
}
REDUCING = ("allreduce", "reduce_scatter", "reduce", "scan", "exscan")
ROOTED = ("bcast", "reduce", "gather", "scatter")
NEIGHBOURHOOD = ("neighbor_allgather", "neighbor_alltoall")
# In place has no meaning for a broadcast (always in place) or a barrier, and MPI has none for
# the neighbourhood collectives.
NO_IN_PLACE = ("bcast", "barrier") + NEIGHBOURHOOD
# The v-form's algorithms are its collective's, chosen for counts that differ per rank.
REGISTERED = {"alltoallv": "alltoall"}
PERIOD, HALF, SCALE = 4093, 2046, 2.0 ** -10
DTYPES = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64"}
TYPE_NAMES = dict(DTYPES, uint8="byte")
OPS = {"sum": (MPI.SUM, np.add), "max": (MPI.MAX, np.maximum), "min": (MPI.MIN, np.minimum)}

NO_MMAP = bool(os.environ.get("MALLOC_MMAP_THRESHOLD_"))
MALLOC = "no-mmap" if NO_MMAP else "glibc"
NATIVE_LABEL = "native[no-mmap]" if NO_MMAP else "native"
COMPRESS_PREFIX = "compress:"
# The rows that measure what users get, beside native and the named algorithms.
DEFAULT, AUTO = "default", "auto"


def _data(base, rank, dtype):
    """Rank ``rank``'s input: small integers (scaled by 2**-10 for floats), so every summation
    order gives the same result exactly; varied, not periodic in blocks."""
    ints = ((base + 5 * rank) % PERIOD) - HALF
    if np.dtype(dtype).kind == "f":
        return (ints * SCALE).astype(dtype)
    return ints.astype(dtype)


def alltoallv_counts(p, part):
    """The Alltoallv case's block counts: element (i, j) is what rank i sends to j, about
    ``part`` and varying by half of it either way; symmetric, so a rank's send counts are its
    receive counts, as MPI.IN_PLACE needs."""
    i, j = np.indices((p, p))
    return part + ((i + j) % 3 - 1) * (part // 2)


def workspace(comm, collective):
    """The communicator ``collective`` runs on: ``comm``, or for a neighbourhood collective a
    new periodic grid over its ranks (GRID_DIMS dimensions), which the caller frees."""
    if collective not in NEIGHBOURHOOD:
        return comm
    return comm.Create_cart(MPI.Compute_dims(comm.size, GRID_DIMS), periods=[True] * GRID_DIMS)


@contextlib.contextmanager
def handles(comm, collective):
    """The communicators a sweep of ``collective`` times its contenders on, freed after: native
    (``comm``, or the grid ``workspace`` makes), default (``collectives.Comm`` over it, checked)
    and auto (unchecked, which also runs the algorithms named)."""
    work = workspace(comm, collective)
    default, ours = collectives.Comm(work), collectives.Comm(work, check=False)
    try:
        yield {"native": work, DEFAULT: default, AUTO: ours}
    finally:
        ours.Free()
        default.Free()
        if work is not comm:
            work.Free()


def _poison(arr):
    arr.fill(np.nan if arr.dtype.kind == "f" else np.iinfo(arr.dtype).min)


class Case:
    """Buffers, calls and exact expected result of ``collective`` at ``count`` elements on ``comm``.

    ``count`` is the element count of the whole vector (the reduced vector, the gathered or
    scattered whole, a rank's send buffer of an all-to-all or a neighbourhood's receive buffer;
    an Alltoallv's blocks vary around count / p, alltoallv_counts); ``in_place`` passes
    MPI.IN_PLACE where MPI allows it.  A neighbourhood collective's ``comm`` is the grid
    ``workspace`` makes.
    """

    def __init__(self, collective, count, comm, dtype="float32", op="sum", in_place=False, root=0):
        p, r = comm.size, comm.rank
        if in_place and collective in NO_IN_PLACE:
            raise ValueError(f"{collective}: no in-place variant")
        method = SPEC[collective][0]
        self.dtype = np.dtype(dtype)
        # An Alltoallv rank sends up to 1.5 times ``count``.
        idx = np.arange(count * 2 if collective == "alltoallv" else count, dtype=np.int64)
        base = (idx * 7 + (idx >> 12) * 3) % PERIOD
        part = count // SPEC[collective][2](p)
        n_in = part if collective in ("allgather", "gather", "neighbor_allgather") else count
        if collective == "alltoallv":
            sent = alltoallv_counts(p, part)
            starts = np.cumsum(sent, axis=1) - sent
            n_in = sent.sum(axis=1)
            inputs = [_data(base[:n_in[i]], i, dtype) for i in range(p)]
        else:
            inputs = [_data(base[:n_in], i, dtype) for i in range(p)]
        mine = self.send = inputs[r]
        kwargs = {"root": root} if collective in ROOTED else {}
        if collective in REDUCING:
            kwargs["op"] = OPS[op][0]
        at_root = r == root
        want, prefill, args = None, None, ()
        self.out = np.empty(count, self.dtype)
        if collective == "barrier":
            self.out = np.empty(0, self.dtype)
        elif collective == "bcast":
            args, prefill, want = (self.out,), (inputs[root] if at_root else None), inputs[root]
        elif collective in ("allreduce", "reduce", "scan", "exscan"):
            # A scan's result is the combination of ranks 0 .. r, an exclusive scan's of ranks
            # 0 .. r-1 (rank 0's is undefined); a reduce's lands at the root only.
            upto = {"scan": r + 1, "exscan": r}.get(collective, p)
            total = functools.reduce(OPS[op][1], inputs[:upto]) if upto else None
            gets = collective != "reduce" or at_root
            want = total if gets else None
            if in_place and gets:
                args, prefill = (MPI.IN_PLACE, self.out), mine
            else:
                args = (mine, self.out)
        elif collective == "reduce_scatter":
            want = functools.reduce(OPS[op][1], inputs)[r * part:(r + 1) * part]
            if in_place:
                args, prefill = (MPI.IN_PLACE, self.out), mine
            else:
                self.out = np.empty(part, self.dtype)
                args = (mine, self.out)
        elif collective in ("allgather", "gather"):
            want = np.concatenate(inputs) if collective == "allgather" or at_root else None
            if collective == "gather" and not at_root:
                args = (mine, None)
            elif in_place:
                prefill = np.zeros(count, self.dtype)
                prefill[r * part:(r + 1) * part] = mine
                args = (MPI.IN_PLACE, self.out)
            else:
                args = (mine, self.out)
        elif collective == "scatter":
            whole = inputs[root]
            if in_place and at_root:
                args = (whole, MPI.IN_PLACE)
            else:
                self.out = np.empty(part, self.dtype)
                args = (whole if at_root else None, self.out)
                want = whole[r * part:(r + 1) * part]
        elif collective == "alltoall":
            want = np.concatenate([inputs[j][r * part:(r + 1) * part] for j in range(p)])
            args, prefill = ((MPI.IN_PLACE, self.out), mine) if in_place else ((mine, self.out), None)
        elif collective == "alltoallv":
            layout = (sent[r], starts[r])
            want = np.concatenate([inputs[j][starts[j, r]:starts[j, r] + sent[j, r]] for j in range(p)])
            self.out = np.empty(mine.size, self.dtype)
            args, prefill = (((MPI.IN_PLACE, [self.out, layout]), mine) if in_place
                             else (([mine, layout], [self.out, layout]), None))
        elif collective in NEIGHBOURHOOD:
            # From the neighbour below in each dimension, what it sent up, then from the one
            # above what it sent down: the whole buffer of an all-gather, the block of an all-to-all.
            want = []
            for d in range(GRID_DIMS):
                below, above = comm.Shift(d, 1)
                for source, block in ((below, 2 * d + 1), (above, 2 * d)):
                    held = inputs[source]
                    want.append(held if collective == "neighbor_allgather" else held[block * part:(block + 1) * part])
            want = np.concatenate(want)
            args = (mine, self.out)
        self.want = None if want is None else want
        self.prefill = prefill
        self.count = count
        self.nbytes = self.moved = count * self.dtype.itemsize
        self.method, self.args, self.kwargs = method, args, kwargs

    def bound(self, comm, **kw):
        """A call of no arguments with the method and every keyword looked up and merged once,
        so contenders with and without ``algorithm=`` pay the same per call."""
        method, args, kwargs = getattr(comm, self.method), self.args, {**self.kwargs, **kw}
        return lambda: method(*args, **kwargs)

    def started(self, comm, **kw):
        """``bound``'s nonblocking form: a call of no arguments that starts the collective with
        mpi4py's ``I`` method of the same name (``Iallreduce`` for ``Allreduce``; ours has the
        same) and returns its request."""
        method, args, kwargs = getattr(comm, "I" + self.method.lower()), self.args, {**self.kwargs, **kw}
        return lambda: method(*args, **kwargs)

    def ran(self, comm):
        """The algorithm a call on ``comm`` (a Comm) runs: the one its ``last_algorithm`` names
        after a call, made on every rank."""
        self.bound(comm)()
        return comm.last_algorithm

    def check(self, call):
        """Run ``call`` once on poisoned output; the number of elements that differ from exact."""
        _poison(self.out)
        if self.prefill is not None:
            self.out[:self.prefill.size] = self.prefill
        call()
        if self.want is None:
            return 0
        return int(np.count_nonzero(self.out[:self.want.size] != self.want))


class Compressed:
    """A ``compress:<name>`` contender on an all-reduce ``case``: ``compression.allreduce``
    through a fresh compressor (its error-feedback state carried from call to call), keeping
    every call's Stats.  ``check`` counts non-finite elements as wrong and keeps the error."""

    def __init__(self, name, case, comm):
        self.case, self.comm = case, comm
        self.compressor, self.state, self.stats = compression.COMPRESSORS[name](), None, []
        self.error = None

    def __call__(self):
        out, self.state = compression.allreduce(self.comm, self.case.send, self.compressor, self.state,
                                                report=self.stats.append)
        self.case.out[...] = out

    def check(self, call):
        """Run once; the number of non-finite elements (the error goes to ``error``)."""
        _poison(self.case.out)
        call()
        self.stats.clear()
        want = self.case.want.astype(np.float64)
        self.error = float(np.max(np.abs(self.case.out - want), initial=0) / max(np.max(np.abs(want), initial=0), 1e-300))
        return int(np.count_nonzero(~np.isfinite(self.case.out)))

    def columns(self, comm):
        """The Stats columns: medians over this rank's calls, then the most over ranks."""
        mine = np.array([[s.wire_bytes, s.compress_s, s.communicate_s, s.decompress_s] for s in self.stats]
                        or [[0, 0, 0, 0]], np.float64)
        worst = np.median(mine, axis=0)
        comm.Allreduce(MPI.IN_PLACE, worst, op=MPI.MAX)
        error = comm.allreduce(self.error or 0.0, op=MPI.MAX)
        return {"wire(B)": int(worst[0]), "compress(us)": worst[1] * 1e6, "comm(us)": worst[2] * 1e6,
                "decompress(us)": worst[3] * 1e6, "rel.err": error}


def counts_for(collective, size_list, p, itemsize=4):
    """Element counts for ``size_list`` bytes, multiples of the blocks a vector splits into
    (SPEC); [0] for barrier."""
    if collective == "barrier":
        return [0]
    out = []
    for nbytes in size_list:
        n = nbytes // itemsize
        blocks = SPEC[collective][2](p)
        n = max(blocks, n // blocks * blocks)
        out.append(max(n, 1))
    return sorted(set(out))


def contenders(collective, comm, count, algorithms=("all",), itemsize=4, shared=0):
    """(name, key or None, reason) for native, default, auto and the chosen algorithms; None
    where one cannot run.  ``algorithms``: ``all`` (every one), ``auto``, ``native`` or names,
    full or without the collective's prefix (names of other collectives are ignored); native,
    default and auto are always measured where we have the collective.  ``shared``: the bytes a
    phase of the benchmark Comm's shared segment carries, 0 when it has none."""
    rows = [(NATIVE_LABEL, "native", None)]
    registered = REGISTERED.get(collective, collective)
    if registered not in collectives.ALGORITHMS:
        return rows
    rows += [(DEFAULT, DEFAULT, None), (AUTO, AUTO, None)]
    named = collectives.ALGORITHMS[registered] + SHM[registered]
    if "all" not in algorithms:
        wanted = set(algorithms) | {f"{registered}_{a}" for a in algorithms}
        named = [algo for algo in named if algo.name in wanted]
    arg = count * itemsize if collective == "bcast" else count
    # The shared-memory rows apply where the benchmark's Comm maps a segment (collectives.shm).
    topology = Topology(comm.size, shared=shared)
    for algo in named:
        if importlib.util.find_spec(f"collectives.algorithms.{algo.name}") is None:
            rows.append((algo.name, None, "not implemented yet"))
        else:
            reason = algo.applies(Shape(arg, count * itemsize, registered == collective), topology)
            rows.append((algo.name, None if reason else algo.name, reason))
    return rows
