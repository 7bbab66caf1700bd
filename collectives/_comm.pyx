# cython: language_level=3
"""The compiled base of collectives.Comm: an mpi4py intracommunicator that holds its engine
(collectives._engine) in a C field, and whose collective methods, with mpi4py's names and
signatures, hand their arguments to it, which describes and runs the call.

A call goes from the caller to the engine without a Python frame or a dictionary lookup on
its way.  collectives.comm.Comm derives from it and adds the rest.
"""
from mpi4py cimport MPI as cMPI
from mpi4py import MPI
from mpi4py.libmpi cimport MPI_Comm

from collectives._engine cimport Engine

cdef object SUM = MPI.SUM


cdef class Methods(cMPI.Intracomm):
    """mpi4py's collective methods, on the engine in ``_engine``."""

    cdef public Engine _engine

    def Allreduce(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of every rank."""
        self._engine.allreduce(sendbuf, recvbuf, op, algorithm, False)

    def Iallreduce(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Nonblocking Allreduce; returns a Request."""
        return self._engine.allreduce(sendbuf, recvbuf, op, algorithm, True)

    def Bcast(self, buf, root=0, algorithm=None):
        """Broadcast ``buf`` of rank ``root`` into ``buf`` of every rank."""
        self._engine.bcast(buf, root, algorithm, False)

    def Ibcast(self, buf, root=0, algorithm=None):
        """Nonblocking Bcast; returns a Request."""
        return self._engine.bcast(buf, root, algorithm, True)

    def Reduce(self, sendbuf, recvbuf, op=SUM, root=0, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op`` into ``recvbuf`` of rank ``root``."""
        self._engine.reduce(sendbuf, recvbuf, op, root, algorithm, False)

    def Ireduce(self, sendbuf, recvbuf, op=SUM, root=0, algorithm=None):
        """Nonblocking Reduce; returns a Request."""
        return self._engine.reduce(sendbuf, recvbuf, op, root, algorithm, True)

    def Allgather(self, sendbuf, recvbuf, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of every rank."""
        self._engine.allgather(sendbuf, recvbuf, algorithm, False)

    def Iallgather(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgather; returns a Request."""
        return self._engine.allgather(sendbuf, recvbuf, algorithm, True)

    def Allgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Allgather with per-rank counts: ``recvbuf`` is [buf, (counts, displs), datatype]."""
        self._engine.allgatherv(sendbuf, recvbuf, algorithm, False)

    def Iallgatherv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Allgatherv; returns a Request."""
        return self._engine.allgatherv(sendbuf, recvbuf, algorithm, True)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives block i."""
        self._engine.reduce_scatter(sendbuf, recvbuf, None, op, algorithm, True, False)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM, algorithm=None):
        """Combine ``sendbuf`` of every rank with ``op``; rank i receives ``recvcounts[i]`` elements."""
        self._engine.reduce_scatter(sendbuf, recvbuf, recvcounts, op, algorithm, False, False)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Nonblocking Reduce_scatter_block; returns a Request."""
        return self._engine.reduce_scatter(sendbuf, recvbuf, None, op, algorithm, True, True)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM, algorithm=None):
        """Nonblocking Reduce_scatter; returns a Request."""
        return self._engine.reduce_scatter(sendbuf, recvbuf, recvcounts, op, algorithm, False, True)

    def Gather(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather ``sendbuf`` of every rank, in rank order, into ``recvbuf`` of rank ``root``."""
        self._engine.rooted("Gather", sendbuf, recvbuf, root, algorithm, False)

    def Igather(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Nonblocking Gather; returns a Request."""
        return self._engine.rooted("Gather", sendbuf, recvbuf, root, algorithm, True)

    def Gatherv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Gather with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        self._engine.rooted("Gatherv", sendbuf, recvbuf, root, algorithm, False)

    def Igatherv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Nonblocking Gatherv; returns a Request."""
        return self._engine.rooted("Gatherv", sendbuf, recvbuf, root, algorithm, True)

    def Scatter(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter block i of ``sendbuf`` at rank ``root`` to ``recvbuf`` of rank i."""
        self._engine.rooted("Scatter", sendbuf, recvbuf, root, algorithm, False)

    def Iscatter(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Nonblocking Scatter; returns a Request."""
        return self._engine.rooted("Scatter", sendbuf, recvbuf, root, algorithm, True)

    def Scatterv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Scatter with per-rank counts given at the root: [buf, (counts, displs), datatype]."""
        self._engine.rooted("Scatterv", sendbuf, recvbuf, root, algorithm, False)

    def Iscatterv(self, sendbuf, recvbuf, root=0, algorithm=None):
        """Nonblocking Scatterv; returns a Request."""
        return self._engine.rooted("Scatterv", sendbuf, recvbuf, root, algorithm, True)

    def Alltoall(self, sendbuf, recvbuf, algorithm=None):
        """Send block j of ``sendbuf`` to rank j, which receives it as block i of ``recvbuf``
        from rank i; every block of one count."""
        self._engine.alltoall(sendbuf, recvbuf, algorithm, False)

    def Ialltoall(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Alltoall; returns a Request."""
        return self._engine.alltoall(sendbuf, recvbuf, algorithm, True)

    def Alltoallv(self, sendbuf, recvbuf, algorithm=None):
        """Alltoall with per-rank counts: ``sendbuf`` and ``recvbuf`` are [buf, (counts, displs),
        datatype]; rank i's send count to j must be rank j's receive count from i."""
        self._engine.alltoallv(sendbuf, recvbuf, algorithm, False)

    def Ialltoallv(self, sendbuf, recvbuf, algorithm=None):
        """Nonblocking Alltoallv; returns a Request."""
        return self._engine.alltoallv(sendbuf, recvbuf, algorithm, True)

    def Scan(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Combine ``sendbuf`` of ranks 0 .. i with ``op``, in rank order, into ``recvbuf`` of rank i."""
        self._engine.scan(sendbuf, recvbuf, op, algorithm, False, False)

    def Iscan(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Nonblocking Scan; returns a Request."""
        return self._engine.scan(sendbuf, recvbuf, op, algorithm, False, True)

    def Exscan(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Scan over ranks 0 .. i-1 into ``recvbuf`` of rank i; rank 0's ``recvbuf`` is left untouched."""
        self._engine.scan(sendbuf, recvbuf, op, algorithm, True, False)

    def Iexscan(self, sendbuf, recvbuf, op=SUM, algorithm=None):
        """Nonblocking Exscan; returns a Request."""
        return self._engine.scan(sendbuf, recvbuf, op, algorithm, True, True)

    def Barrier(self, algorithm=None):
        """Block until every rank has entered the barrier."""
        self._engine.barrier(algorithm, False)

    def Ibarrier(self, algorithm=None):
        """Nonblocking Barrier; returns a Request."""
        return self._engine.barrier(algorithm, True)


cdef class Functional:
    """The functional calls that run in the engine: ``Functional(wrap).allreduce`` is
    ``collectives.allreduce``.  ``wrap`` (collectives.comm.wrap) gives an mpi4py
    intracommunicator's Comm.  A method of an extension type rather than a Python function:
    the call goes from Python to the engine in one step, and the engine of the latest mpi4py
    communicator is kept by its handle, so a loop over one communicator finds it without a
    Python call.
    """
    cdef object wrap
    cdef MPI_Comm last_handle
    cdef Engine last_engine

    def __init__(self, wrap):
        self.wrap = wrap

    def allreduce(self, comm, array, op="sum", algorithm="auto", out=None):
        """``collectives.allreduce(comm, array, op="sum", algorithm="auto", out=None)``: combine
        ``array`` of every rank with ``op``; every rank gets the result, in ``out`` when given.
        ``comm`` is a collectives.Comm or an mpi4py intracommunicator."""
        cdef Engine engine
        if type(comm) is cMPI.Intracomm:
            engine = self.last_engine
            if engine is None or engine.broken is not None or (<cMPI.Comm>comm).ob_mpi != self.last_handle:
                engine = self.wrap(comm)._engine  # none yet, another communicator, or freed
                self.last_engine, self.last_handle = engine, (<cMPI.Comm>comm).ob_mpi
        elif isinstance(comm, Methods) and (<Methods>comm)._engine is not None:
            engine = (<Methods>comm)._engine
        else:
            engine = self.wrap(comm)._engine  # TypeError when comm is not a communicator
        return engine.allreduce_array(array, op, algorithm, out)
