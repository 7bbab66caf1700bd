"""Job builders: one per collective, each ``builder(comm, ...) -> job`` for a collectives.Comm.

A builder normalises and checks the call's arguments on the calling rank (ValueError /
TypeError naming the problem), chooses the algorithm, and returns a job: a function of no
arguments that, with ``comm.check``, first agrees with the other ranks
(``collectives.agreement``) and then runs the schedule (``collectives.executor``).  Arguments
no algorithm covers (``buffers.Native``) give a job running MPI's own call instead.  The
builders serve the calls the fast path declines, blocking or nonblocking (a queued call's
job is built on the progress thread in its turn, ``_engine.Queued``, except for
Reduce_scatter without counts, whose builder runs a collective itself).
"""
import functools

import numpy as np

from .agreement import COUNTS, agree, agreed
from .buffers import Native, is_in_place, parse
from .exchange import HEADER
from .executor import BYTE, as_bytes, buffer, choose, execute, native_job, run
from .ops import check_op
from .schedule import displacements
from .vectors import pack, root_blocks, unpack


def _job(collective, native):
    """Decorate a job builder with ``agreement.agreed``; when it raises Native,
    ``native(*args)`` gives the mpi4py method name and arguments of the same call, which MPI
    then runs."""
    def decorate(builder):
        checked = agreed(collective)(builder)

        @functools.wraps(builder)
        def wrapper(comm, *args, **kwargs):
            try:
                return checked(comm, *args, **kwargs)
            except Native as why:
                return native_job(comm, collective, why, *native(*args, **kwargs))
        return wrapper
    return decorate


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


def _fused(comm, collective, algo, fields, arr=None, nbytes=None, block=0, dtype=BYTE, op=0,
           has=True, at=0):
    """Run fused ``algo`` (the checked exchange carrying the data, collectives.exchange): the
    payload starts as ``arr``'s bytes at byte ``at`` of ``nbytes`` (``arr``'s own size by
    default) and is returned as the result; the caller's buffers are not touched."""
    data = np.zeros(as_bytes(arr).size if nbytes is None else nbytes, np.uint8)
    if arr is not None and has:
        data[at:at + arr.nbytes] = as_bytes(np.ascontiguousarray(arr))
    agree(comm, collective, algo, payload=(algo.fused, data, block, dtype, op, has), **fields)
    return data


def _same_dtype(a, b, name):
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: sendbuf dtype {a.dtype} differs from recvbuf dtype {b.dtype}")


@_job("allreduce", lambda sendbuf, recvbuf, op, algorithm: ("Allreduce", sendbuf, recvbuf, op))
def allreduce(comm, sendbuf, recvbuf, op, algorithm):
    """The job of Allreduce."""
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
    algo = choose(comm, "allreduce", algorithm, n, recv.nbytes)

    def job():
        if algo.fused is not None:
            data = _fused(comm, "allreduce", algo, dict(count=n, dtype=dt, op=opc),
                          send if send is not None else recv, dtype=dt, op=opc)
            as_bytes(recv)[:] = data
            return
        if comm.check:
            agree(comm, "allreduce", algo, count=n, dtype=dt, op=opc)
        reads_in = algo.reads_in and n and comm.size > 1
        if send is not None and not reads_in:
            np.copyto(recv, send)
        if n and comm.size > 1:
            execute(comm, algo, (n,), recv, (send if send is not None else recv) if reads_in else None,
                          dt, opc, "allreduce")
    return job


@_job("bcast", lambda buf, root, algorithm: ("Bcast", buf, root))
def bcast(comm, buf, root, algorithm):
    """The job of Bcast."""
    root = _check_root(root, comm.size, "Bcast")
    arr, n, _ = parse(buf, "buf", writable=True)
    data = as_bytes(arr)
    algo = choose(comm, "bcast", algorithm, data.size, data.size)

    def job():
        if algo.fused is not None:
            data[:] = _fused(comm, "bcast", algo, dict(nbytes=data.size, root=root), data,
                             has=comm.rank == root)
            return
        if comm.check:
            agree(comm, "bcast", algo, nbytes=data.size, root=root)
        if data.size and comm.size > 1:
            execute(comm, algo, (data.size, root), data, None, BYTE, 0, "bcast")
    return job


@_job("reduce", lambda sendbuf, recvbuf, op, root, algorithm: ("Reduce", sendbuf, recvbuf, op, root))
def reduce(comm, sendbuf, recvbuf, op, root, algorithm):
    """The job of Reduce."""
    root = _check_root(root, comm.size, "Reduce")
    is_root = comm.rank == root
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
    algo = choose(comm, "reduce", algorithm, n, send.nbytes)

    def job():
        if algo.fused is not None:
            data = _fused(comm, "reduce", algo, dict(count=n, dtype=dt, op=opc, root=root), send,
                          dtype=dt, op=opc)
            if is_root:
                as_bytes(recv)[:] = data
            return
        if comm.check:
            agree(comm, "reduce", algo, count=n, dtype=dt, op=opc, root=root)
        if n:
            execute(comm, algo, (n, root), recv, send, dt, opc, "reduce")
    return job


@_job("allgather", lambda sendbuf, recvbuf, algorithm, vector:
     ("Allgatherv" if vector else "Allgather", sendbuf, recvbuf))
def allgather(comm, sendbuf, recvbuf, algorithm, vector):
    """The job of Allgather, or of Allgatherv with ``vector``."""
    name = "Allgatherv" if vector else "Allgather"
    recv, counts, displs = parse(recvbuf, "recvbuf", writable=True, vector=True)
    p, r = comm.size, comm.rank
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
    size = recv.dtype.itemsize
    bcounts = tuple(c * size for c in counts)
    algo = choose(comm, "allgather", algorithm, total, total * size, uniform=len(set(counts)) <= 1)

    fields = dict(dtype=recv.dtype.num, itemsize=size, **{f"count{i}": c for i, c in enumerate(counts)})

    def job():
        if algo.fused is not None:
            own = send if send is not None else recv[displs[r]:displs[r] + counts[r]]
            data = _fused(comm, "allgather", algo, fields, own, total * size, bcounts[r],
                          at=sum(bcounts[:r]))
            if displs == displacements(counts):
                as_bytes(recv[:total])[:] = data
            else:
                unpack(data.view(recv.dtype), recv, counts, displs)
            return
        if comm.check:
            agree(comm, "allgather", algo, **fields)
        # Only this rank's block goes in; the schedule fills the others.
        acc = pack(comm, recv, counts, displs, ranks=() if send is not None else (r,))
        if send is not None:
            start = sum(counts[:r])
            np.copyto(acc[start:start + counts[r]], send)
        if total and p > 1:
            execute(comm, algo, (bcounts,), as_bytes(acc), None, BYTE, 0, "allgather")
        unpack(acc, recv, counts, displs)
    return job


def _recvcounts(comm, n):
    """Every rank's count of Reduce_scatter's recvbuf, ``n`` on this rank.  Checked, the
    agreement's exchange gathers them (each rank fills in its own field): a rank in another
    collective, or whose arguments were invalid, meets it and all raise, where MPI's Allgather
    would leave the others waiting."""
    if comm.check and comm.size > 1:
        return agree(comm, COUNTS, None, **{f"count{i}": n if i == comm.rank else None
                                            for i in range(comm.size)})
    return comm._coll.allgather(n)


@_job("reduce_scatter", lambda sendbuf, recvbuf, counts, op, algorithm, name:
     (name, sendbuf, recvbuf, op) if name == "Reduce_scatter_block"
     else (name, sendbuf, recvbuf, counts, op))
def reduce_scatter(comm, sendbuf, recvbuf, counts, op, algorithm, name):
    """The job of Reduce_scatter or Reduce_scatter_block (``name``); ``counts`` None: even blocks."""
    p, r = comm.size, comm.rank
    recv, n_recv, _ = parse(recvbuf, "recvbuf", writable=True)
    in_place = is_in_place(sendbuf)
    if counts is None and name == "Reduce_scatter" and not in_place:
        # A collective on the private communicator: it must queue behind any pending
        # nonblocking collective rather than run beside it on another thread, and come
        # before any check that could fail on this rank alone.
        gathered = []
        run(comm, lambda: gathered.extend(_recvcounts(comm, n_recv)))
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
    algo = choose(comm, "reduce_scatter", algorithm, total, send.nbytes,
                  uniform=len(set(counts)) <= 1)
    start = sum(counts[:r])

    fields = dict(dtype=dt, op=opc, **{f"count{i}": c for i, c in enumerate(counts)})

    def job():
        if algo.fused is not None:
            data = _fused(comm, "reduce_scatter", algo, fields, send, dtype=dt, op=opc)
            recv[:counts[r]] = data.view(send.dtype)[start:start + counts[r]]
            return
        if comm.check:
            agree(comm, "reduce_scatter", algo, **fields)
        if not total or p == 1:
            recv[:counts[r]] = send[start:start + counts[r]]
            return
        # The schedule reads sendbuf (IN) where it lies and keeps partial sums in scratch
        # (ACC): MPI leaves recvbuf past the rank's own block untouched.  Not in place, the
        # last combine writes the block straight into recvbuf (OUT); in place, writing
        # recvbuf (IN) early would clobber input later steps still read, so the block is
        # copied out of ACC after.
        acc = buffer(comm, "acc", send.nbytes).view(send.dtype)
        out = None if in_place else recv[:counts[r]]
        execute(comm, algo, (counts, out is not None), acc, send, dt, opc, "reduce_scatter", out)
        if in_place:
            recv[:counts[r]] = acc[start:start + counts[r]]
    return job


def _rooted(comm, collective, vector, root, root_spec, own_spec, algorithm):
    """The job of Gather(v) (``collective`` "gather") or Scatter(v) ("scatter").

    ``root_spec`` is the root's buffer of all blocks (Gather's recvbuf, Scatter's sendbuf),
    ``own_spec`` this rank's block (Gather's sendbuf, Scatter's recvbuf).
    """
    gather = collective == "gather"
    name = ("Gather" if gather else "Scatter") + ("v" if vector else "")
    root = _check_root(root, comm.size, name)
    p, r = comm.size, comm.rank
    root_name, own_name = ("recvbuf", "sendbuf") if gather else ("sendbuf", "recvbuf")
    # The root's (array, counts, displs); ``own`` is None for Scatter's MPI.IN_PLACE.
    rooted = root_blocks(root_spec, root_name, p, gather, vector) if r == root else None
    if is_in_place(own_spec):
        if r != root:
            raise ValueError(f"{name}: MPI.IN_PLACE is only valid at the root")
        # In place, Gather sends the root's own block from where it lies; Scatter leaves it there.
        arr, counts, displs = rooted
        own = arr[displs[r]:displs[r] + counts[r]] if gather else None
    else:
        own = parse(own_spec, own_name, writable=not gather)[0]
        other = rooted and rooted[0]
        _aliased(*((own, other) if gather else (other, own)), name, exact_ok=False)
        if r == root:
            arr, counts, _ = rooted
            _same_dtype(own, arr, name)
            if own.size != counts[r]:
                raise ValueError(f"{name}: the root's own block has {own.size} elements "
                                 f"but the counts give it {counts[r]}")
    if r != root:
        arr = own
        # Only the root knows every count of a Gatherv/Scatterv; a rank knows its own.
        counts = tuple(own.size if i == r or not vector else -1 for i in range(p))
    size = arr.dtype.itemsize
    bcounts = tuple(c * size if c >= 0 else -1 for c in counts)
    # Gatherv/Scatterv stay off the binomial algorithms even with equal counts: the other
    # ranks cannot know that, and every rank must choose alike.
    algo = choose(comm, collective, algorithm, counts[r] * p, bcounts[r] * p, uniform=not vector)
    fields = dict(root=root, itemsize=size,
                  **{f"count{i}": c if c >= 0 else None for i, c in enumerate(counts)})

    def job():
        if algo.fused is not None:
            # Equal blocks only: the root's buffer is its blocks in rank order.
            b = bcounts[r]
            if gather:
                data = _fused(comm, collective, algo, fields, own, b * p, b, at=r * b)
                if r == root:
                    as_bytes(rooted[0][:counts[r] * p])[:] = data
            else:
                data = _fused(comm, collective, algo, fields, rooted and rooted[0][:counts[r] * p],
                              b * p, b, has=r == root)
                if own is not None:
                    as_bytes(own)[:] = data[r * b:(r + 1) * b]
            return
        if comm.check:
            agree(comm, collective, algo, **fields)
        staged = whole = None
        if r == root:
            arr, _, displs = rooted
            # Scatter's root sends every block; Gather's receives them all.
            staged = pack(comm, arr, counts, displs, ranks=() if gather else None)
            whole = as_bytes(staged)
        if gather:
            execute(comm, algo, (bcounts, root), whole, as_bytes(own), BYTE, 0, collective)
            if r == root:
                unpack(staged, arr, counts, displs)
        else:
            # In place, the root's own block is already where it belongs; it lands in scratch.
            out = own if own is not None else buffer(comm, "own", bcounts[r])
            execute(comm, algo, (bcounts, root), as_bytes(out), whole, BYTE, 0, collective)
    return job


@_job("gather", lambda sendbuf, recvbuf, root, algorithm, vector:
     ("Gatherv" if vector else "Gather", sendbuf, recvbuf, root))
def gather(comm, sendbuf, recvbuf, root, algorithm, vector):
    """The job of Gather, or of Gatherv with ``vector``."""
    return _rooted(comm, "gather", vector, root, recvbuf, sendbuf, algorithm)


@_job("scatter", lambda sendbuf, recvbuf, root, algorithm, vector:
     ("Scatterv" if vector else "Scatter", sendbuf, recvbuf, root))
def scatter(comm, sendbuf, recvbuf, root, algorithm, vector):
    """The job of Scatter, or of Scatterv with ``vector``."""
    return _rooted(comm, "scatter", vector, root, sendbuf, recvbuf, algorithm)


@_job("barrier", None)
def barrier(comm, algorithm):
    """The job of Barrier."""
    algo = choose(comm, "barrier", algorithm, 0, 0)

    def job():
        if algo.fused is not None:
            agree(comm, "barrier", algo, payload=(HEADER,))
            return
        if comm.check:
            agree(comm, "barrier", algo)
        if comm.size > 1:
            execute(comm, algo, (), None, None, BYTE, 0, "barrier")
    return job


__all__ = ["allgather", "allreduce", "barrier", "bcast", "gather", "reduce", "reduce_scatter", "scatter"]
