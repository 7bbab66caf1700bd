# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The dispatcher: one description per collective, used by every call form and path.

A call goes down the layers once:

* **describe** (here): the arguments become a call: buffers resolved to (address, count,
  element type) by ``collectives._buffers``, counts, op, root, in place, aliasing; ValueError
  or TypeError naming the problem, or ``Native`` when no algorithm covers the arguments;
* **select and plan**: the algorithm and its schedule for the call's shape, from
  ``collectives.plans`` on a miss, cached by a small key (``collectives._engine``);
* **agree**: with the check on, the checked exchange of the call's fingerprint (its fields
  as ``collectives.agreement`` describes them), which for a fused plan carries the data and
  is the collective;
* **execute**: the schedule, in ``collectives._executor`` without the GIL, or, with
  ``pure`` (COLLECTIVES_PUREPYTHON=1), in ``schedule.run_python`` and ``exchange.exchange``,
  the NumPy twins: the fallback shares everything above the leaves.

A rank whose arguments are invalid still takes part in the agreement, with its error flag
set, so the others raise "invalid arguments on another rank" instead of waiting for it; a
call no algorithm covers runs MPI's own collective on the private communicator, after the
same agreement.  Blocking, nonblocking (queued on the progress thread, which runs the same
method) and functional calls all come here.
"""
from libc.stdint cimport int64_t
from libc.string cimport memcpy, memmove
cimport numpy as cnp
import numpy as np
from mpi4py import MPI

from collectives._buffers cimport (IN_PLACE, Arg, dtype_of, in_place_spec, integers, npy_num, op_code, resolve,
                                   resolve_vector, shares)
from collectives._engine cimport (ALLGATHER, ALLREDUCE, BARRIER, BCAST, BYTE_CODE, GATHER, REDUCE_, REDUCE_SCATTER,
                                  SCATTER, UNKNOWN, Engine, _Plan, array_at, nbytes_of)
from collectives.agreement import COLLECTIVE_INDEX, COUNTS, Disagreement
from collectives.ops import Native

cdef object _COUNTS_INDEX = COLLECTIVE_INDEX[COUNTS]
cnp.import_array()


cdef inline bint same_type(const Arg *a, const Arg *b) noexcept:
    return a.num == b.num and a.size == b.size and a.swapped == b.swapped


cdef bint same_shape(cnp.ndarray a, cnp.ndarray b) except -1:
    """Whether the arrays have one shape and one dtype."""
    cdef int i, n = cnp.PyArray_NDIM(a)
    if n != cnp.PyArray_NDIM(b) or not cnp.PyArray_EquivTypes(a.descr, b.descr):
        return False
    for i in range(n):
        if cnp.PyArray_DIMS(a)[i] != cnp.PyArray_DIMS(b)[i]:
            return False
    return True


cdef object send_for(cnp.ndarray array, cnp.ndarray out):
    """The send argument of a functional call writing ``out``: MPI.IN_PLACE when ``array`` is
    ``out``, else ``array`` with ``out``'s memory order (its elements meet ``out``'s in flat
    memory order), a copy of it when it shares memory with ``out``."""
    cdef char *a = <char *>cnp.PyArray_DATA(array)
    cdef char *o = <char *>cnp.PyArray_DATA(out)
    if array is out:
        return IN_PLACE
    if a < o + cnp.PyArray_NBYTES(out) and o < a + cnp.PyArray_NBYTES(array):
        return np.array(array, order="F" if is_fortran_only(out) else "C")
    if is_fortran_only(out):
        return array if cnp.PyArray_IS_F_CONTIGUOUS(array) else np.asfortranarray(array)
    return np.ascontiguousarray(array) if is_fortran_only(array) else array


cdef inline bint is_fortran_only(cnp.ndarray a) noexcept:
    return cnp.PyArray_IS_F_CONTIGUOUS(a) and not cnp.PyArray_IS_C_CONTIGUOUS(a)


cdef object _overlap(object name, const Arg *send, const Arg *recv):
    return ValueError(f"{name}: sendbuf (bytes {<size_t>send.ptr:#x}..+{nbytes_of(send)}) and recvbuf "
                      f"(bytes {<size_t>recv.ptr:#x}..+{nbytes_of(recv)}) overlap; pass MPI.IN_PLACE "
                      "to work in place")


cdef int aliased(object name, const Arg *send, const Arg *recv, bint exact_ok) except -1:
    """1 when ``send`` is exactly ``recv``'s memory and ``exact_ok`` (the call then runs as
    with MPI.IN_PLACE), 0 when they do not overlap; ValueError for any other overlap."""
    if not nbytes_of(send) or not nbytes_of(recv) or not shares(send, recv):
        return 0
    if exact_ok and send.ptr == recv.ptr and nbytes_of(send) == nbytes_of(recv):
        return 1
    raise _overlap(name, send, recv)


cdef int check_type(object name, const Arg *send, const Arg *recv) except -1:
    if not same_type(send, recv):
        raise TypeError(f"{name}: sendbuf dtype {dtype_of(send)} differs from recvbuf dtype {dtype_of(recv)}")
    return 0


cdef Py_ssize_t root_of(object root, Py_ssize_t size, object name) except -1:
    if (type(root) is int or isinstance(root, (int, np.integer))) and not isinstance(root, bool) \
            and 0 <= root < size:
        return root
    raise ValueError(f"{name}: invalid root {root!r} for a communicator of size {size}")


cdef bint packed_offsets(Py_ssize_t p, const Py_ssize_t *counts, const Py_ssize_t *displs,
                         Py_ssize_t *at) noexcept:
    """The offsets of the blocks in rank order from 0 into ``at``; whether ``displs`` are those."""
    cdef Py_ssize_t i, total = 0
    cdef bint same = True
    for i in range(p):
        at[i] = total
        same = same and displs[i] == total
        total += counts[i]
    return same


cdef void move_blocks(char *dst, const Py_ssize_t *dst_at, const char *src, const Py_ssize_t *src_at,
                      const Py_ssize_t *counts, Py_ssize_t p, Py_ssize_t size) noexcept:
    """Copy each block i, ``counts[i]`` elements of ``size`` bytes, from ``src_at[i]`` to ``dst_at[i]``."""
    cdef Py_ssize_t i
    for i in range(p):
        memcpy(dst + dst_at[i] * size, src + src_at[i] * size, counts[i] * size)


cdef class Dispatcher(Engine):
    """The collectives of one ``collectives.Comm``: each entry point describes its call, then
    the engine plans, agrees and runs it."""

    def allreduce(self, sendbuf, recvbuf, op, algorithm):
        """Allreduce."""
        return self.call_allreduce(sendbuf, recvbuf, op, algorithm)

    cdef object call_allreduce(self, sendbuf, recvbuf, op, algorithm):
        cdef _Plan pl
        if not self.ready():
            return self.behind("allreduce", (sendbuf, recvbuf, op, algorithm))
        self.started += 1
        try:
            try:
                pl = self.describe_allreduce(sendbuf, recvbuf, op, algorithm)
            except Native as why:
                return self.native(ALLREDUCE, why, "Allreduce", (sendbuf, recvbuf, op))
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(ALLREDUCE, exc)
            self.op_object = op
            self.perform_allreduce(pl)
        finally:
            self.held.release()
            self.op_object = None

    cpdef allreduce_array(self, array, op, algorithm, out):
        """collectives.allreduce: ``array`` (anything np.asarray takes) combined over the ranks
        into ``out`` (a new array when None), which is returned; ``array`` is left untouched."""
        if not self.ready():
            return self.behind("allreduce_array", (array, op, algorithm, out))
        if not cnp.PyArray_Check(array):
            array = np.asarray(array)
        if out is None:
            out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(array), cnp.PyArray_DIMS(array),
                                    cnp.PyArray_TYPE(array), cnp.PyArray_IS_F_CONTIGUOUS(array)
                                    and not cnp.PyArray_IS_C_CONTIGUOUS(array))
        elif not cnp.PyArray_Check(out) or not same_shape(array, out):
            self.started += 1
            if not cnp.PyArray_Check(out):
                self.refuse(ALLREDUCE, TypeError(f"allreduce: out must be a NumPy array, got {type(out).__name__}"))
            self.refuse(ALLREDUCE, ValueError(
                f"allreduce: out has shape {out.shape} and dtype {out.dtype}, the result has shape "
                f"{array.shape} and dtype {array.dtype}"))
        self.call_allreduce(send_for(array, out), out, op, algorithm)
        return out

    cdef _Plan describe_allreduce(self, sendbuf, recvbuf, op, algorithm):
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef bint apart
        resolve(recvbuf, "recvbuf", True, 1, recv, self.held)
        if in_place_spec(sendbuf):
            send[0] = recv[0]
        else:
            resolve(sendbuf, "sendbuf", False, 1, send, self.held)
            if send.count != recv.count:
                raise ValueError(f"Allreduce: sendbuf has {send.count} elements but recvbuf has {recv.count}")
            check_type("Allreduce", send, recv)
            if aliased("Allreduce", send, recv, True):
                send[0] = recv[0]
        self.opc = op_code(op, recv)
        apart = send.ptr != recv.ptr
        return self.plan(ALLREDUCE, algorithm, (ALLREDUCE, algorithm, recv.count, recv.code, self.opc, apart),
                         recv.count, nbytes_of(recv), True, (recv.count,), self.opc, recv.code, apart)

    cdef int perform_allreduce(self, _Plan pl) except -1:
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef int64_t *fields = self.fields()
        cdef Py_ssize_t n = recv.count, nb = nbytes_of(recv)
        cdef bint early
        fields[0], fields[1], fields[2] = n, recv.code, self.opc
        if pl.fused >= 0:
            memcpy(self.body(), send.ptr, nb)
            self.agree(ALLREDUCE, pl, 3, ("count", "dtype", "op"), False, nb, 0, recv.code, self.opc)
            memcpy(recv.ptr, self.body(), nb)
            self.done(pl)
            return 0
        if pl.node_aware is not None:
            self.agree(ALLREDUCE, pl, 3, ("count", "dtype", "op"), False)
            target = array_at(recv.ptr, nb).view(dtype_of(recv))
            source = None if send.ptr == recv.ptr else array_at(send.ptr, nb).view(dtype_of(recv)).copy()
            pl.node_aware.build(self.nodes, source, target, self.op_object)
            self.done(pl)
            return 0
        # Overlapped: the exchange runs after the schedule's first step has started.
        early = pl.lead and n and self.size > 1 and self.check
        if not early:
            self.agree(ALLREDUCE, pl, 3, ("count", "dtype", "op"), False)
        if send.ptr != recv.ptr and not (pl.reads_in and n and self.size > 1):
            memcpy(recv.ptr, send.ptr, nb)  # recv is output only
        if early:
            self.fingerprint(ALLREDUCE, pl.algo, 3)
            if self.launch(ALLREDUCE, pl, recv.ptr, nb, send.ptr, nb, recv.code, self.opc, NULL, 0, True):
                self.judge("allreduce", ("count", "dtype", "op"), False)
        elif n and self.size > 1:
            self.launch(ALLREDUCE, pl, recv.ptr, nb, send.ptr, nb, recv.code, self.opc)
        self.done(pl)
        return 0

    def bcast(self, buf, root, algorithm):
        """Bcast."""
        cdef _Plan pl
        cdef Py_ssize_t nb
        cdef Arg *a = &self.recv
        if not self.ready():
            return self.behind("bcast", (buf, root, algorithm))
        self.started += 1
        try:
            try:
                self.root = root_of(root, self.size, "Bcast")
                resolve(buf, "buf", True, 1, a, self.held)
                nb = nbytes_of(a)
                pl = self.plan(BCAST, algorithm, (BCAST, algorithm, nb, self.root), nb, nb, True, (nb, self.root))
            except Native as why:
                return self.native(BCAST, why, "Bcast", (buf, root))
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(BCAST, exc)
            self.perform_bcast(pl, nb)
        finally:
            self.held.release()

    cdef int perform_bcast(self, _Plan pl, Py_ssize_t nb) except -1:
        cdef Arg *a = &self.recv
        cdef int64_t *fields = self.fields()
        fields[0], fields[1] = nb, self.root
        if pl.fused >= 0:
            memcpy(self.body(), a.ptr, nb)
            self.agree(BCAST, pl, 2, ("nbytes", "root"), False, nb, 0, BYTE_CODE, 0, self.root == self.rank)
            memcpy(a.ptr, self.body(), nb)
            self.done(pl)
            return 0
        self.agree(BCAST, pl, 2, ("nbytes", "root"), False)
        if nb and self.size > 1:
            self.launch(BCAST, pl, a.ptr, nb, NULL, 0, BYTE_CODE, 0)
        self.done(pl)
        return 0

    def reduce(self, sendbuf, recvbuf, op, root, algorithm):
        """Reduce."""
        cdef _Plan pl
        if not self.ready():
            return self.behind("reduce", (sendbuf, recvbuf, op, root, algorithm))
        self.started += 1
        try:
            try:
                pl = self.describe_reduce(sendbuf, recvbuf, op, root, algorithm)
            except Native as why:
                return self.native(REDUCE_, why, "Reduce", (sendbuf, recvbuf, op, root))
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(REDUCE_, exc)
            self.perform_reduce(pl)
        finally:
            self.held.release()

    cdef _Plan describe_reduce(self, sendbuf, recvbuf, op, root, algorithm):
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef bint is_root
        self.root = root_of(root, self.size, "Reduce")
        is_root = self.root == self.rank
        recv.ptr = NULL
        if is_root:
            resolve(recvbuf, "recvbuf", True, 1, recv, self.held)
        if in_place_spec(sendbuf):
            if not is_root:
                raise ValueError("Reduce: MPI.IN_PLACE is only valid at the root")
            send[0] = recv[0]
        else:
            resolve(sendbuf, "sendbuf", False, 1, send, self.held)
            if is_root:
                if send.count != recv.count:
                    raise ValueError(f"Reduce: sendbuf has {send.count} elements but recvbuf has {recv.count}")
                check_type("Reduce", send, recv)
                if aliased("Reduce", send, recv, True):
                    send[0] = recv[0]
        self.opc = op_code(op, send)
        return self.plan(REDUCE_, algorithm, (REDUCE_, algorithm, send.count, send.code, self.opc, self.root),
                         send.count, nbytes_of(send), True, (send.count, self.root), self.opc, send.code)

    cdef int perform_reduce(self, _Plan pl) except -1:
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef int64_t *fields = self.fields()
        cdef Py_ssize_t nb = nbytes_of(send)
        cdef bint is_root = self.root == self.rank
        fields[0], fields[1], fields[2], fields[3] = send.count, send.code, self.opc, self.root
        if pl.fused >= 0:
            memcpy(self.body(), send.ptr, nb)
            self.agree(REDUCE_, pl, 4, ("count", "dtype", "op", "root"), False, nb, 0, send.code, self.opc)
            if is_root:
                memcpy(recv.ptr, self.body(), nb)
            self.done(pl)
            return 0
        self.agree(REDUCE_, pl, 4, ("count", "dtype", "op", "root"), False)
        if send.count:
            self.launch(REDUCE_, pl, recv.ptr if is_root else NULL, nb if is_root else 0, send.ptr, nb,
                        send.code, self.opc)
        self.done(pl)
        return 0

    cdef int block_fields(self, int64_t first, int64_t second, Py_ssize_t count,
                          const Py_ssize_t *counts) noexcept:
        """Write [first, second, count0, count1, ...] (each ``count`` unless ``counts``) as
        the fields to agree on; returns their number."""
        cdef int i
        cdef int64_t *fields = self.fields()
        fields[0], fields[1] = first, second
        for i in range(self.size):
            fields[2 + i] = counts[i] if counts != NULL else count
        return 2 + self.size

    cdef tuple byte_counts(self, Py_ssize_t size):
        """``counts`` in bytes of ``size``-byte elements, -1 where a rank does not know one."""
        return tuple([c * size if c >= 0 else -1 for c in self.counts[:self.size]])

    cdef int element_type(self, const Arg *a) noexcept:
        """The element type the agreement compares: the kernel code's NumPy number, else the buffer's."""
        return npy_num(a.code) if a.code >= 0 else a.num

    def allgather(self, sendbuf, recvbuf, algorithm):
        """Allgather."""
        cdef _Plan pl
        if not self.ready():
            return self.behind("allgather", (sendbuf, recvbuf, algorithm))
        self.started += 1
        try:
            try:
                pl = self.describe_allgather(sendbuf, recvbuf, algorithm)
            except Native as why:
                return self.native(ALLGATHER, why, "Allgather", (sendbuf, recvbuf))
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(ALLGATHER, exc)
            self.perform_allgather(pl)
        finally:
            self.held.release()

    cdef _Plan describe_allgather(self, sendbuf, recvbuf, algorithm):
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t c, p = self.size
        if (type(recvbuf) is list or type(recvbuf) is tuple) and (
                len(recvbuf) == 4 or (len(recvbuf) == 3 and type(recvbuf[1]) is tuple)):
            raise ValueError("Allgather: recvbuf may give one count, that of each rank's block; "
                             "use Allgatherv for per-rank counts and displacements")
        resolve(recvbuf, "recvbuf", True, p, recv, self.held)
        if in_place_spec(sendbuf):
            if recv.count % p:
                raise ValueError(f"Allgather: in-place recvbuf of {recv.count} elements is not divisible "
                                 f"by {p} ranks")
            c = recv.count // p
            send[0] = recv[0]
            send.ptr = recv.ptr + self.rank * c * recv.size
            send.count = c
        else:
            resolve(sendbuf, "sendbuf", False, 1, send, self.held)
            check_type("Allgather", send, recv)
            aliased("Allgather", send, recv, False)
            c = send.count
            if recv.count != c * p:
                raise ValueError(f"Allgather: recvbuf has {recv.count} elements, expected {p} x {c} = {c * p}")
        c = c * recv.size
        return self.plan(ALLGATHER, algorithm, (ALLGATHER, algorithm, c), send.count * p, c * p, True,
                         ((c,) * p,))

    cdef int perform_allgather(self, _Plan pl) except -1:
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t c = send.count, p = self.size, each = send.count * recv.size
        cdef char *own = recv.ptr + self.rank * each
        cdef int nf = self.block_fields(self.element_type(recv), recv.size, c, NULL)
        if pl.fused >= 0:
            memcpy(self.body() + self.rank * each, send.ptr, each)
            self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True, each * p, each)
            memcpy(recv.ptr, self.body(), each * p)
            self.done(pl)
            return 0
        self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True)
        # A plan that reads IN copies the own block itself, as late as it can (plans.late_copy).
        if send.ptr != own and not (pl.reads_in and c and p > 1):
            memcpy(own, send.ptr, each)
        if c and p > 1:
            self.launch(ALLGATHER, pl, recv.ptr, each * p, send.ptr, each, BYTE_CODE, 0)
        self.done(pl)
        return 0

    def allgatherv(self, sendbuf, recvbuf, algorithm):
        """Allgatherv."""
        cdef _Plan pl
        if not self.ready():
            return self.behind("allgatherv", (sendbuf, recvbuf, algorithm))
        self.started += 1
        try:
            try:
                pl = self.describe_allgatherv(sendbuf, recvbuf, algorithm)
            except Native as why:
                return self.native(ALLGATHER, why, "Allgatherv", (sendbuf, recvbuf))
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(ALLGATHER, exc)
            self.perform_allgatherv(pl)
        finally:
            self.held.release()

    cdef _Plan describe_allgatherv(self, sendbuf, recvbuf, algorithm):
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t p = self.size, r = self.rank, total, i
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        if not resolve_vector(recvbuf, "recvbuf", True, p, cnt, dis, recv, self.held):
            raise ValueError("Allgatherv: recvbuf must give counts, e.g. [buf, (counts, displs), MPI.DOUBLE]")
        if in_place_spec(sendbuf):
            send[0] = recv[0]
            send.ptr = recv.ptr + dis[r] * recv.size
            send.count = cnt[r]
        else:
            resolve(sendbuf, "sendbuf", False, 1, send, self.held)
            check_type("Allgatherv", send, recv)
            aliased("Allgatherv", send, recv, False)
            if send.count != cnt[r]:
                raise ValueError(f"Allgatherv: sendbuf has {send.count} elements but recvbuf expects "
                                 f"{cnt[r]} from rank {r}")
        total = 0
        for i in range(p):
            total += cnt[i]
        bcounts = self.byte_counts(recv.size)
        return self.plan(ALLGATHER, algorithm, (ALLGATHER, algorithm, bcounts), total,
                         total * recv.size, len(set(bcounts)) <= 1, (bcounts,))

    cdef int perform_allgatherv(self, _Plan pl) except -1:
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t p = self.size, r = self.rank, total
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        cdef Py_ssize_t *at = cnt + 2 * p
        cdef bint packed = packed_offsets(p, cnt, dis, at)
        cdef char *acc
        cdef int nf = self.block_fields(self.element_type(recv), recv.size, 0, cnt)
        total = at[p - 1] + cnt[p - 1]
        if pl.fused >= 0:
            # Equal blocks (the fused form's restriction) meet in the payload in rank order.
            memcpy(self.body() + at[r] * recv.size, send.ptr, cnt[r] * recv.size)
            self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True, total * recv.size, cnt[r] * recv.size)
            move_blocks(recv.ptr, dis, self.body(), at, cnt, p, recv.size)
            self.done(pl)
            return 0
        self.agree(ALLGATHER, pl, nf, ("dtype", "itemsize"), True)
        # The schedule wants the blocks in rank order from 0: other layouts go via scratch.
        acc = recv.ptr if packed else self.scratch(True, total * recv.size)
        if send.ptr != acc + at[r] * recv.size and not (pl.reads_in and total and p > 1):
            memcpy(acc + at[r] * recv.size, send.ptr, cnt[r] * recv.size)
        if total and p > 1:
            self.launch(ALLGATHER, pl, acc, total * recv.size, send.ptr, cnt[r] * recv.size, BYTE_CODE, 0)
        if not packed:
            move_blocks(recv.ptr, dis, acc, at, cnt, p, recv.size)
        self.done(pl)
        return 0

    def reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, algorithm, name):
        """Reduce_scatter (``name`` "Reduce_scatter", ``recvcounts`` None: gathered from
        every rank's recvbuf) or Reduce_scatter_block ("Reduce_scatter_block": equal blocks)."""
        cdef _Plan pl
        if not self.ready():
            return self.behind("reduce_scatter", (sendbuf, recvbuf, recvcounts, op, algorithm, name))
        self.started += 1
        try:
            try:
                pl = self.describe_reduce_scatter(sendbuf, recvbuf, recvcounts, op, algorithm, name)
            except Native as why:
                args = ((sendbuf, recvbuf, op) if name == "Reduce_scatter_block"
                        else (sendbuf, recvbuf, recvcounts, op))
                return self.native(REDUCE_SCATTER, why, name, args)
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(REDUCE_SCATTER, exc)
            self.perform_reduce_scatter(pl)
        finally:
            self.held.release()

    cdef int gather_counts(self, Py_ssize_t mine) except -1:
        """Every rank's count of Reduce_scatter's recvbuf into ``counts``, ``mine`` on this
        rank.  Checked, the agreement's exchange gathers them (each rank fills in its own
        field): a rank in another collective, or whose arguments were invalid, meets it and
        all raise, where MPI's Allgather would leave the others waiting."""
        cdef int i
        if self.check and self.size > 1:
            for i in range(self.size):
                self.vec[3 + i] = mine if i == self.rank else UNKNOWN
            self.fingerprint(_COUNTS_INDEX, 0, self.size)
            self.exchange(COUNTS, "argument check")
            self.judge(COUNTS, tuple(f"count{i}" for i in range(self.size)), False)
            for i in range(self.size):
                self.counts[i] = self.vec[3 + i]
        else:
            for i, c in enumerate(self.comm.allgather(mine)):
                self.counts[i] = c
        return 0

    cdef _Plan describe_reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, algorithm, name):
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t p = self.size, r = self.rank, total = 0, start = 0, i
        cdef Py_ssize_t *cnt = self.counts
        cdef bint in_place = in_place_spec(sendbuf), uniform = True
        resolve(recvbuf, "recvbuf", True, 1, recv, self.held)
        if recvcounts is None and name == "Reduce_scatter" and not in_place:
            self.gather_counts(recv.count)
            recvcounts = True
        if in_place:
            send[0] = recv[0]
        else:
            resolve(sendbuf, "sendbuf", False, 1, send, self.held)
        check_type(name, send, recv)
        if not in_place and aliased(name, send, recv, True):
            in_place = True  # sendbuf is recvbuf exactly: MPI.IN_PLACE with explicit counts
        if recvcounts is None:
            if send.count % p:
                raise ValueError(f"{name}: {send.count} elements do not split evenly over {p} ranks")
            for i in range(p):
                cnt[i] = send.count // p
        elif recvcounts is not True:
            try:
                integers(recvcounts, p, cnt, name, "recvcounts")
            except (ValueError, TypeError):
                raise ValueError(f"{name}: recvcounts must be {p} non-negative counts, got "
                                 f"{tuple(np.atleast_1d(recvcounts).tolist())}") from None
        for i in range(p):
            if cnt[i] < 0:
                raise ValueError(f"{name}: recvcounts must be {p} non-negative counts, got "
                                 f"{tuple(cnt[j] for j in range(p))}")
            total += cnt[i]
            start += cnt[i] if i < r else 0
            uniform = uniform and cnt[i] == cnt[0]
        if send.count != total:
            raise ValueError(f"{name}: sendbuf has {send.count} elements but the counts add up to {total}")
        if not in_place and recv.count < cnt[r]:
            raise ValueError(f"{name}: recvbuf has {recv.count} elements, rank {r} receives {cnt[r]}")
        self.opc = op_code(op, recv)
        self.root = start  # the own block's offset
        counts = tuple([cnt[i] for i in range(p)])
        # Not in place, the schedule writes the rank's block straight into recvbuf (OUT).
        # ACC is always scratch here, apart from the input.
        return self.plan(REDUCE_SCATTER, algorithm, (REDUCE_SCATTER, algorithm, recv.code, self.opc, counts, in_place),
                         total, total * send.size, uniform, (counts, not in_place), self.opc, recv.code, True)

    cdef int perform_reduce_scatter(self, _Plan pl) except -1:
        cdef Arg *send = &self.send
        cdef Arg *recv = &self.recv
        cdef Py_ssize_t p = self.size, total = send.count, start = self.root, size = send.size
        cdef Py_ssize_t mine = self.counts[self.rank] * size
        cdef bint in_place = pl.key[5]
        cdef int nf = self.block_fields(recv.code, self.opc, 0, self.counts)
        cdef char *acc
        if pl.fused >= 0:
            memcpy(self.body(), send.ptr, total * size)
            self.agree(REDUCE_SCATTER, pl, nf, ("dtype", "op"), True, total * size, 0, recv.code, self.opc)
            memcpy(recv.ptr, self.body() + start * size, mine)
            self.done(pl)
            return 0
        self.agree(REDUCE_SCATTER, pl, nf, ("dtype", "op"), True)
        if not total or p == 1:
            # Nothing to reduce; in place at p = 1 the block is copied onto itself.
            memmove(recv.ptr, send.ptr + start * size, mine)
            self.done(pl)
            return 0
        # ACC is scratch: recvbuf past the rank's own block must stay untouched.
        acc = self.scratch(True, total * size)
        self.launch(REDUCE_SCATTER, pl, acc, total * size, send.ptr, total * size, recv.code, self.opc,
                    NULL if in_place else recv.ptr, 0 if in_place else mine)
        if in_place:
            # Writing recvbuf (IN) early would clobber input later steps still read.
            memcpy(recv.ptr, acc + start * size, mine)
        self.done(pl)
        return 0

    def gather(self, sendbuf, recvbuf, root, algorithm):
        """Gather."""
        return self.rooted(GATHER, False, recvbuf, sendbuf, root, algorithm, "Gather", (sendbuf, recvbuf, root))

    def gatherv(self, sendbuf, recvbuf, root, algorithm):
        """Gatherv."""
        return self.rooted(GATHER, True, recvbuf, sendbuf, root, algorithm, "Gatherv", (sendbuf, recvbuf, root))

    def scatter(self, sendbuf, recvbuf, root, algorithm):
        """Scatter."""
        return self.rooted(SCATTER, False, sendbuf, recvbuf, root, algorithm, "Scatter", (sendbuf, recvbuf, root))

    def scatterv(self, sendbuf, recvbuf, root, algorithm):
        """Scatterv."""
        return self.rooted(SCATTER, True, sendbuf, recvbuf, root, algorithm, "Scatterv", (sendbuf, recvbuf, root))

    cdef object rooted(self, int coll, bint vector, whole_spec, own_spec, root, algorithm, name, tuple args):
        """Gather(v) and Scatter(v): ``whole`` is the root's buffer of p blocks (Gather's
        receive buffer, Scatter's send buffer), ``own`` every rank's block (MPI.IN_PLACE at
        the root)."""
        cdef _Plan pl
        if not self.ready():
            method = name.lower()
            return self.behind(method, args + (algorithm,))
        self.started += 1
        try:
            try:
                pl = self.describe_rooted(coll, vector, whole_spec, own_spec, root, algorithm, name)
            except Native as why:
                return self.native(coll, why, name, args)
            except Disagreement:
                raise
            except (ValueError, TypeError) as exc:
                self.refuse(coll, exc)
            self.perform_rooted(pl, coll, vector)
        finally:
            self.held.release()

    cdef _Plan describe_rooted(self, int coll, bint vector, whole_spec, own_spec, root, algorithm, name):
        cdef Arg *whole = &self.recv
        cdef Arg *own = &self.send
        cdef bint gather = coll == GATHER, is_root, in_place = in_place_spec(own_spec)
        cdef Py_ssize_t i, c, p = self.size, r = self.rank, total
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        root_name, own_name = ("recvbuf", "sendbuf") if gather else ("sendbuf", "recvbuf")
        self.root = root_of(root, p, name)
        is_root = self.root == r
        whole.ptr = NULL
        if is_root:
            if vector:
                if not resolve_vector(whole_spec, root_name, gather, p, cnt, dis, whole, self.held):
                    if whole.count % p:
                        raise ValueError(f"{root_name}: {whole.count} elements do not split evenly over {p} "
                                         "ranks; give counts, e.g. [buf, (counts, displs), MPI.DOUBLE]")
                    for i in range(p):
                        cnt[i], dis[i] = whole.count // p, i * (whole.count // p)
            else:
                resolve(whole_spec, root_name, gather, p, whole, self.held)
                if whole.count % p:
                    raise ValueError(f"{root_name}: {whole.count} elements do not split evenly over {p} ranks")
                for i in range(p):
                    cnt[i], dis[i] = whole.count // p, i * (whole.count // p)
        if in_place:
            if not is_root:
                raise ValueError(f"{name}: MPI.IN_PLACE is only valid at the root")
            # Gather sends the own block from where it lies; Scatter's stays there (NULL).
            own[0] = whole[0]
            own.ptr = whole.ptr + dis[r] * whole.size if gather else NULL
            own.count = cnt[r]
        else:
            resolve(own_spec, own_name, not gather, 1, own, self.held)
            if is_root:
                if gather:
                    aliased(name, own, whole, False)
                else:
                    aliased(name, whole, own, False)
                check_type(name, own, whole) if gather else check_type(name, whole, own)
                if own.count != cnt[r]:
                    raise ValueError(f"{name}: the root's own block has {own.count} elements but the counts "
                                     f"give it {cnt[r]}")
        if not is_root:
            # Only the root knows every count of a Gatherv/Scatterv; a rank knows its own.
            for i in range(p):
                cnt[i] = own.count if i == r or not vector else -1
        size = (whole if is_root else own).size
        bcounts = self.byte_counts(size)
        # Gatherv/Scatterv stay off the binomial algorithms even with equal counts: the other
        # ranks cannot know that, and every rank must choose alike.
        return self.plan(coll, algorithm, (coll, algorithm, bcounts, self.root, vector), cnt[r] * p,
                         cnt[r] * size * p, not vector, (bcounts, self.root))

    cdef int perform_rooted(self, _Plan pl, int coll, bint vector) except -1:
        cdef Arg *whole = &self.recv
        cdef Arg *own = &self.send
        cdef bint gather = coll == GATHER, is_root = self.root == self.rank, packed = True
        cdef Py_ssize_t i, p = self.size, r = self.rank, total = 0, b
        cdef Py_ssize_t size = (whole if is_root else own).size
        cdef Py_ssize_t *cnt = self.counts
        cdef Py_ssize_t *dis = cnt + p
        cdef Py_ssize_t *at = cnt + 2 * p
        cdef int64_t *fields = self.fields()
        cdef char *staged = NULL
        cdef int nf = self.block_fields(<int>self.root, size, 0, cnt)
        for i in range(p):
            if cnt[i] < 0:
                fields[2 + i] = UNKNOWN
        if is_root:
            packed = packed_offsets(p, cnt, dis, at)
            total = at[p - 1] + cnt[p - 1]
        b = cnt[r] * size
        if pl.fused >= 0:
            # Equal blocks only: the root's buffer is its blocks in rank order.
            if gather:
                memcpy(self.body() + r * b, own.ptr, b)
            elif is_root:
                memcpy(self.body(), whole.ptr, b * p)
            self.agree(coll, pl, nf, ("root", "itemsize"), True, b * p, b, BYTE_CODE, 0, gather or is_root)
            if not gather and own.ptr != NULL:
                memcpy(own.ptr, self.body() + r * b, b)
            elif gather and is_root:
                memcpy(whole.ptr, self.body(), b * p)
            self.done(pl)
            return 0
        self.agree(coll, pl, nf, ("root", "itemsize"), True)
        if is_root:
            staged = whole.ptr if packed else self.scratch(True, total * size)
        if gather:
            self.launch(coll, pl, staged, total * size, own.ptr, b, BYTE_CODE, 0)
            if is_root and not packed:
                move_blocks(whole.ptr, dis, staged, at, cnt, p, size)
        else:
            if is_root and not packed:
                move_blocks(staged, at, whole.ptr, dis, cnt, p, size)
            # In place, the root's own block is already where the schedule puts it.
            self.launch(coll, pl, own.ptr if own.ptr != NULL else staged + at[r] * size, b, staged,
                        total * size, BYTE_CODE, 0)
        self.done(pl)
        return 0

    def barrier(self, algorithm):
        """Barrier."""
        cdef _Plan pl
        if not self.ready():
            return self.behind("barrier", (algorithm,))
        self.started += 1
        try:
            pl = self.plan(BARRIER, algorithm, (BARRIER, algorithm), 0, 0, True, ())
        except Disagreement:
            raise
        except (ValueError, TypeError) as exc:
            self.refuse(BARRIER, exc)
        self.agree(BARRIER, pl, 0, (), False)
        if pl.fused < 0 and self.size > 1:
            self.launch(BARRIER, pl, NULL, 0, NULL, 0, BYTE_CODE, 0)
        self.done(pl)


cdef class Functional:
    """The functional calls that run in the dispatcher: ``Functional(wrap, wrapped).allreduce``
    is ``collectives.allreduce``.  ``wrap`` (collectives.comm.wrap) gives an mpi4py
    intracommunicator's Comm, and ``wrapped`` keeps those by handle.  A method of an extension
    type rather than a Python function: the call goes from Python to the dispatcher in one
    step, with the arguments parsed as fast as a Comm method's.
    """
    cdef object wrap
    cdef dict wrapped

    def __init__(self, wrap, dict wrapped):
        self.wrap, self.wrapped = wrap, wrapped

    def allreduce(self, comm, array, op="sum", algorithm="auto", out=None):
        """``collectives.allreduce(comm, array, op="sum", algorithm="auto", out=None)``: combine
        ``array`` of every rank with ``op``; every rank gets the result, in ``out`` when given.
        ``comm`` is a collectives.Comm or an mpi4py intracommunicator."""
        if type(comm) is MPI.Intracomm:
            known = self.wrapped.get(comm.handle)
            engine = None if known is None else known._engine
            if engine is None or (<Engine>engine).broken is not None:  # none yet, or freed
                engine = self.wrap(comm)._engine
        else:
            engine = getattr(comm, "_engine", None)
            if engine is None:
                engine = self.wrap(comm)._engine
        return (<Dispatcher>engine).allreduce_array(array, op, algorithm, out)
