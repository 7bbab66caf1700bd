"""Point-to-point primitives on a communicator's private duplicate: push, receive, pull, serve, wait.

* ``push(comm, buf, dest)`` starts sending ``buf`` to ``dest``, where a ``receive`` takes it;
* ``pull(comm, buf, owner)`` asks ``owner`` for its data: a small request carrying the size
  of ``buf``, then the reply lands in ``buf``;
* ``serve(comm, buf)`` is the owner's side: it answers one pull from any rank with ``buf``
  and returns who asked;
* ``wait(requests)`` completes a list of requests (these, or nonblocking collectives').

``comm`` is a ``collectives.Comm`` or an mpi4py communicator (wrapped once, see
``collectives.comm.wrap``).  The messages go over the Comm's private duplicate as
``collectives.transport`` describes: reserved tags, sizes checked on both sides, MPI-4
large counts for buffers over 2^31 - 1 bytes.
"""
from mpi4py import MPI

from . import transport
from .comm import wrap
from .transport import TAG, Request, wait


def push(comm, buf, dest):
    """Start sending ``buf`` to rank ``dest``, where ``receive`` takes it; return a Request."""
    c = wrap(comm)
    return transport.push(c._coll, buf, dest, c)


def receive(comm, buf, source=MPI.ANY_SOURCE):
    """Start receiving one push of exactly the size of ``buf`` from ``source`` (default: any)."""
    c = wrap(comm)
    return transport.receive(c._coll, buf, source, c)


def pull(comm, buf, owner):
    """Start fetching into ``buf`` what rank ``owner`` serves; return a Request."""
    c = wrap(comm)
    return transport.pull(c._coll, buf, owner, c)


def serve(comm, buf, source=MPI.ANY_SOURCE):
    """Answer one pull from ``source`` (default: any rank) with ``buf``; return the rank that asked."""
    c = wrap(comm)
    return transport.serve(c._coll, buf, source, c)


__all__ = ["TAG", "Request", "push", "receive", "pull", "serve", "wait"]
