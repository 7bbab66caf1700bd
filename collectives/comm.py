"""``Comm``: an mpi4py communicator whose collectives run our hand-written algorithms.

Method names and signatures are mpi4py's (``Allreduce(sendbuf, recvbuf, op=MPI.SUM)``,
``Bcast(buf, root=0)``, ...), each with an optional ``algorithm=`` keyword.  Anything not
implemented here is looked up on the wrapped communicator, so an existing mpi4py program
switches over by wrapping its communicator and nothing else.

Every method validates its arguments on the calling rank first (ValueError / TypeError
naming the problem), then builds a *job* that runs the schedule.  Blocking methods run the
job at once; ``I...`` methods hand it to the progress thread and return a Request.  With
``check=True`` (the default; COLLECTIVES_CHECK=0 turns it off) a job first agrees with the
other ranks on counts, dtype, op, root and algorithm through one small native all-reduce,
so a mismatch raises the same error on every rank instead of hanging or truncating.

What our algorithms do not cover (long double, MAXLOC/MINLOC and user-defined ops, derived
datatypes, DLPack and ``__cuda_array_interface__`` buffers; see ``buffers.Native``) is
delegated to MPI's own call on the private duplicate, so it keeps its place in the order of
this communicator's collectives, queues behind pending nonblocking ones like any job, and
sets ``last_algorithm`` to ``"native"`` with the reason logged (logger "collectives", INFO).
The decision rests on the kinds of the arguments only, which all ranks share; with ``check``
the agreement includes it, so a rank that delegates while another does not raises instead
of hanging.

``Dup``, ``Split``, ``Split_type``, ``Create``, ``Create_group``, ``Clone`` and ``Create_cart``
return a ``Comm`` with this one's algorithm choices and check setting (COMM_NULL stays
COMM_NULL); it owns the new communicator and frees it in ``Free``.  After ``Create_cart``,
``comm`` is the ``Cartcomm`` and topology methods (``Get_coords``, ``Shift``, ...) reach it
through attribute forwarding.

Blocking methods first try the fast path (``collectives._engine.Fast``): plain buffers and
buffer specs resolved in Cython, a cached plan, the same agreement in C, one ``nogil`` run;
whatever it does not handle falls through to the jobs above.  A schedule that fails part-way
leaves no request open and marks the Comm unusable: later calls raise RuntimeError naming
the collective, step and rank of that failure.
"""
import functools
import os

import numpy as np
from mpi4py import MPI

from . import kernels, node, p2p
from .buffers import Native, is_in_place, parse
from .nonblocking import Progress, completed
from .ops import DTYPES, OP_NAMES, check_op, dtype_code, supports
from .registry import ALGORITHMS, env_choice, log, names, plan, resolve_name, select
from .schedule import blocks, displacements, run_python

try:
    from ._engine import Fast, ScheduleError, execute as _native_execute
except ImportError:
    _native_execute = None

NATIVE = _native_execute is not None and not kernels.PUREPYTHON

# One tag per collective on the private communicator.
TAG = {name: 100 + i for i, name in enumerate(ALGORITHMS)}
_BYTE = dtype_code(np.uint8)
_COLLECTIVE_INDEX = {name: i for i, name in enumerate(ALGORITHMS)}


def _as_bytes(arr):
    return arr.view(np.uint8) if arr.size else np.empty(0, np.uint8)


def _agreed(collective, native):
    """Decorate a job builder so that, with ``check``, a rank whose arguments are invalid
    still takes part in the argument agreement before raising: the others raise too
    instead of waiting for it.  When the builder raises Native, ``native(*args)`` gives the
    mpi4py method name and arguments of the same call, which MPI then runs."""
    def decorate(builder):
        @functools.wraps(builder)
        def wrapper(self, *args, **kwargs):
            try:
                return builder(self, *args, **kwargs)
            except Native as why:
                return self._native_job(collective, why, *native(*args, **kwargs))
            except (ValueError, TypeError) as exc:
                if not self.check or self.size == 1:
                    raise
                error = exc

            def job():
                self._agree(collective, None, error=True)
                raise error
            return job
        return wrapper
    return decorate


def _choices(collective):
    """The algorithm indices the agreement uses: the table's names, then "native"."""
    return names(collective) + ["native"]


def disagreement(collective, keys, lo, hi):
    """What the argument agreement reports, or None when all ranks agree: ``lo`` and ``hi``
    are, per key, the least and greatest value over the ranks (the first two keys are the
    collective and the algorithm).  Shared by Comm._agree and the fast path's agreement."""
    # Fields mean something only between ranks running the same collective and algorithm
    # (a native call agrees on none), and ranks differing there may have different keys.
    if lo[0] != hi[0] or lo[1] != hi[1]:
        keys = keys[:2]
    bad = [f"{k} ranges {lo[i]}..{hi[i]}" for i, k in enumerate(keys) if lo[i] != hi[i]]
    if lo[0] == hi[0] and lo[1] != hi[1]:
        choices = _choices(collective)
        bad[0] += (f" ({choices[lo[1]]}..{choices[hi[1]]}; 'native' is MPI's own call, "
                   "taken for arguments no algorithm covers)")
    if not bad:
        return None
    return f"{collective}: arguments differ across ranks: " + ", ".join(bad)


def _check_root(root, size, name):
    if not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"{name}: invalid root {root!r} for a communicator of size {size}")
    return int(root)


def _address(arr):
    return arr.__array_interface__["data"][0]


def _aliased(send, recv, name, exact_ok=True):
    """True when ``send`` is exactly ``recv``'s memory and ``exact_ok`` (a reduction then runs
    as with MPI.IN_PLACE); ValueError naming both for any other overlap, which MPI forbids."""
    if send is None or recv is None or not send.nbytes or not recv.nbytes:
        return False
    s, r = _address(send), _address(recv)
    if exact_ok and s == r and send.nbytes == recv.nbytes:
        return True
    if s < r + recv.nbytes and r < s + send.nbytes:
        raise ValueError(f"{name}: sendbuf (bytes {s:#x}..+{send.nbytes}) and recvbuf (bytes "
                         f"{r:#x}..+{recv.nbytes}) overlap; pass MPI.IN_PLACE to work in place")
    return False


def _same_dtype(a, b, name):
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: sendbuf dtype {a.dtype} differs from recvbuf dtype {b.dtype}")


class Comm:
    """Wrap ``comm`` (default COMM_WORLD) so its collectives use collectives' algorithms.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        The communicator to wrap.  Collective traffic runs on a private duplicate of it.
    algorithms : dict, optional
        Per-communicator choice, e.g. ``{"allreduce": "ring"}``; overrides the
        COLLECTIVES_<COLLECTIVE> environment variables.  A per-call ``algorithm=`` wins over both;
        ``"auto"`` (or None) at any level defers to the next, ending at the ``auto`` policy.
        ``last_algorithm`` holds the name chosen by this rank's latest collective call.
    check : bool, optional
        Agree across ranks on arguments before each collective (default: COLLECTIVES_CHECK, on).
    """

    def __init__(self, comm=None, *, algorithms=None, check=None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        if isinstance(self.comm, Comm):
            self.comm = self.comm.comm
        if self.comm.Is_inter():
            raise TypeError("collectives.Comm wraps intracommunicators only")
        self._coll = self.comm.Dup()
        # Our errors become Python exceptions whatever handler the user's communicator has.
        self._coll.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank = self._coll.Get_rank()
        self.size = self._coll.Get_size()
        self.algorithms = {}
        for collective, name in (algorithms or {}).items():
            if collective not in ALGORITHMS:
                raise ValueError(f"unknown collective {collective!r}; one of {', '.join(ALGORITHMS)}")
            if resolve_name(collective, name) != "auto":
                self.algorithms[collective] = resolve_name(collective, name)
        self.last_algorithm = None
        if check is None:
            check = os.environ.get("COLLECTIVES_CHECK", "1") not in ("", "0")
        self.check = bool(check)
        self._scratch = {}
        self._progress = None
        self._owned = False  # whether Free also frees ``comm`` (made by Dup, Split, ...)
        self._nodes = None  # collectives.node.Nodes, built by the first node-aware all-reduce
        # Set to the first failure's description when a schedule fails mid-way.
        self._broken = None
        self._fast = (Fast(self._coll, self, self._plan_fast, [TAG[c] for c in ALGORITHMS],
                           list(ALGORITHMS)) if NATIVE else None)

    def __getattr__(self, name):
        if name.startswith("_") or name == "comm":
            raise AttributeError(name)
        return getattr(self.comm, name)

    def __repr__(self):
        return f"<collectives.Comm rank {self.rank} of {self.size}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()

    def Free(self):
        """Release the private communicator and stop the progress thread (not the wrapped one)."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._coll != MPI.COMM_NULL:
            self._coll.Free()
        # The fast path and the scratch buffers refer back to this Comm: drop them now rather
        # than when the garbage collector breaks the cycle, so their memory goes with Free.
        self._fast = None
        self._scratch = {}
        if self._nodes is not None:
            self._nodes.free()
        if self._owned and self.comm != MPI.COMM_NULL:
            self.comm.Free()

    def Get_rank(self):
        """Rank of this process."""
        return self.rank

    def Get_size(self):
        """Number of processes."""
        return self.size

    # ---- communicators made from this one -------------------------------------------------

    def _derived(method):
        def derive(self, *args, **kwargs):
            made = getattr(self.comm, method)(*args, **kwargs)
            if made == MPI.COMM_NULL:
                return made
            comm = Comm(made, algorithms=self.algorithms, check=self.check)
            comm._owned = True
            return comm
        derive.__name__ = derive.__qualname__ = method
        derive.__doc__ = (f"mpi4py's {method}, as a collectives.Comm with this one's algorithm "
                          "choices and check setting (COMM_NULL stays COMM_NULL).")
        return derive

    Dup = _derived("Dup")
    Clone = _derived("Clone")
    Split = _derived("Split")
    Split_type = _derived("Split_type")
    Create = _derived("Create")
    Create_group = _derived("Create_group")
    Create_cart = _derived("Create_cart")
    del _derived

    # ---- machinery shared by every collective -------------------------------------------

    def _choose(self, collective, algorithm, count, nbytes, uniform=True):
        requested = resolve_name(collective, algorithm)
        if requested == "auto":
            requested = self.algorithms.get(collective) or env_choice(collective)
        algo = select(collective, requested, self.size, count, nbytes, uniform)
        self.last_algorithm = algo.name
        return algo

    def _buffer(self, purpose, nbytes):
        """A reused, pre-touched scratch buffer of at least ``nbytes`` for ``purpose``."""
        buf = self._scratch.get(purpose)
        if buf is None or buf.nbytes < nbytes:
            buf = np.zeros(max(nbytes, 64), np.uint8)
            self._scratch[purpose] = buf
        return buf[:nbytes]

    def _execute(self, algo, args, acc, inp, dtype, op, collective):
        steps, tmp_count, nreq = plan(algo.name, self.rank, self.size, *args)
        itemsize = np.dtype(DTYPES[dtype]).itemsize
        tmp = self._buffer("tmp", tmp_count * itemsize) if tmp_count else None
        if NATIVE:
            try:
                _native_execute(self._coll, steps, acc, tmp, inp, dtype, op, TAG[collective], nreq,
                                f"{collective} ({algo.name})")
            except ScheduleError as exc:
                self._broken = str(exc)
                raise
        else:
            bufs = [None if b is None else _as_bytes(b) for b in (acc, tmp, inp)]
            run_python(self._coll, steps, bufs, dtype, op, TAG[collective])

    def _native_job(self, collective, why, method, *args):
        """A job running mpi4py's ``method(*args)`` on the private communicator."""
        log.info("%s: %s; native MPI call", method, why)
        self.last_algorithm = "native"
        call = getattr(self._coll, method)

        def job():
            if self.check:
                self._agree(collective, "native")
            call(*args)
        return job

    def _agree(self, collective, algo, error=False, **fields):
        """Raise the same ValueError on every rank unless all ranks passed equal ``fields``.

        One native all-reduce (MAX) of a vector whose length depends only on the communicator
        size, so ranks calling different collectives, or a rank whose own arguments were
        invalid (``error=True``, no fields), still meet in it and all raise.  A field may be
        None on ranks that cannot know it (a Gatherv count away from the root).  ``algo`` is
        an Algorithm, ``"native"`` for a call delegated to MPI, or None with ``error``.
        """
        width = 4 + self.size
        if len(fields) > width:
            raise RuntimeError(f"{collective}: {len(fields)} fields to agree on, room for {width}")
        unknown = 1 << 62
        head = [int(error), _COLLECTIVE_INDEX[collective],
                0 if algo is None else _choices(collective).index(getattr(algo, "name", algo))]
        values = list(fields.values()) + [0] * (width - len(fields))
        hi = head + [-unknown if v is None else int(v) for v in values]
        lo = head[1:] + [unknown if v is None else int(v) for v in values]
        both = np.array(hi + [-v for v in lo], dtype=np.int64)
        self._coll.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
        hi, lo = both[1:len(hi)], -both[len(hi):]
        if both[0]:
            if error:
                return
            raise ValueError(f"{collective}: invalid arguments on another rank (it raised the details)")
        message = disagreement(collective, ["collective", "algorithm"] + list(fields), lo, hi)
        if message:
            raise ValueError(message)

    def _usable(self):
        if self._broken is not None:
            raise RuntimeError(f"collectives.Comm is unusable: {self._broken}")

    def _run(self, job):
        self._usable()
        if self._progress is not None and self._progress.busy():
            self._progress.submit(job).wait()
        else:
            job()

    def _start(self, job):
        self._usable()
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            # A progress thread would call MPI beside the caller, which needs THREAD_MULTIPLE.
            log.info("collectives: MPI thread level below THREAD_MULTIPLE; nonblocking "
                     "collectives complete before they return")
            return completed(job)
        if self._progress is None:
            self._progress = Progress()
        return self._progress.submit(job)

    # ---- all-reduce ----------------------------------------------------------------------

    def _plan_fast(self, collective, algorithm, count, nbytes, uniform, args, op=None, dtype=None):
        """What the fast path caches for one call shape: (steps, tmp_count, nreq, reads_in,
        name, index of the algorithm); ``op`` and ``dtype`` codes of a reduction are checked."""
        if op is not None and not supports(OP_NAMES[op], DTYPES[dtype]):
            raise TypeError(f"{collective}: op {OP_NAMES[op]} is not defined on {np.dtype(DTYPES[dtype])}")
        algo = self._choose(collective, algorithm, count, nbytes, uniform)
        steps, tmp_count, nreq = plan(algo.name, self.rank, self.size, *args)
        return (steps, tmp_count, nreq, algo.reads_in, algo.name,
                names(collective).index(algo.name))

    @_agreed("allreduce", lambda sendbuf, recvbuf, op, algorithm: ("Allreduce", sendbuf, recvbuf, op))
    def _allreduce_job(self, sendbuf, recvbuf, op, algorithm):
        recv, n, _ = parse(recvbuf, "recvbuf", writable=True)
        send = None
        if not is_in_place(sendbuf):
            send, ns, _ = parse(sendbuf, "sendbuf")
            if ns != n:
                raise ValueError(f"Allreduce: sendbuf has {ns} elements but recvbuf has {n}")
            _same_dtype(send, recv, "Allreduce")
            if _aliased(send, recv, "Allreduce"):
                send = None
        opc, dt = check_op(op, recv.dtype)
        algo = self._choose("allreduce", algorithm, n, recv.nbytes)

        def job():
            if self.check:
                self._agree("allreduce", algo, count=n, dtype=dt, op=opc)
            reads_in = algo.reads_in and n and self.size > 1
            if send is not None and not reads_in:
                np.copyto(recv, send)
            if n and self.size > 1:
                self._execute(algo, (n,), recv, (send if send is not None else recv) if reads_in else None,
                              dt, opc, "allreduce")
        return job

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of every rank."""
        if self._nodes is not node.FLAT and node.allreduce(self, sendbuf, recvbuf, op, algorithm):
            return
        if self._fast is not None and self._fast.allreduce(sendbuf, recvbuf, op, algorithm):
            return
        self._run(self._allreduce_job(sendbuf, recvbuf, op, algorithm))

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Nonblocking Allreduce; returns a Request."""
        return self._start(self._allreduce_job(sendbuf, recvbuf, op, algorithm))

    # ---- broadcast -----------------------------------------------------------------------

    @_agreed("bcast", lambda buf, root, algorithm: ("Bcast", buf, root))
    def _bcast_job(self, buf, root, algorithm):
        root = _check_root(root, self.size, "Bcast")
        arr, n, _ = parse(buf, "buf", writable=True)
        data = _as_bytes(arr)
        algo = self._choose("bcast", algorithm, data.size, data.size)

        def job():
            if self.check:
                self._agree("bcast", algo, nbytes=data.size, root=root)
            if data.size and self.size > 1:
                self._execute(algo, (data.size, root), data, None, _BYTE, 0, "bcast")
        return job

    def Bcast(self, buf, root=0, algorithm=None):
        """Broadcast ``buf`` of rank ``root`` into ``buf`` of every rank."""
        if self._fast is not None and self._fast.bcast(buf, root, algorithm):
            return
        self._run(self._bcast_job(buf, root, algorithm))

    def Ibcast(self, buf, root=0, algorithm=None):
        """Nonblocking Bcast; returns a Request."""
        return self._start(self._bcast_job(buf, root, algorithm))

    # ---- reduce --------------------------------------------------------------------------

    @_agreed("reduce", lambda sendbuf, recvbuf, op, root, algorithm: ("Reduce", sendbuf, recvbuf, op, root))
    def _reduce_job(self, sendbuf, recvbuf, op, root, algorithm):
        root = _check_root(root, self.size, "Reduce")
        is_root = self.rank == root
        recv = None
        if is_root:
            recv, n, _ = parse(recvbuf, "recvbuf", writable=True)
        if is_in_place(sendbuf):
            if not is_root:
                raise ValueError("Reduce: MPI.IN_PLACE is only valid at the root")
            send = recv
        else:
            send, n_send, _ = parse(sendbuf, "sendbuf")
            if is_root:
                if n_send != n:
                    raise ValueError(f"Reduce: sendbuf has {n_send} elements but recvbuf has {n}")
                _same_dtype(send, recv, "Reduce")
                if _aliased(send, recv, "Reduce"):
                    send = recv
            n = n_send
        opc, dt = check_op(op, send.dtype)
        algo = self._choose("reduce", algorithm, n, send.nbytes)

        def job():
            if self.check:
                self._agree("reduce", algo, count=n, dtype=dt, op=opc, root=root)
            if n:
                self._execute(algo, (n, root), recv, send, dt, opc, "reduce")
        return job

    def Reduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of rank ``root``."""
        if self._fast is not None and self._fast.reduce(sendbuf, recvbuf, op, root, algorithm):
            return
        self._run(self._reduce_job(sendbuf, recvbuf, op, root, algorithm))

    def Ireduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0, algorithm=None):
        """Nonblocking Reduce; returns a Request."""
        return self._start(self._reduce_job(sendbuf, recvbuf, op, root, algorithm))

    # ---- all-gather ----------------------------------------------------------------------

    @_agreed("allgather", lambda sendbuf, recvbuf, algorithm, vector:
             ("Allgatherv" if vector else "Allgather", sendbuf, recvbuf))
    def _allgather_job(self, sendbuf, recvbuf, algorithm, vector):
        name = "Allgatherv" if vector else "Allgather"
        recv, counts, displs = parse(recvbuf, "recvbuf", writable=True, vector=True)
        p, r = self.size, self.rank
        if vector and counts is None:
            raise ValueError(f"{name}: recvbuf must give counts, e.g. [buf, (counts, displs), MPI.DOUBLE]")
        if not vector and counts is not None:
            # Allgather's [buf, count, datatype] counts one rank's block, as in mpi4py.
            if len(counts) != 1 or displs != (0,):
                raise ValueError(f"{name}: recvbuf may give one count, that of each rank's block; "
                                 "use Allgatherv for per-rank counts and displacements")
            if counts[0] * p > recv.size:
                raise ValueError(f"{name}: recvbuf has {recv.size} elements, too few for "
                                 f"{p} x {counts[0]}")
            recv, counts, displs = recv[:counts[0] * p], counts * p, None
        if counts is not None and len(counts) != p:
            raise ValueError(f"{name}: {len(counts)} counts for a communicator of size {p}")
        send = None
        if not is_in_place(sendbuf):
            send, ns, _ = parse(sendbuf, "sendbuf")
            _same_dtype(send, recv, name)
            _aliased(send, recv, name, exact_ok=False)
            if counts is None:
                counts = (ns,) * p
            elif counts[r] != ns:
                raise ValueError(f"{name}: sendbuf has {ns} elements but recvbuf expects {counts[r]} from rank {r}")
        elif counts is None:
            if recv.size % p:
                raise ValueError(f"{name}: in-place recvbuf of {recv.size} elements is not divisible by {p} ranks")
            counts = (recv.size // p,) * p
        if displs is None:
            displs = displacements(counts)
        total = sum(counts)
        if not vector and recv.size != total:
            raise ValueError(f"{name}: recvbuf has {recv.size} elements, expected {p} x {counts[0]} = {total}")
        packed = displs == displacements(counts)
        size = recv.dtype.itemsize
        bcounts = tuple(c * size for c in counts)
        algo = self._choose("allgather", algorithm, total, total * size, uniform=len(set(counts)) <= 1)

        def job():
            if self.check:
                self._agree("allgather", algo, dtype=recv.dtype.num, itemsize=size,
                            **{f"count{i}": c for i, c in enumerate(counts)})
            acc = recv[:total] if packed else self._buffer("pack", total * size).view(recv.dtype)
            at = displacements(counts)
            own = acc[at[r]:at[r] + counts[r]]
            if send is not None:
                np.copyto(own, send)
            elif not packed:
                np.copyto(own, recv[displs[r]:displs[r] + counts[r]])
            if total and p > 1:
                self._execute(algo, (bcounts,), _as_bytes(acc), None, _BYTE, 0, "allgather")
            if not packed:
                for i in range(p):
                    recv[displs[i]:displs[i] + counts[i]] = acc[at[i]:at[i] + counts[i]]
        return job

    def Allgather(self, sendbuf, recvbuf, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of every rank."""
        if self._fast is not None and self._fast.allgather(sendbuf, recvbuf, algorithm):
            return
        self._run(self._allgather_job(sendbuf, recvbuf, algorithm, vector=False))

    def Iallgather(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgather; returns a Request."""
        return self._start(self._allgather_job(sendbuf, recvbuf, algorithm, vector=False))

    def Allgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Allgather with per-rank counts: ``recvbuf`` is [buf, (counts, displs), datatype]."""
        self._run(self._allgather_job(sendbuf, recvbuf, algorithm, vector=True))

    def Iallgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgatherv; returns a Request."""
        return self._start(self._allgather_job(sendbuf, recvbuf, algorithm, vector=True))

    # ---- reduce-scatter ------------------------------------------------------------------

    @_agreed("reduce_scatter", lambda sendbuf, recvbuf, counts, op, algorithm, name:
             (name, sendbuf, recvbuf, op) if name == "Reduce_scatter_block"
             else (name, sendbuf, recvbuf, counts, op))
    def _reduce_scatter_job(self, sendbuf, recvbuf, counts, op, algorithm, name):
        p, r = self.size, self.rank
        recv, n_recv, _ = parse(recvbuf, "recvbuf", writable=True)
        in_place = is_in_place(sendbuf)
        if counts is None and name == "Reduce_scatter" and not in_place:
            # A collective on the private communicator: it must queue behind any pending
            # nonblocking collective rather than run beside it on another thread, and come
            # before any check that could fail on this rank alone.
            gathered = []
            self._run(lambda: gathered.extend(self._coll.allgather(n_recv)))
            counts = gathered
        send = recv if in_place else parse(sendbuf, "sendbuf")[0]
        _same_dtype(send, recv, name)
        if not in_place and _aliased(send, recv, name):
            # sendbuf is recvbuf exactly: MPI.IN_PLACE with explicit counts.
            in_place = True
        if counts is None:
            if send.size % p:
                raise ValueError(f"{name}: {send.size} elements do not split evenly over {p} ranks")
            counts = (send.size // p,) * p
        counts = tuple(int(c) for c in np.atleast_1d(counts))
        if len(counts) != p or any(c < 0 for c in counts):
            raise ValueError(f"{name}: recvcounts must be {p} non-negative counts, got {counts}")
        total = sum(counts)
        if send.size != total:
            raise ValueError(f"{name}: sendbuf has {send.size} elements but the counts add up to {total}")
        if not in_place and n_recv < counts[r]:
            raise ValueError(f"{name}: recvbuf has {n_recv} elements, rank {r} receives {counts[r]}")
        opc, dt = check_op(op, recv.dtype)
        algo = self._choose("reduce_scatter", algorithm, total, send.nbytes,
                            uniform=len(set(counts)) <= 1)
        start = sum(counts[:r])

        def job():
            if self.check:
                self._agree("reduce_scatter", algo, dtype=dt, op=opc,
                            **{f"count{i}": c for i, c in enumerate(counts)})
            # The schedule writes every block of its buffer; in place, MPI leaves recvbuf past
            # the rank's own result (which lands at its start) untouched, so it runs on a copy.
            acc = self._buffer("acc", send.nbytes).view(send.dtype)
            np.copyto(acc, send)
            if total and p > 1:
                self._execute(algo, (counts,), acc, None, dt, opc, "reduce_scatter")
            recv[:counts[r]] = acc[start:start + counts[r]]
        return job

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives block i."""
        if self._fast is not None and self._fast.reduce_scatter(sendbuf, recvbuf, None, op, algorithm):
            return
        self._run(self._reduce_scatter_job(sendbuf, recvbuf, None, op, algorithm, "Reduce_scatter_block"))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives ``recvcounts[i]`` elements."""
        if (self._fast is not None and recvcounts is not None
                and self._fast.reduce_scatter(sendbuf, recvbuf, recvcounts, op, algorithm)):
            return
        self._run(self._reduce_scatter_job(sendbuf, recvbuf, recvcounts, op, algorithm, "Reduce_scatter"))

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Nonblocking Reduce_scatter_block; returns a Request."""
        return self._start(self._reduce_scatter_job(sendbuf, recvbuf, None, op, algorithm,
                                                    "Reduce_scatter_block"))

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=MPI.SUM, algorithm=None):
        """Nonblocking Reduce_scatter; returns a Request."""
        return self._start(self._reduce_scatter_job(sendbuf, recvbuf, recvcounts, op, algorithm,
                                                    "Reduce_scatter"))

    # ---- gather and scatter ---------------------------------------------------------------

    def _rooted_vector(self, spec, name, writable, vector):
        """Root side of Gather(v)/Scatter(v): (array, counts, displs) in elements from its spec."""
        p = self.size
        if not vector:
            arr, total, _ = parse(spec, name, writable=writable, blocks=p)
            if total % p:
                raise ValueError(f"{name}: {total} elements do not split evenly over {p} ranks")
            counts = (total // p,) * p
            return arr, counts, displacements(counts)
        arr, counts, displs = parse(spec, name, writable=writable, vector=True)
        if counts is None:
            if arr.size % p:
                raise ValueError(f"{name}: {arr.size} elements do not split evenly over {p} ranks; "
                                 "give counts, e.g. [buf, (counts, displs), MPI.DOUBLE]")
            counts, displs = blocks(arr.size, p)
        if len(counts) != p:
            raise ValueError(f"{name}: {len(counts)} counts for a communicator of size {p}")
        return arr, counts, displs

    def _rooted_setup(self, collective, name, vector, root, rooted, own, algorithm):
        """What Gather(v) and Scatter(v) share: (counts, byte counts, packed, algorithm, fields).

        ``rooted`` is the root's (array, counts, displs), None elsewhere; ``own`` is this
        rank's block, None for MPI.IN_PLACE at the root.  ``packed`` says whether the root's
        blocks lie in rank order from offset 0; ``fields`` are what the ranks must agree on.
        """
        p, r = self.size, self.rank
        if r == root:
            arr, counts, displs = rooted
            if own is not None:
                _same_dtype(own, arr, name)
                if own.size != counts[r]:
                    raise ValueError(f"{name}: the root's own block has {own.size} elements "
                                     f"but the counts give it {counts[r]}")
        else:
            arr, displs = own, None
            # Only the root knows every count of a Gatherv/Scatterv; a rank knows its own.
            counts = tuple(own.size if i == r or not vector else -1 for i in range(p))
        size = arr.dtype.itemsize
        bcounts = tuple(c * size if c >= 0 else -1 for c in counts)
        packed = r != root or displs == displacements(counts)
        # Gatherv/Scatterv stay off the binomial algorithms even with equal counts: the other
        # ranks cannot know that, and every rank must choose alike.
        algo = self._choose(collective, algorithm, counts[r] * p, bcounts[r] * p, uniform=not vector)
        fields = dict(root=root, itemsize=size,
                      **{f"count{i}": c if c >= 0 else None for i, c in enumerate(counts)})
        return counts, bcounts, packed, algo, fields

    @_agreed("gather", lambda sendbuf, recvbuf, root, algorithm, vector:
             ("Gatherv" if vector else "Gather", sendbuf, recvbuf, root))
    def _gather_job(self, sendbuf, recvbuf, root, algorithm, vector):
        name = "Gatherv" if vector else "Gather"
        root = _check_root(root, self.size, name)
        r = self.rank
        rooted = self._rooted_vector(recvbuf, "recvbuf", True, vector) if r == root else None
        if is_in_place(sendbuf):
            if r != root:
                raise ValueError(f"{name}: MPI.IN_PLACE is only valid at the root")
            recv, counts, displs = rooted
            send = recv[displs[r]:displs[r] + counts[r]]
        else:
            send = parse(sendbuf, "sendbuf")[0]
            _aliased(send, rooted and rooted[0], name, exact_ok=False)
        counts, bcounts, packed, algo, fields = self._rooted_setup(
            "gather", name, vector, root, rooted, send, algorithm)

        def job():
            if self.check:
                self._agree("gather", algo, **fields)
            acc = None
            if r == root:
                recv, _, displs = rooted
                total = sum(counts)
                acc = recv[:total] if packed else self._buffer("pack", total * recv.itemsize).view(recv.dtype)
            self._execute(algo, (bcounts, root), None if acc is None else _as_bytes(acc),
                          _as_bytes(send), _BYTE, 0, "gather")
            if not packed:
                at = displacements(counts)
                for i, c in enumerate(counts):
                    recv[displs[i]:displs[i] + c] = acc[at[i]:at[i] + c]
        return job

    def Gather(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of rank ``root``."""
        if self._fast is not None and self._fast.gather(sendbuf, recvbuf, root, algorithm):
            return
        self._run(self._gather_job(sendbuf, recvbuf, root, algorithm, vector=False))

    def Gatherv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        self._run(self._gather_job(sendbuf, recvbuf, root, algorithm, vector=True))

    @_agreed("scatter", lambda sendbuf, recvbuf, root, algorithm, vector:
             ("Scatterv" if vector else "Scatter", sendbuf, recvbuf, root))
    def _scatter_job(self, sendbuf, recvbuf, root, algorithm, vector):
        name = "Scatterv" if vector else "Scatter"
        root = _check_root(root, self.size, name)
        r = self.rank
        rooted = self._rooted_vector(sendbuf, "sendbuf", False, vector) if r == root else None
        if is_in_place(recvbuf):
            if r != root:
                raise ValueError(f"{name}: MPI.IN_PLACE is only valid at the root")
            recv = None
        else:
            recv = parse(recvbuf, "recvbuf", writable=True)[0]
            _aliased(rooted and rooted[0], recv, name, exact_ok=False)
        counts, bcounts, packed, algo, fields = self._rooted_setup(
            "scatter", name, vector, root, rooted, recv, algorithm)

        def job():
            if self.check:
                self._agree("scatter", algo, **fields)
            src = None
            if r == root:
                send, _, displs = rooted
                total = sum(counts)
                if packed:
                    src = send[:total]
                else:
                    src = self._buffer("pack", total * send.itemsize).view(send.dtype)
                    at = displacements(counts)
                    for i, c in enumerate(counts):
                        src[at[i]:at[i] + c] = send[displs[i]:displs[i] + c]
            # In place, the root's own block is already where it belongs; it lands in scratch.
            out = recv if recv is not None else self._buffer("own", bcounts[r])
            self._execute(algo, (bcounts, root), _as_bytes(out),
                          None if src is None else _as_bytes(src), _BYTE, 0, "scatter")
        return job

    def Scatter(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter block i of ``sendbuf`` at rank ``root`` to ``recvbuf`` of rank i."""
        if self._fast is not None and self._fast.scatter(sendbuf, recvbuf, root, algorithm):
            return
        self._run(self._scatter_job(sendbuf, recvbuf, root, algorithm, vector=False))

    def Scatterv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        self._run(self._scatter_job(sendbuf, recvbuf, root, algorithm, vector=True))

    # ---- barrier -------------------------------------------------------------------------

    @_agreed("barrier", None)
    def _barrier_job(self, algorithm):
        algo = self._choose("barrier", algorithm, 0, 0)

        def job():
            if self.check:
                self._agree("barrier", algo)
            if self.size > 1:
                self._execute(algo, (), None, None, _BYTE, 0, "barrier")
        return job

    def Barrier(self, algorithm=None):
        """Block until every rank has entered the barrier."""
        if self._fast is not None and self._fast.barrier(algorithm):
            return
        self._run(self._barrier_job(algorithm))

    def Ibarrier(self, algorithm=None):
        """Nonblocking Barrier; returns a Request."""
        return self._start(self._barrier_job(algorithm))

    # ---- point-to-point on the private communicator (collectives.p2p) ---------------------

    def Push(self, buf, dest):
        """Start sending ``buf`` to rank ``dest``, where ``Receive`` takes it; returns a Request."""
        return p2p.push(self, buf, dest)

    def Receive(self, buf, source=MPI.ANY_SOURCE):
        """Start receiving one ``Push`` of exactly the size of ``buf``; returns a Request."""
        return p2p.receive(self, buf, source)

    def Pull(self, buf, owner):
        """Start fetching into ``buf`` what rank ``owner`` serves; returns a Request."""
        return p2p.pull(self, buf, owner)

    def Serve(self, buf, source=MPI.ANY_SOURCE):
        """Answer one ``Pull`` with ``buf``; returns the rank that asked."""
        return p2p.serve(self, buf, source)

    def Wait(self, requests):
        """Complete every request in ``requests`` (point-to-point or collective)."""
        return p2p.wait(requests)


_WRAPPER = None  # MPI attribute key under which a communicator keeps its Comm


def _free_wrapper(comm, keyval, wrapper):
    wrapper.Free()


def wrap(comm):
    """``comm`` if it is a Comm, else the Comm of mpi4py communicator ``comm``, made once.

    The first call on a communicator duplicates it, which is collective: every rank of
    ``comm`` must make that call.  The Comm is cached as an MPI attribute of ``comm`` and
    freed when ``comm`` is.
    """
    global _WRAPPER
    if isinstance(comm, Comm):
        return comm
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"expected an mpi4py intracommunicator or a collectives.Comm, "
                        f"got {type(comm).__name__}")
    if _WRAPPER is None:
        _WRAPPER = MPI.Comm.Create_keyval(delete_fn=_free_wrapper)
    wrapper = comm.Get_attr(_WRAPPER)
    if wrapper is None or wrapper._coll == MPI.COMM_NULL:  # none yet, or freed by its user
        wrapper = Comm(comm)
        comm.Set_attr(_WRAPPER, wrapper)
    return wrapper


__all__ = ["Comm", "NATIVE", "OP_NAMES", "wrap"]
