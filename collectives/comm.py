"""``Comm``: an mpi4py communicator whose collectives run our hand-written algorithms.

Method names and signatures are mpi4py's (``Allreduce(sendbuf, recvbuf, op=MPI.SUM)``,
``Bcast(buf, root=0)``, ...), each with an optional ``algorithm=`` keyword.  Anything not
implemented here is looked up on the wrapped communicator, so an existing mpi4py program
switches over by wrapping its communicator and nothing else.

This module and its compiled base (collectives._comm, which holds the collective methods) are
the method table and hold no logic of a collective: each method hands its arguments to the
Comm's ``collectives._engine.Engine``, which describes the call (the same description for
every call form: blocking, nonblocking, functional), selects and plans it
(``collectives.plans``), agrees on it across ranks when ``check`` is on and runs it; a call no
algorithm covers runs MPI's own collective on the private duplicate, where it keeps its
place in the order of this communicator's collectives.  ``I...`` methods queue the same
call on a progress thread and return a Request.  A schedule that fails part-way leaves no
request open and marks the Comm unusable: later calls raise RuntimeError naming the
collective, step and rank of that failure.

The Comm finds its nodes when it is made (``collectives.node``): across nodes of several
ranks, the all-reduce's node-aware algorithms are rows of the same selection.
"""
import numpy as np
from mpi4py import MPI

from . import abort, config, eager, kernels, node, plans, shm, timeline as timeline_module, transport, watchdog
from .constants import COLLECTIVES
from .derived import derived
from .exchange import FUSED_DEFAULT
from .registry import resolve_name

try:
    from . import _comm
    from ._engine import Engine
except ImportError as exc:  # pragma: no cover - an install without its extensions
    raise ImportError(f"collectives: the native extensions did not load ({exc}); build them with "
                      "'make build' or 'pip install .' against the MPI that mpi4py loads") from exc


class Comm(_comm.Methods):
    """An mpi4py intracommunicator whose collectives run collectives' algorithms.

    ``Comm(comm)`` shares ``comm``'s handle: it is that communicator, so MPI-IO, RMA windows,
    ``mpi4py.util.pkl5``, ``mpi4py.futures`` and any library that takes an mpi4py
    communicator take it, and every method it does not implement is mpi4py's on that handle.
    Its collectives run on a private duplicate, where they never meet the program's own
    messages.  A Cartcomm, Graphcomm or Distgraphcomm gives the Comm subclass of its kind.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        The communicator to take over (default COMM_WORLD).  ``Free`` on this Comm releases
        what it made and leaves ``comm``'s handle to its owner; the Comms that ``Dup``,
        ``Split`` and the other constructors return own their handles and free them.
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
    timeline : str or False, optional
        Record a timeline of every collective call of this process into this trace file
        (default: COLLECTIVES_TIMELINE; collectives.timeline).  Give it alike on every rank.
        Once a timeline is on, every Comm records into it, unless made with ``timeline=False``.
    """

    _mpi = MPI.Intracomm  # the mpi4py class of this kind
    # No instance dictionary, as mpi4py's communicators have none: an attribute is found in
    # its slot, and a method on the class, without a dictionary lookup per call.
    __slots__ = ("_env", "algorithms", "_timeout", "_on_timeout", "_owned", "_coll", "_scratch", "_live",
                 "_recording", "_eager")

    def __new__(cls, comm=None, *args, **kwargs):
        comm = MPI.COMM_WORLD if comm is None else comm
        if cls is Comm:
            cls = _KIND.get(type(comm), next((k for t, k in _KIND.items() if isinstance(comm, t)), Comm))
        # The compiled base's constructor (Intracomm's) for every kind: Cartcomm's refuses a
        # subclass that does not derive from it first.
        return _comm.Methods.__new__(cls, comm)

    def __init__(self, comm=None, *, algorithms=None, check=None, timeout=None, on_timeout=None, timeline=None,
                 _nodes=None, _env=None, _owned=False, _eager=None, _shared=True):
        if self.Is_inter():
            raise TypeError("collectives.Comm takes intracommunicators only")
        # What the environment says (collectives.config), read once: calls never read it.
        self._env = config.snapshot() if _env is None else _env
        self.algorithms = {}
        for collective, name in (algorithms or {}).items():
            if collective not in COLLECTIVES:
                raise ValueError(f"unknown collective {collective!r}; one of {', '.join(COLLECTIVES)}")
            if resolve_name(collective, name) != "auto":
                self.algorithms[collective] = resolve_name(collective, name)
        check = bool(self._env.check if check is None else check)
        self._timeout, self._on_timeout = watchdog.settings(timeout, on_timeout, self._env)
        self._owned = _owned  # whether Free frees the shared handle (made by Dup, Split, ...)
        self._coll = MPI.Intracomm(self).Dup()  # a plain Intracomm: the Dup of a Comm is a Comm
        # Our errors become Python exceptions whatever handler the program's communicator has.
        self._coll.Set_errhandler(MPI.ERRORS_RETURN)
        self._scratch = {}  # buffer()'s reused buffers, by purpose
        self._live = True  # until Free
        abort.arm(self._env.abort_on_error)
        recorder = None if timeline is False else timeline_module.recorder(timeline or self._env.timeline,
                                                                            self._coll)
        self._recording = None if recorder is not None else False  # the timeline of the Comms it makes
        # How this Comm's schedules cut their messages, alike on every rank (collectives.eager).
        self._eager = eager.agreed(self._coll, self._env) if _eager is None else _eager
        nodes = node.discover(self._coll, self._env.node, self._child) if _nodes is None else _nodes
        # A segment for ranks on one node (collectives.shm): not across nodes, nor a lane between them.
        segment = shm.make(self._coll, self._env, not NATIVE) if _shared and nodes is node.FLAT else None
        self._engine = Engine(self._coll, self._env, check, self._timeout, self._on_timeout, self.algorithms,
                              nodes, plans.make, not NATIVE, recorder, *self._eager, segment)

    def _adopt(self, made):
        """``made`` (a communicator one of this Comm's constructors returned) as a Comm of its
        kind that owns it, with this Comm's settings; COMM_NULL and intercommunicators as they are."""
        if made == MPI.COMM_NULL or made.Is_inter():
            return made
        return Comm(made, algorithms=self.algorithms, check=self.check, timeout=self._timeout,
                    on_timeout=self._on_timeout, timeline=self._recording, _env=self._env, _owned=True,
                    _eager=self._eager)

    def _child(self, made, across=False):
        """A Comm over ``made`` (split from this one by node.discover) that owns it and never
        looks for nodes itself: one node's ranks, or with ``across`` a lane across nodes, whose
        messages go whole (the eager limit is the node's, collectives.eager).

        Unchecked: only the node-aware all-reduces call it, after this Comm's agreement on
        the algorithm, count, dtype and op, from which every phase's arguments follow on every
        rank (a check per phase would add a round trip per phase, one of them between nodes)."""
        return Comm(made, algorithms={k: v for k, v in self.algorithms.items() if k != "allreduce"},
                    check=False, timeout=self._timeout, on_timeout=self._on_timeout, timeline=self._recording,
                    _nodes=node.FLAT, _env=self._env, _owned=True, _eager=(0, 0, FUSED_DEFAULT) if across else self._eager,
                    _shared=not across)

    def __repr__(self):
        return f"<collectives.{type(self).__name__} rank {self.Get_rank()} of {self.Get_size()}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()

    def __copy__(self):
        """A communicator is a handle to something shared: copies are the Comm itself."""
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("a collectives.Comm cannot be pickled: it is a handle to a running MPI job")

    # ---- the engine's state, as the Comm's attributes --------------------------------------

    @property
    def comm(self):
        """This communicator as a plain mpi4py communicator of its kind (the same handle): MPI's
        own collectives."""
        return self._mpi(self)

    @property
    def check(self):
        """Whether collectives agree across ranks on their arguments first."""
        return self._engine.check

    @check.setter
    def check(self, value):
        self._engine.check = bool(value)

    @property
    def timeout(self):
        """The stall watchdog's limit in seconds (0: off)."""
        return self._timeout

    @property
    def on_timeout(self):
        """What a stall does: "raise" or "abort"."""
        return self._on_timeout

    @property
    def last_algorithm(self):
        """The algorithm of this rank's latest collective call ("native": MPI's own)."""
        return self._engine.last_algorithm

    @property
    def _nodes(self):
        return self._engine.nodes

    @property
    def _broken(self):
        return self._engine.broken

    @property
    def _progress(self):
        return self._engine.progress

    def Free(self):
        """Finish the pending nonblocking collectives and release what this Comm made (its
        private duplicate, node communicators, progress thread); the shared handle too when
        this Comm owns it (one that Dup, Split and the other constructors returned)."""
        if not self._live:
            return
        self._live = False
        engine = self._engine
        engine.close()
        engine.broken = "the Comm has been freed"
        self._coll.Free()
        self._scratch = {}
        engine.nodes.free()
        if self._owned:
            MPI.Intracomm.Free(self)

    def explain(self, collective, count=0, dtype="float32", algorithm=None):
        """Why ``collective`` over ``count`` elements of ``dtype`` would run the algorithm it
        would, as "<algorithm>: <reason>" (the request, table row, restriction or fallback)."""
        return plans.explain(self._engine, collective, count, dtype, algorithm)

    # ---- communicators made from this one (collectives.derived) ---------------------------

    Dup = derived(MPI.Intracomm.Dup)
    Clone = derived(MPI.Intracomm.Clone)
    Dup_with_info = derived(MPI.Intracomm.Dup_with_info)
    Idup = derived(MPI.Intracomm.Idup, request=True)
    Split = derived(MPI.Intracomm.Split)
    Split_type = derived(MPI.Intracomm.Split_type)
    Create = derived(MPI.Intracomm.Create)
    Create_group = derived(MPI.Intracomm.Create_group)
    Create_cart = derived(MPI.Intracomm.Create_cart)
    Create_graph = derived(MPI.Intracomm.Create_graph)
    Create_dist_graph = derived(MPI.Intracomm.Create_dist_graph)
    Create_dist_graph_adjacent = derived(MPI.Intracomm.Create_dist_graph_adjacent)

    # The collective methods (Allreduce, Iallreduce, ..., Barrier, Ibarrier) are those of the
    # compiled base, collectives._comm.Methods.

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


class _Neighbourhood:
    """mpi4py's neighbourhood collectives of a topology communicator, on the engine
    (collectives.neighbors says how the blocks meet their neighbours); Neighbor_alltoallw
    stays MPI's own."""

    __slots__ = ()

    def Neighbor_allgather(self, sendbuf, recvbuf, algorithm=None):
        """Send ``sendbuf`` to every destination; receive block k of ``recvbuf`` from source k."""
        self._engine.neighbor("Neighbor_allgather", sendbuf, recvbuf, algorithm, False)

    def Neighbor_allgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Neighbor_allgather with per-source counts: ``recvbuf`` is [buf, (counts, displs), datatype]."""
        self._engine.neighbor("Neighbor_allgatherv", sendbuf, recvbuf, algorithm, False)

    def Neighbor_alltoall(self, sendbuf, recvbuf, algorithm=None):
        """Send block k of ``sendbuf`` to destination k; receive block k of ``recvbuf`` from source k."""
        self._engine.neighbor("Neighbor_alltoall", sendbuf, recvbuf, algorithm, False)

    def Neighbor_alltoallv(self, sendbuf, recvbuf, algorithm=None):
        """Neighbor_alltoall with per-neighbour counts: [buf, (counts, displs), datatype] each."""
        self._engine.neighbor("Neighbor_alltoallv", sendbuf, recvbuf, algorithm, False)

    def Ineighbor_allgather(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Neighbor_allgather; returns a Request."""
        return self._engine.neighbor("Neighbor_allgather", sendbuf, recvbuf, algorithm, True)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Neighbor_allgatherv; returns a Request."""
        return self._engine.neighbor("Neighbor_allgatherv", sendbuf, recvbuf, algorithm, True)

    def Ineighbor_alltoall(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Neighbor_alltoall; returns a Request."""
        return self._engine.neighbor("Neighbor_alltoall", sendbuf, recvbuf, algorithm, True)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Neighbor_alltoallv; returns a Request."""
        return self._engine.neighbor("Neighbor_alltoallv", sendbuf, recvbuf, algorithm, True)


class Cartcomm(_Neighbourhood, Comm, MPI.Cartcomm):
    """A Cartesian-topology Comm: mpi4py's Cartcomm methods, collectives' collectives."""

    _mpi = MPI.Cartcomm
    __slots__ = ()

    Sub = derived(MPI.Cartcomm.Sub, MPI.Cartcomm)


class Graphcomm(_Neighbourhood, Comm, MPI.Graphcomm):
    """A graph-topology Comm: mpi4py's Graphcomm methods, collectives' collectives."""

    _mpi = MPI.Graphcomm
    __slots__ = ()


class Distgraphcomm(_Neighbourhood, Comm, MPI.Distgraphcomm):
    """A distributed-graph-topology Comm: mpi4py's Distgraphcomm methods, collectives' collectives."""

    _mpi = MPI.Distgraphcomm
    __slots__ = ()


# The Comm class of each topology kind mpi4py returns.
_KIND = {MPI.Cartcomm: Cartcomm, MPI.Graphcomm: Graphcomm, MPI.Distgraphcomm: Distgraphcomm}


# Whether the native executor and kernels run (else their NumPy twins: COLLECTIVES_PUREPYTHON=1).
NATIVE = not kernels.PUREPYTHON


def run(comm, job):
    """Run ``job()`` on the collectives.Comm ``comm`` now, or after the nonblocking collectives
    still pending on it; ``job``'s result.  For collectives built on a Comm's own (the
    compressed all-reduce): they keep their place among the Comm's collectives."""
    return comm._engine.run(job)


def buffer(comm, purpose, nbytes):
    """A reused, pre-touched scratch buffer of at least ``nbytes`` of the Comm ``comm`` for ``purpose``."""
    buf = comm._scratch.get(purpose)
    if buf is None or buf.nbytes < nbytes:
        buf = np.zeros(max(nbytes, 64), np.uint8)
        comm._scratch[purpose] = buf
    return buf[:nbytes]


_WRAPPER = None  # MPI attribute key under which a communicator keeps its Comm
_WRAPPED = {}  # the same Comms by their communicator's handle, found without an MPI call


def _free_wrapper(comm, keyval, wrapper):
    _WRAPPED.pop(comm.handle, None)
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
    wrapper = _WRAPPED.get(getattr(comm, "handle", None))
    if wrapper is not None and wrapper._live:
        return wrapper
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"expected an mpi4py intracommunicator or a collectives.Comm, "
                        f"got {type(comm).__name__}")
    if _WRAPPER is None:
        _WRAPPER = MPI.Comm.Create_keyval(delete_fn=_free_wrapper)
    wrapper = comm.Get_attr(_WRAPPER)
    if wrapper is None or not wrapper._live:  # none yet, or freed by its user
        wrapper = Comm(comm)
        comm.Set_attr(_WRAPPER, wrapper)
    _WRAPPED[comm.handle] = wrapper
    return wrapper


__all__ = ["Cartcomm", "Comm", "Distgraphcomm", "Graphcomm", "NATIVE", "buffer", "run", "wrap"]
