"""The neighbourhood collectives on the Cartesian, graph and distributed-graph communicators a
Comm's constructors return: Neighbor_allgather(v) and Neighbor_alltoall(v), blocking and
nonblocking, against native MPI's on the same topology made from the plain communicator, byte
for byte.  The topologies hold MPI's edge cases: periodic dimensions of size 1 and 2 (the same
neighbour on both sides), MPI.PROC_NULL neighbours (their blocks stay untouched), and
repeated edges of a graph and of a distributed graph."""
import numpy as np
import pytest
from mpi4py import MPI

import collectives
from util import LARGE, assert_bytes_equal, assert_everywhere, make_data, sizes, waiting

SENTINEL = 77
METHODS = ["Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv"]
DTYPES = [np.dtype(t) for t in (np.int8, np.float32, np.complex128)]


def _ring(p, r):
    """A graph's neighbours of rank r: next, previous, next again, previous again."""
    return [(r + 1) % p, (r - 1) % p, (r + 1) % p, (r - 1) % p]


TOPOLOGIES = {
    "ring": lambda c: c.Create_cart([c.size], [True]),
    "line": lambda c: c.Create_cart([c.size], [False]),
    "self_and_line": lambda c: c.Create_cart([1, c.size], [True, False]),
    "grid": lambda c: c.Create_cart(MPI.Compute_dims(c.size, 2), [True, True]),
    "graph": lambda c: c.Create_graph(np.cumsum([4] * c.size).tolist(),
                                      sum((_ring(c.size, i) for i in range(c.size)), [])),
    "adjacent": lambda c: c.Create_dist_graph_adjacent(
        [(c.rank - 1) % c.size, (c.rank - 2) % c.size, c.rank, (c.rank - 1) % c.size],
        [(c.rank + 1) % c.size, c.rank, (c.rank + 2) % c.size, (c.rank + 1) % c.size]),
    "dist_graph": lambda c: c.Create_dist_graph([c.rank], [2], [(c.rank + 1) % c.size, (c.rank + 3) % c.size]),
}


def edges(topo):
    """(sends, recvs): per send block, per receive block, the edge it travels as (sender,
    receiver, the sender's direction or occurrence), None for an MPI.PROC_NULL neighbour:
    worked out from MPI's definitions, independently of collectives.neighbors."""
    r = topo.Get_rank()
    kind = topo.Get_topology()
    if kind == MPI.CART:
        sends, recvs = [], []
        for d in range(topo.Get_dim()):
            below, above = topo.Shift(d, 1)
            # Block 2d goes down, 2d+1 up; the block from below came up, the one from above down.
            sends += [None if below == MPI.PROC_NULL else (r, below, (d, -1)),
                      None if above == MPI.PROC_NULL else (r, above, (d, +1))]
            recvs += [None if below == MPI.PROC_NULL else (below, r, (d, +1)),
                      None if above == MPI.PROC_NULL else (above, r, (d, -1))]
        return sends, recvs
    if kind == MPI.GRAPH:
        sources = destinations = topo.Get_neighbors(r)
    else:
        sources, destinations, _ = topo.Get_dist_neighbors()

    def numbered(peers, out):
        seen = {}
        result = []
        for peer in peers:
            k = seen[peer] = seen.get(peer, -1) + 1
            result.append((r, peer, k) if out else (peer, r, k))
        return result

    return numbered(destinations, True), numbered(sources, False)


def count_of(edge, n):
    """Elements on ``edge`` for a call of about ``n`` per block, the same at both its ends."""
    if edge is None:
        return 1  # a PROC_NULL neighbour's block: never written
    sender, receiver, how = edge
    return (n + 3 * sender + 5 * receiver + 7 * hash(how) % 3) % (n + 4) if n else 0


def specs(method, topo, dtype, n):
    """(sendbuf spec, recvbuf spec, receive array) of ``method`` on ``topo`` at about ``n``
    per block; the receive array holds SENTINEL."""
    r = topo.Get_rank()
    sends, recvs = edges(topo)
    if method in ("Neighbor_allgather", "Neighbor_alltoall"):
        rc = [n] * len(recvs)
        sc = [n] * (1 if method == "Neighbor_allgather" else len(sends))
    elif method == "Neighbor_allgatherv":
        # Every block a rank sends has its count, n + r % 3.
        rc = [1 if e is None else n + e[0] % 3 for e in recvs]
        sc = [n + r % 3]
    else:
        rc = [count_of(e, n) for e in recvs]
        sc = [count_of(e, n) for e in sends]
    send = make_data(dtype, "sum", sum(sc) + 2, r)
    # The receive blocks in reverse order with a gap, for the v-forms.
    rd, at = [0] * len(rc), 1
    for k in reversed(range(len(rc))):
        rd[k], at = at, at + rc[k] + 1
    recv = np.full(at if method.endswith("v") else sum(rc), SENTINEL, dtype)
    # [buf, count]: the one block's count (Neighbor_allgather(v)) or each block's (Neighbor_alltoall).
    sendspec = [send, sc[0] if sc else 0] if method != "Neighbor_alltoallv" else [
        send, (sc, np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(int).tolist())]
    recvspec = [recv, (rc, rd)] if method.endswith("v") else recv
    return sendspec, recvspec, recv


def native(method, topo, sendspec, recvspec):
    """Native MPI's call of the same specs on byte views (every dtype alike)."""
    def bytes_of(spec, out):
        arr = spec[0] if isinstance(spec, list) else spec
        k = arr.itemsize
        view = (np.full_like(arr, SENTINEL) if out else arr).view(np.uint8)
        if not isinstance(spec, list):
            return [view, MPI.BYTE], arr, view
        if isinstance(spec[1], tuple):
            counts, displs = spec[1]
            return [view, ([c * k for c in counts], [d * k for d in displs]), MPI.BYTE], arr, view
        return [view, spec[1] * k, MPI.BYTE], arr, view

    s, _, _ = bytes_of(sendspec, False)
    rspec, arr, view = bytes_of(recvspec, True)
    getattr(topo, method)(s, rspec)
    return view.view(arr.dtype)


@pytest.fixture(params=list(TOPOLOGIES), scope="module")
def topologies(request, comm, mpi_comm):
    """(ours, native's) of one topology over the fixture's communicator."""
    make = TOPOLOGIES[request.param]
    ours = make(comm)
    if request.param == "dist_graph":
        # MPI may list a general distributed graph's sources in the order their edges arrive:
        # native's is made adjacent, in the order ours lists.
        theirs = mpi_comm.Create_dist_graph_adjacent(*ours.Get_dist_neighbors()[:2])
    else:
        theirs = make(mpi_comm)
    yield request.param, ours, theirs
    ours.Free()
    theirs.Free()


@pytest.mark.matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("method", METHODS)
def test_neighbor(topologies, mpi_comm, method, dtype):
    name, ours, theirs = topologies
    assert type(ours).__module__ == "collectives.comm", type(ours)
    p = ours.Get_size()
    for n in sizes(p):
        n = max(n // 8, 1) if n == LARGE else n
        what = f"{method} on {name} {dtype} n={n} p={p}"
        sendspec, recvspec, got = specs(method, ours, dtype, n)
        kept = (sendspec[0] if isinstance(sendspec, list) else sendspec).copy()
        getattr(ours, method)(sendspec, recvspec)
        assert ours.last_algorithm == ("neighbor_allgather_linear" if "allgather" in method
                                       else "neighbor_alltoall_linear"), what
        want = native(method, theirs, sendspec, recvspec)
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, what)
        sent = sendspec[0] if isinstance(sendspec, list) else sendspec
        assert_everywhere(mpi_comm, assert_bytes_equal, sent, kept, f"{what}: sendbuf changed")


def test_proc_null_blocks_untouched(comm, mpi_comm):
    """On a line, the ends' blocks from MPI.PROC_NULL keep what they held."""
    line = comm.Create_cart([comm.size], [False])
    r, p = line.Get_rank(), line.Get_size()
    got = np.full(2 * 3, SENTINEL, np.int32)
    line.Neighbor_allgather(np.full(3, r, np.int32), got)
    want = [SENTINEL if r == 0 else r - 1] * 3 + [SENTINEL if r == p - 1 else r + 1] * 3
    assert_everywhere(mpi_comm, assert_bytes_equal, got, np.array(want, np.int32), "line ends")
    line.Free()


@pytest.mark.parametrize("method", METHODS)
def test_ineighbor(topologies, mpi_comm, method):
    """Two nonblocking calls in flight, then the blocking one, in order."""
    name, ours, theirs = topologies
    calls = [specs(method, ours, np.int64, n) for n in (2, 4099, 5)]
    reqs = [getattr(ours, "I" + method[0].lower() + method[1:])(s, g) for s, g, _ in calls[:2]]
    getattr(ours, method)(calls[2][0], calls[2][1])
    collectives.Request.waitall(reqs)
    for k, (s, g, got) in enumerate(calls):
        want = native(method, theirs, s, g)
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, f"I{method} on {name} call {k}")


def test_neighbor_counts_change_without_new_plans(comm, mpi_comm):
    ring = comm.Create_dist_graph_adjacent([(comm.rank - 1) % comm.size], [(comm.rank + 1) % comm.size])
    native_ring = mpi_comm.Create_dist_graph_adjacent([(mpi_comm.rank - 1) % mpi_comm.size],
                                                      [(mpi_comm.rank + 1) % mpi_comm.size])
    plans = None
    for n in (0, 5, 17, 3, 1000, 2):
        sendspec, recvspec, got = specs("Neighbor_alltoallv", ring, np.float64, n)
        ring.Neighbor_alltoallv(sendspec, recvspec)
        want = native("Neighbor_alltoallv", native_ring, sendspec, recvspec)
        assert_everywhere(mpi_comm, assert_bytes_equal, got, want, f"n={n}")
        plans = len(ring._engine) if plans is None else plans
        assert len(ring._engine) == plans, f"n={n} made a plan"
    ring.Free()
    native_ring.Free()


def test_neighbor_bad_arguments(comm):
    ring = comm.Create_cart([comm.size], [True])
    with pytest.raises(ValueError, match="IN_PLACE is not valid"):
        ring.Neighbor_alltoall(MPI.IN_PLACE, np.zeros(2))
    with pytest.raises(TypeError, match="dtype"):
        ring.Neighbor_alltoall(np.zeros(2), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="not divisible by 2 destinations"):
        ring.Neighbor_alltoall(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="recvbuf holds 2 blocks of 2 elements, sendbuf 3"):
        ring.Neighbor_allgather(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="3 counts for a communicator of size 2"):
        ring.Neighbor_alltoallv([np.zeros(3), [1, 1, 1]], [np.zeros(2), [1, 1]])
    ring.Free()


@pytest.mark.parametrize("method", ["Neighbor_alltoallv", "Ineighbor_alltoallv"])
def test_neighbor_mismatch_raises_everywhere(comm, mpi_comm, method):
    """A send count that its receiver does not expect raises on every rank, naming the edge;
    then the communicator works on."""
    ring = comm.Create_cart([comm.size], [True])
    r, p = ring.Get_rank(), ring.Get_size()
    run = waiting(getattr(ring, method))
    sends = [1, 2 if r == 0 else 1]  # rank 0 sends one element more up
    up = 1 % p
    with pytest.raises(ValueError, match=f"rank 0 sends 2 elements to rank {up}, which receives 1"):
        run([np.zeros(sum(sends)), sends], [np.zeros(2), [1, 1]])
    got = np.zeros(2)
    ring.Neighbor_allgather(np.full(1, float(r)), got)
    assert_everywhere(mpi_comm, assert_bytes_equal, got, np.array([(r - 1) % p, (r + 1) % p], float), "after")
    ring.Free()


@pytest.mark.parametrize("method", ["Neighbor_alltoallv", "Ineighbor_alltoallv"])
def test_neighbor_self_mismatch_raises_everywhere(comm, mpi_comm, method):
    """A rank's message to itself (its schedule's copy) whose receive count differs raises
    there, naming the message, and on the other ranks as another rank's invalid arguments;
    then the communicator works on."""
    p, r = comm.size, comm.rank
    hood = comm.Create_dist_graph_adjacent([r, (r - 1) % p], [r, (r + 1) % p])
    bad = r == 0
    run = waiting(getattr(hood, method))
    with pytest.raises(ValueError) as info:
        run([np.zeros(3), [2 if bad else 1, 1]], [np.zeros(2), [1, 1]])
    if bad:
        assert str(info.value) == "Neighbor_alltoallv: rank 0 sends 2 elements to rank 0, which receives 1 from rank 0"
    elif comm.check:
        assert "invalid arguments on another rank" in str(info.value)
    got = np.full(2, -1.0)
    hood.Neighbor_alltoallv([np.array([r, 10.0 + r]), [1, 1]], [got, [1, 1]])
    assert_everywhere(mpi_comm, assert_bytes_equal, got, np.array([r, 10.0 + (r - 1) % p]), "after")
    hood.Free()
