"""Point-to-point primitives on one mpi4py communicator: push, receive, pull, serve, wait.

* ``push(coll, buf, dest)`` starts sending ``buf`` to ``dest``, where a ``receive`` takes it;
* ``pull(coll, buf, owner)`` asks ``owner`` for its data: a small request carrying the size
  of ``buf``, then the reply lands in ``buf``;
* ``serve(coll, buf)`` is the owner's side: it answers one pull from any rank with ``buf``
  and returns who asked;
* ``wait(requests)`` completes a list of requests (these, or nonblocking collectives').

``coll`` is the private duplicate of a ``collectives.Comm`` (``collectives.p2p`` and the
Comm's ``Push``/``Pull``/... methods pass it); the traffic uses the tags in ``TAG``, which
no collective uses, so it never matches a user's message, nor a collective's, even while a
nonblocking collective is in flight.  Sizes are checked: a message whose length differs from
the buffer meant for it raises ValueError on the rank that notices (the receiver, the puller
or the server), and never leaves the other side waiting.

A buffer goes as one message of bytes, however large: over 2^31 - 1 bytes mpi4py calls
MPI-4's large-count functions (MPI_Isend_c, MPI_Get_count_c), so the size check sees the
true count.  An MPI older than 4.0 has none, and mpi4py would refuse such a count with
MPI_ERR_ARG; such a buffer raises ValueError here first, naming the reason.
"""
import numpy as np
from mpi4py import MPI

from ._buffers import flat
from .constants import TAG_PULL, TAG_PUSH, TAG_REPLY
from .schedule import INT_MAX
from .watchdog import StallError, stalled, watched

# Their tags on the private communicator (collectives.constants declares every tag).
TAG = {"push": TAG_PUSH, "pull": TAG_PULL, "reply": TAG_REPLY}

# A mismatched pull is answered with a reply of the wrong length: empty, or one byte when
# the puller asked for zero bytes (its receive then has room for exactly one byte).
_MISMATCH = np.zeros(1, np.uint8)


# Whether one message may carry more than INT_MAX bytes (MPI-4 large counts).
LARGE_COUNT = MPI.Get_version() >= (4, 0)


def _data(buf, writable, name):
    arr = flat(buf, "buf", writable=writable)
    if arr.nbytes > INT_MAX and not LARGE_COUNT:
        raise ValueError(f"{name}: a {arr.nbytes}-byte buffer needs MPI-4 large counts; this "
                         f"MPI is {'.'.join(map(str, MPI.Get_version()))}")
    return arr.view(np.uint8) if arr.size else np.empty(0, np.uint8)


def _peer(rank, size, name, any_source=False):
    if any_source and rank == MPI.ANY_SOURCE:
        return rank
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < size:
        raise ValueError(f"{name}: invalid rank {rank!r} for a communicator of size {size}")
    return int(rank)


class Request:
    """A started push, receive or pull; ``wait()`` completes it and returns the peer's rank.

    With ``watch`` (a collectives.Comm whose ``timeout`` is set), ``wait`` polls and a request
    that makes no progress for that long raises StallError naming ``what`` (see
    ``collectives.watchdog``); ``peers`` are the (rank, kind) of the requests.
    """

    def __init__(self, requests, peer, check=None, keep=(), watch=None, what=None, peers=()):
        self._watch, self._what, self._peers = watch, what, peers
        self._requests = requests
        self._statuses = [MPI.Status() for _ in requests]
        self._peer = peer
        self._check = check
        self._keep = keep  # buffers MPI reads or writes until completion; None once done
        self._error = None

    def _progress(self, block):
        # A completed MPI request turns null; skipping those keeps the statuses they left.
        for i, (req, status) in enumerate(zip(self._requests, self._statuses)):
            if not req:
                continue
            try:
                if block and self._watch is not None and self._watch.timeout:
                    _watched(self._watch, [req], [self._peers[i]], self._what,
                             lambda: req.Test(status))
                elif block:
                    req.Wait(status)
                elif not req.Test(status):
                    return False
            except MPI.Exception as exc:
                if exc.Get_error_class() != MPI.ERR_TRUNCATE:
                    raise
                self._error = ValueError(f"message from rank {status.Get_source()} is larger "
                                         "than the buffer meant for it")
        if self._keep is not None:
            self._keep = None
            if self._check is not None and self._error is None:
                try:
                    self._peer = self._check(self._statuses[-1])
                except ValueError as exc:
                    self._error = exc
        if self._error is not None:
            raise self._error
        return True

    def wait(self):
        """Block until done; return the peer's rank (for a receive, the rank that pushed)."""
        self._progress(block=True)
        return self._peer

    def test(self):
        """True when done, raising what ``wait`` would; never blocks."""
        return self._progress(block=False)

    Wait = wait
    Test = test


def _watched(comm, requests, peers, what, test):
    """``watchdog.watched`` for a primitive of Comm ``comm``: a stall makes it unusable (or
    aborts the job in the watchdog's abort mode)."""
    try:
        watched(requests, comm.timeout, peers, what, None, comm.rank, test)
    except StallError as exc:
        stalled(comm._engine, exc)
        raise


def push(coll, buf, dest, watch=None):
    """Start sending ``buf`` to rank ``dest``, where ``receive`` takes it; return a Request
    (``watch``: the Comm whose watchdog applies, as for every function here)."""
    dest = _peer(dest, coll.size, "push")
    data = _data(buf, writable=False, name="push")
    return Request([coll.Isend([data, MPI.BYTE], dest, TAG["push"])], dest, keep=(data,),
                   watch=watch, what=f"push to rank {dest}", peers=[(dest, "send")])


# Open MPI delivers a message a rank sends to itself truncated to the receive buffer without
# reporting MPI_ERR_TRUNCATE (seen with 5.0.11's self transport), so a push that is too large
# would pass our size check.  Where a push may come from this rank, a receive there lands in
# room one byte larger than the buffer: a longer message then shows in the count.
_SILENT_SELF_TRUNCATION = MPI.Get_library_version().startswith("Open MPI")


def receive(coll, buf, source=MPI.ANY_SOURCE, watch=None):
    """Start receiving one push of exactly the size of ``buf`` from ``source`` (default: any)."""
    source = _peer(source, coll.size, "receive", any_source=True)
    data = _data(buf, writable=True, name="receive")
    spare = _SILENT_SELF_TRUNCATION and source in (MPI.ANY_SOURCE, coll.Get_rank())
    room = np.empty(data.size + 1, np.uint8) if spare else data

    def check(status):
        got, sender = status.Get_count(MPI.BYTE), status.Get_source()
        if got > data.size and spare:
            raise ValueError(f"message from rank {sender} is larger than the buffer meant for it "
                             f"({data.size} bytes)")
        if got != data.size:
            raise ValueError(f"receive: rank {sender} pushed {got} bytes into a {data.size}-byte buffer")
        if spare:
            data[:] = room[:data.size]
        return sender

    return Request([coll.Irecv([room, MPI.BYTE], source, TAG["push"])], source, check, (room, data),
                   watch, f"receive from {_name(source)}", [(source, "receive")])


def pull(coll, buf, owner, watch=None):
    """Start fetching into ``buf`` what rank ``owner`` serves; return a Request."""
    owner = _peer(owner, coll.size, "pull")
    data = _data(buf, writable=True, name="pull")
    room = data if data.size else np.empty(1, np.uint8)
    ask = np.array([data.size], np.int64)
    # The reply's receive is posted before the request leaves, so the owner's send never waits.
    reply = coll.Irecv([room, MPI.BYTE], owner, TAG["reply"])
    sent = coll.Isend([ask, MPI.INT64_T], owner, TAG["pull"])

    def check(status):
        if status.Get_count(MPI.BYTE) != data.size:
            raise ValueError(f"pull: rank {owner} serves a buffer whose size differs from "
                             f"this {data.size}-byte buffer")
        return owner

    return Request([sent, reply], owner, check, (room, ask), watch, f"pull from rank {owner}",
                   [(owner, "send"), (owner, "receive")])


def serve(coll, buf, source=MPI.ANY_SOURCE, watch=None):
    """Answer one pull from ``source`` (default: any rank) with ``buf``; return the rank that asked."""
    source = _peer(source, coll.size, "serve", any_source=True)
    data = _data(buf, writable=False, name="serve")
    ask = np.empty(1, np.int64)
    status = MPI.Status()
    _blocking(coll.Irecv([ask, MPI.INT64_T], source, TAG["pull"]), watch,
              f"serve to {_name(source)}", (source, "receive"), status)
    asker, want = status.Get_source(), int(ask[0])
    reply = data if want == data.size else _MISMATCH[:0 if want else 1]
    _blocking(coll.Isend([reply, MPI.BYTE], asker, TAG["reply"]), watch,
              f"serve to rank {asker}", (asker, "send"))
    if want != data.size:
        raise ValueError(f"serve: rank {asker} pulls {want} bytes but this rank serves {data.size}")
    return asker


def _blocking(req, watch_comm, what, peer, status=None):
    """Complete ``req`` as a blocking call would, watched when ``watch_comm`` has a timeout."""
    if watch_comm is not None and watch_comm.timeout:
        _watched(watch_comm, [req], [peer], what, lambda: req.Test(status))
    else:
        req.Wait(status)


def _name(source):
    return "any rank" if source == MPI.ANY_SOURCE else f"rank {source}"


def wait(requests):
    """Complete every request in ``requests``; return what each one's ``wait()`` returns."""
    return [req.wait() for req in requests]


__all__ = ["TAG", "Request", "push", "receive", "pull", "serve", "wait"]
