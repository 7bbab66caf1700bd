"""Buffer specifications as mpi4py accepts them, each checked against mpi4py's own handling of the
same spec; and delegation of everything else to the wrapped communicator."""
import array

import numpy as np
import pytest
from mpi4py import MPI

from collectives._buffers import flat, is_in_place, vector

N = 12


def _numpy_c(x):
    return x.reshape(3, 4)


def _numpy_f(x):
    return np.asfortranarray(x.reshape(3, 4))


def _array(x):
    return array.array("d", x.tolist())


def _bytearray(x):
    return bytearray(x.tobytes())


SPECS = {
    # name: (make the buffer from float64 data, wrap it in a spec)
    "ndarray": (lambda x: x.copy(), lambda b: b),
    "ndarray-2d-C": (_numpy_c, lambda b: b),
    "ndarray-2d-F": (_numpy_f, lambda b: b),
    "array.array": (_array, lambda b: b),
    "[buf, MPI.DOUBLE]": (lambda x: x.copy(), lambda b: [b, MPI.DOUBLE]),
    "[bytearray, MPI.DOUBLE]": (_bytearray, lambda b: [b, MPI.DOUBLE]),
    "[buf, 'd']": (_array, lambda b: [b, "d"]),
    "[buf, count, MPI.DOUBLE]": (lambda x: x.copy(), lambda b: [b, N - 2, MPI.DOUBLE]),
    "[buf, (count, displ), MPI.DOUBLE]": (lambda x: x.copy(), lambda b: [b, (N - 5, 3), MPI.DOUBLE]),
    "[int32 buf, MPI.INT]": (lambda x: x.astype(np.int32), lambda b: [b, MPI.INT]),
    "[int32 buf, count, MPI.INT]": (lambda x: x.astype(np.int32), lambda b: [b, 7, MPI.INT]),
    "[int32 buf, (count, displ), MPI.INT]": (lambda x: x.astype(np.int32),
                                             lambda b: [b, (4, 8), MPI.INT]),
}


def _raw(buf):
    return bytes(memoryview(buf).cast("B")) if not isinstance(buf, np.ndarray) else buf.tobytes(order="A")


@pytest.mark.parametrize("spec", list(SPECS))
def test_allreduce_specs_match_mpi4py(comm, mpi_comm, spec):
    make, wrap = SPECS[spec]
    data = np.arange(N, dtype=np.float64) * (comm.rank + 1)
    ours, theirs = make(np.full(N, -1.0)), make(np.full(N, -1.0))
    comm.Allreduce(wrap(make(data)), wrap(ours))
    mpi_comm.Allreduce(wrap(make(data)), wrap(theirs))
    assert _raw(ours) == _raw(theirs)
    in_place_ours, in_place_theirs = make(data), make(data)
    comm.Allreduce(MPI.IN_PLACE, wrap(in_place_ours))
    mpi_comm.Allreduce(MPI.IN_PLACE, wrap(in_place_theirs))
    assert _raw(in_place_ours) == _raw(in_place_theirs)


@pytest.mark.parametrize("spec", list(SPECS))
def test_bcast_specs_match_mpi4py(comm, mpi_comm, spec):
    make, wrap = SPECS[spec]
    data = np.arange(N, dtype=np.float64) * (comm.rank + 1)
    ours, theirs = make(data), make(data)
    comm.Bcast(wrap(ours), root=comm.size - 1)
    mpi_comm.Bcast(wrap(theirs), root=comm.size - 1)
    assert _raw(ours) == _raw(theirs)


def test_none_is_in_place(comm, mpi_comm):
    assert is_in_place(None) and is_in_place(MPI.IN_PLACE) and not is_in_place(np.zeros(1))
    buf = np.arange(5.0) + comm.rank
    want = np.empty(5)
    mpi_comm.Allreduce(buf, want)
    comm.Allreduce(None, buf)
    np.testing.assert_array_equal(buf, want)


@pytest.mark.serial
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_specs_resolve_to_views_without_copying():
    c = np.zeros((3, 4))
    f = np.asfortranarray(c)
    for a in (c, f):
        view = flat(a, "buf", writable=True)
        assert view.size == 12 and np.shares_memory(view, a)
    raw = bytearray(16)
    view = flat([raw, MPI.INT], "buf", writable=True)
    assert view.size == 4 and view.dtype == np.int32
    view[:] = 7
    assert raw[:4] == (7).to_bytes(4, "little")
    base = np.arange(10, dtype=np.int32)
    view = flat([base, (3, 5), MPI.INT], "buf")
    assert view.tolist() == [5, 6, 7] and np.shares_memory(view, base)
    view = flat(np.float64(2.5), "buf")  # a NumPy scalar is a one-element buffer
    assert view.size == 1 and view[0] == 2.5
    view = flat(np.matrix([[1.0, 2.0], [3.0, 4.0]]), "buf")
    assert view.shape == (4,)


@pytest.mark.serial
def test_parse_vector_specs():
    buf = np.zeros(10)
    assert vector([buf, ([1, 2, 3], [0, 4, 7]), MPI.DOUBLE], "b")[1:] == ((1, 2, 3), (0, 4, 7))
    assert vector([buf, [2, 3]], "b")[1:] == ((2, 3), (0, 2))
    assert vector([buf, [2, 3], [5, 0], MPI.DOUBLE], "b")[1:] == ((2, 3), (5, 0))
    assert vector([buf, np.array([2, 3], np.uint16), np.array([5, 0], np.int64), MPI.DOUBLE], "b")[1:] == (
        (2, 3), (5, 0))
    with pytest.raises(ValueError, match="reach element 11 of a 10-element buffer"):
        vector([buf, ([5, 6], [0, 5]), MPI.DOUBLE], "b")


def test_non_contiguous_send_is_copied_recv_is_refused(comm, mpi_comm):
    base = np.arange(24.0).reshape(4, 6) + comm.rank
    strided = base[:, ::2]
    got = np.zeros(strided.shape)
    comm.Allreduce(strided, got)
    want = np.empty(strided.shape)
    mpi_comm.Allreduce(np.ascontiguousarray(strided), want)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="recvbuf: non-contiguous buffer of shape"):
        comm.Allreduce(np.zeros(12), np.zeros((4, 6))[:, ::2])


@pytest.mark.serial
@pytest.mark.parametrize("spec, message", [
    (3.5, "float does not expose the buffer interface"),
    ([1.0, 2.0], "a list of numbers is not a buffer; pass a NumPy array"),
    ([np.zeros(4), 5, MPI.DOUBLE], "count 5 at displacement 0 exceeds the 4-element buffer"),
    ([np.zeros(4), (2, 3), MPI.DOUBLE], "count 2 at displacement 3 exceeds"),
    ([bytearray(7), MPI.DOUBLE], "7 bytes is not a whole number of"),
    ([np.zeros(4), 1, 2, 3, MPI.DOUBLE], "buffer spec must be"),
])
def test_bad_specs(spec, message):
    with pytest.raises((ValueError, TypeError), match=message):
        flat(spec, "sendbuf")


def test_delegation_to_the_wrapped_communicator(comm, mpi_comm):
    assert comm.Get_name() == mpi_comm.Get_name()
    assert comm.Get_rank() == mpi_comm.Get_rank() and comm.Get_size() == mpi_comm.Get_size()
    assert comm.Is_intra()
    assert comm.allreduce({"rank": comm.rank}["rank"]) == sum(range(comm.size))
    assert comm.bcast({"x": [1, 2]} if comm.rank == 0 else None) == {"x": [1, 2]}
    p, r = comm.size, comm.rank
    got = np.zeros(3)
    comm.Sendrecv(np.full(3, float(r)), (r + 1) % p, 5, got, (r - 1) % p, 5)
    np.testing.assert_array_equal(got, np.full(3, float((r - 1) % p)))
    with pytest.raises(AttributeError):
        comm.No_such_method
    with pytest.raises(AttributeError):
        comm._private_name
