"""``Comm``: an mpi4py communicator whose collectives run our hand-written algorithms.

Method names and signatures are mpi4py's (``Allreduce(sendbuf, recvbuf, op=MPI.SUM)``,
``Bcast(buf, root=0)``, ...), each with an optional ``algorithm=`` keyword.  Anything not
implemented here is looked up on the wrapped communicator, so an existing mpi4py program
switches over by wrapping its communicator and nothing else.  This module is the method
table; the work is done by:

* ``collectives.jobs``: per collective, argument normalisation and checks on the calling
  rank (ValueError / TypeError naming the problem) and the *job* that runs the schedule;
  blocking methods run it at once, ``I...`` methods hand it to the progress thread and
  return a Request;
* ``collectives.agreement``: with ``check=True`` (the default; COLLECTIVES_CHECK=0 turns it
  off) a job first agrees with the other ranks on counts, dtype, op, root and algorithm, so
  a mismatch raises the same error on every rank instead of hanging or truncating;
* ``collectives.executor``: algorithm choice, scratch buffers, the Cython or Python
  executor, queueing behind pending nonblocking collectives, and delegation to MPI's own
  call of what our algorithms do not cover (long double, MAXLOC/MINLOC and user-defined
  ops, derived datatypes, DLPack and ``__cuda_array_interface__`` buffers; see
  ``buffers.Native``).  A delegated call runs on the private duplicate, so it keeps its
  place in the order of this communicator's collectives, and sets ``last_algorithm`` to
  ``"native"`` with the reason logged (logger "collectives", INFO).  The decision rests on
  the kinds of the arguments only, which all ranks share; with ``check`` the agreement
  includes it, so a rank that delegates while another does not raises instead of hanging;
* ``collectives.vectors``: the block layouts of the v-variants;
* ``collectives.derived``: ``Dup``, ``Split``, ``Split_type``, ``Create``,
  ``Create_group``, ``Clone`` and ``Create_cart`` return a ``Comm`` with this one's
  algorithm choices and check setting (COMM_NULL stays COMM_NULL); it owns the new
  communicator and frees it in ``Free``.  After ``Create_cart``, ``comm`` is the
  ``Cartcomm`` and topology methods (``Get_coords``, ``Shift``, ...) reach it through
  attribute forwarding;
* ``collectives.transport``: ``Push``, ``Receive``, ``Pull`` and ``Serve`` on the private
  duplicate.

Every method first tries the fast path (``collectives._engine.Fast``): plain buffers and
buffer specs (v-variants' ``[buf, (counts, displs), datatype]`` too) resolved in Cython, a
cached plan, the same agreement in C, one ``nogil`` run; whatever it does not handle falls
through to the jobs.  A nonblocking method queues a ``_engine.Queued`` on the progress
thread, which there runs the fast path, or the job when the fast path declines.  A schedule that fails part-way
leaves no request open and marks the Comm unusable: later calls raise RuntimeError naming
the collective, step and rank of that failure.
"""
import functools

from mpi4py import MPI

from . import config, jobs, node, transport, watchdog
from .derived import derived
from .executor import NATIVE, TAG, explain, plan_fast, run, start
from .ops import OP_NAMES
from .registry import ALGORITHMS, resolve_name

try:
    from ._engine import Fast, Queued
except ImportError:
    Fast = Queued = None


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
    timeout : float, optional
        The stall watchdog (``collectives.watchdog``): seconds a collective or primitive may
        wait without progress before it raises StallError, or aborts the job (default:
        COLLECTIVES_TIMEOUT; 0: off).  Set it alike on every rank.
    on_timeout : {"raise", "abort"}, optional
        What a stall does (default: COLLECTIVES_TIMEOUT_MODE, else "raise").
    """

    def __init__(self, comm=None, *, algorithms=None, check=None, timeout=None, on_timeout=None, _nodes=None,
                 _env=None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        # What the environment says (collectives.config), read once: calls never read it.
        self._env = config.snapshot() if _env is None else _env
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
        self.check = bool(self._env.check if check is None else check)
        self.timeout, self.on_timeout = watchdog.settings(timeout, on_timeout, self._env)
        self._jobs = 0  # collectives run as jobs (the fast path counts its own): call numbers
        self._scratch = {}  # executor.buffer's reused buffers, by purpose
        self._progress = None  # the thread running nonblocking collectives, once one starts
        self._owned = False  # whether Free also frees ``comm`` (made by Dup, Split, ...)
        # collectives.node.Nodes, built by the first node-aware all-reduce unless the caller knows
        # them (node.FLAT for the sub-communicators node.Nodes makes, which span one level each)
        self._nodes = _nodes
        # Set to the first failure's description when a schedule fails mid-way.
        self._broken = None
        # The fast path reads and sets _broken, _progress, check and last_algorithm here; it
        # caches choices per call shape, so COLLECTIVES_EXPLAIN (a line per call) goes without.
        self._fast = (Fast(self._coll, self, functools.partial(plan_fast, self),
                           [TAG[c] for c in ALGORITHMS], list(ALGORITHMS))
                      if NATIVE and not self._env.explain else None)
        if self.timeout:
            if self._fast is not None:
                self._fast.watch(self.timeout)
            # Finding the nodes takes MPI's own collectives (Split_type), which no watchdog can
            # give up on; the constructor is collective anyway, so the first all-reduce is not.
            if self._nodes is None:
                self._nodes = node.discover(self)

    _stalled = watchdog.stalled

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

    explain = explain

    def Get_rank(self):
        """Rank of this process."""
        return self.rank

    def Get_size(self):
        """Number of processes."""
        return self.size

    # ---- communicators made from this one (collectives.derived) ---------------------------

    Dup = derived("Dup")
    Clone = derived("Clone")
    Split = derived("Split")
    Split_type = derived("Split_type")
    Create = derived("Create")
    Create_group = derived("Create_group")
    Create_cart = derived("Create_cart")

    # ---- collectives: the fast path first, else a job (collectives.jobs) ------------------

    def _start(self, method, builder, args, extra=()):
        """Queue a nonblocking call: ``Fast.<method>(*args)`` on the progress thread, else the
        job ``builder(self, *args, *extra)`` (built here when ``method`` is None); its Request."""
        if self._fast is None or method is None:
            return start(self, builder(self, *args, *extra))
        return start(self, Queued(self._fast, method, args, builder, extra))

    def _general(self, method, builder, args, extra=()):
        """Run a blocking call the fast path declined: behind pending nonblocking calls, where
        ``Fast.<method>`` gets its turn (declining only because it had to wait), else now."""
        if method is not None and self._progress is not None and self._progress.busy():
            self._start(method, builder, args, extra).wait()
        else:
            run(self, builder(self, *args, *extra))

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of every rank."""
        if (self._nodes is None or self._nodes.multi) and node.allreduce(self, sendbuf, recvbuf, op, algorithm):
            return
        if self._fast is not None and self._fast.allreduce(sendbuf, recvbuf, op, algorithm):
            return
        self._general("allreduce", jobs.allreduce, (sendbuf, recvbuf, op, algorithm))

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Nonblocking Allreduce; returns a Request."""
        return self._start("allreduce", jobs.allreduce, (sendbuf, recvbuf, op, algorithm))

    def Bcast(self, buf, root=0, algorithm=None):
        """Broadcast ``buf`` of rank ``root`` into ``buf`` of every rank."""
        if self._fast is not None and self._fast.bcast(buf, root, algorithm):
            return
        self._general("bcast", jobs.bcast, (buf, root, algorithm))

    def Ibcast(self, buf, root=0, algorithm=None):
        """Nonblocking Bcast; returns a Request."""
        return self._start("bcast", jobs.bcast, (buf, root, algorithm))

    def Reduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of rank ``root``."""
        if self._fast is not None and self._fast.reduce(sendbuf, recvbuf, op, root, algorithm):
            return
        self._general("reduce", jobs.reduce, (sendbuf, recvbuf, op, root, algorithm))

    def Ireduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0, algorithm=None):
        """Nonblocking Reduce; returns a Request."""
        return self._start("reduce", jobs.reduce, (sendbuf, recvbuf, op, root, algorithm))

    def Allgather(self, sendbuf, recvbuf, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of every rank."""
        if self._fast is not None and self._fast.allgather(sendbuf, recvbuf, algorithm):
            return
        self._general("allgather", jobs.allgather, (sendbuf, recvbuf, algorithm), (False,))

    def Iallgather(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgather; returns a Request."""
        return self._start("allgather", jobs.allgather, (sendbuf, recvbuf, algorithm), (False,))

    def Allgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Allgather with per-rank counts: ``recvbuf`` is [buf, (counts, displs), datatype]."""
        if self._fast is not None and self._fast.allgatherv(sendbuf, recvbuf, algorithm):
            return
        self._general("allgatherv", jobs.allgather, (sendbuf, recvbuf, algorithm), (True,))

    def Iallgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgatherv; returns a Request."""
        return self._start("allgatherv", jobs.allgather, (sendbuf, recvbuf, algorithm), (True,))

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives block i."""
        if self._fast is not None and self._fast.reduce_scatter(sendbuf, recvbuf, None, op, algorithm):
            return
        self._general("reduce_scatter", jobs.reduce_scatter, (sendbuf, recvbuf, None, op, algorithm),
                      ("Reduce_scatter_block",))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=MPI.SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives ``recvcounts[i]`` elements."""
        if (self._fast is not None and recvcounts is not None
                and self._fast.reduce_scatter(sendbuf, recvbuf, recvcounts, op, algorithm)):
            return
        # Without counts the job gathers them first, a collective that queues behind pending
        # ones: it cannot run on the progress thread itself, so its job is built here.
        self._general(None if recvcounts is None else "reduce_scatter", jobs.reduce_scatter,
                      (sendbuf, recvbuf, recvcounts, op, algorithm), ("Reduce_scatter",))

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=MPI.SUM, algorithm=None):
        """Nonblocking Reduce_scatter_block; returns a Request."""
        return self._start("reduce_scatter", jobs.reduce_scatter, (sendbuf, recvbuf, None, op, algorithm),
                           ("Reduce_scatter_block",))

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=MPI.SUM, algorithm=None):
        """Nonblocking Reduce_scatter; returns a Request."""
        # Without counts the job is built here, as for Reduce_scatter.
        return self._start(None if recvcounts is None else "reduce_scatter", jobs.reduce_scatter,
                           (sendbuf, recvbuf, recvcounts, op, algorithm), ("Reduce_scatter",))

    def Gather(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of rank ``root``."""
        if self._fast is not None and self._fast.gather(sendbuf, recvbuf, root, algorithm):
            return
        self._general("gather", jobs.gather, (sendbuf, recvbuf, root, algorithm), (False,))

    def Gatherv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        if self._fast is not None and self._fast.gatherv(sendbuf, recvbuf, root, algorithm):
            return
        self._general("gatherv", jobs.gather, (sendbuf, recvbuf, root, algorithm), (True,))

    def Scatter(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter block i of ``sendbuf`` at rank ``root`` to ``recvbuf`` of rank i."""
        if self._fast is not None and self._fast.scatter(sendbuf, recvbuf, root, algorithm):
            return
        self._general("scatter", jobs.scatter, (sendbuf, recvbuf, root, algorithm), (False,))

    def Scatterv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        if self._fast is not None and self._fast.scatterv(sendbuf, recvbuf, root, algorithm):
            return
        self._general("scatterv", jobs.scatter, (sendbuf, recvbuf, root, algorithm), (True,))

    def Barrier(self, algorithm=None):
        """Block until every rank has entered the barrier."""
        if self._fast is not None and self._fast.barrier(algorithm):
            return
        self._general("barrier", jobs.barrier, (algorithm,))

    def Ibarrier(self, algorithm=None):
        """Nonblocking Barrier; returns a Request."""
        return self._start("barrier", jobs.barrier, (algorithm,))

    # ---- point-to-point on the private communicator (collectives.transport) ---------------

    def Push(self, buf, dest):
        """Start sending ``buf`` to rank ``dest``, where ``Receive`` takes it; returns a Request."""
        return transport.push(self._coll, buf, dest, self)

    def Receive(self, buf, source=MPI.ANY_SOURCE):
        """Start receiving one ``Push`` of exactly the size of ``buf``; returns a Request."""
        return transport.receive(self._coll, buf, source, self)

    def Pull(self, buf, owner):
        """Start fetching into ``buf`` what rank ``owner`` serves; returns a Request."""
        return transport.pull(self._coll, buf, owner, self)

    def Serve(self, buf, source=MPI.ANY_SOURCE):
        """Answer one ``Pull`` with ``buf``; returns the rank that asked."""
        return transport.serve(self._coll, buf, source, self)

    def Wait(self, requests):
        """Complete every request in ``requests`` (point-to-point or collective)."""
        return transport.wait(requests)


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
