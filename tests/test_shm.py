"""The shared-memory engine (collectives.shm, csrc/shm.c) against native MPI: its forms at the
edges of a region and of a round, the check in its first phase, a rank that never arrives,
segments that must not leak, emulated nodes, and the Comms that get no segment."""
import functools
import logging
import os
import time

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import config, shm
from collectives.constants import SHM_CHUNK
from collectives.watchdog import StallError
from util import assert_close, assert_everywhere, assert_identical_across_ranks, environ, make_data

FORMS = {c: collectives.shm_names(c) for c in ("allreduce", "reduce")}


def shared(mpi_comm, **kwargs):
    """A Comm with a segment wherever one can be made (COLLECTIVES_SHM=1)."""
    with environ(COLLECTIVES_SHM="1"):
        return collectives.Comm(mpi_comm, **kwargs)


def shared_or_skip(mpi_comm, **kwargs):
    """shared(), or skip the test where the ranks get no segment."""
    c = shared(mpi_comm, **kwargs)
    if c._engine.segment is None:
        c.Free()
        pytest.skip("no shared segment")
    return c


@pytest.fixture(scope="module")
def comm(mpi_comm, check):
    c = shared(mpi_comm, check=check)
    yield c
    c.Free()


def segment_of(comm):
    """The Comm's segment; the test is skipped where there is none (one rank, the fallback)."""
    if comm._engine.segment is None:
        pytest.skip("no shared segment: one rank, or the NumPy fallback")
    return comm._engine.segment


def _ran(comm, algorithm):
    assert comm.last_algorithm == algorithm, (algorithm, comm.last_algorithm)


def _edges(cap, itemsize, p):
    """Counts at the region's edge (the direct forms' limit) and around one and several rounds."""
    per = SHM_CHUNK // itemsize
    return sorted({0, 1, p + 1, cap // itemsize, cap // itemsize + 1, per - 1, per, per + 1, 3 * per + p})


@pytest.mark.parametrize("dtype", [np.int8, np.float64, np.complex128], ids=str)
@pytest.mark.parametrize("algorithm", FORMS["allreduce"])
def test_allreduce_forms(comm, mpi_comm, algorithm, dtype):
    seg, p, r = segment_of(comm), comm.size, comm.rank
    for n in _edges(seg.cap, np.dtype(dtype).itemsize, p):
        fits = algorithm.endswith("pipelined") or n * np.dtype(dtype).itemsize <= seg.cap
        send = make_data(dtype, "sum", n, r)
        want = np.empty_like(send)
        if np.dtype(dtype).kind in "iu":
            # Exact in NumPy, wrapping as C's integers do (Open MPI 5's own int8 sum gave 127
            # where the sum wraps to -108).
            want[:] = functools.reduce(np.add, [make_data(dtype, "sum", n, q) for q in range(p)])
        else:
            mpi_comm.Allreduce(send, want)
        got = np.full_like(send, 7)
        comm.Allreduce(send, got, algorithm=algorithm)
        assert (comm.last_algorithm == algorithm) == fits, (n, comm.last_algorithm)
        assert_close(got, want, dtype, p, f"{algorithm} n={n}")
        assert_identical_across_ranks(mpi_comm, got, f"{algorithm} n={n}")
        buf = send.copy()
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_everywhere(mpi_comm, np.testing.assert_array_equal, buf, got, f"{algorithm} in place n={n}")


def test_allreduce_forms_agree_bit_for_bit(comm, mpi_comm):
    """Both forms combine in rank order: the same bits on every rank and from either form."""
    seg, r = segment_of(comm), comm.rank
    n = min(seg.cap // 4, 3 * SHM_CHUNK // 4)
    x = np.random.default_rng(r).standard_normal(n).astype(np.float32)
    direct, pipelined = np.empty_like(x), np.empty_like(x)
    comm.Allreduce(x, direct, algorithm="shm_direct")
    comm.Allreduce(x, pipelined, algorithm="shm_pipelined")
    assert direct.tobytes() == pipelined.tobytes()
    assert mpi_comm.allgather(direct.tobytes()) == [direct.tobytes()] * comm.size


@pytest.mark.parametrize("algorithm", FORMS["reduce"])
def test_reduce_forms(comm, mpi_comm, algorithm):
    seg, p, r = segment_of(comm), comm.size, comm.rank
    for root in sorted({0, p - 1}):
        for n in _edges(seg.cap, 4, p):
            send = make_data(np.int32, "sum", n, r)
            want, got = np.zeros(n, np.int32), np.full(n, 7, np.int32)
            mpi_comm.Reduce(send, want, root=root)
            comm.Reduce(send, got, root=root, algorithm=algorithm)
            if r == root:
                np.testing.assert_array_equal(got, want, f"{algorithm} n={n} root={root}")
                buf = send.copy()
                comm.Reduce(MPI.IN_PLACE, buf, root=root, algorithm=algorithm)
                np.testing.assert_array_equal(buf, want, f"{algorithm} in place n={n}")
            else:
                comm.Reduce(send, None, root=root, algorithm=algorithm)


def test_bcast(comm, mpi_comm):
    segment_of(comm)
    p, r = comm.size, comm.rank
    for root in sorted({0, p // 2, p - 1}):
        for n in (0, 1, 13, SHM_CHUNK - 1, SHM_CHUNK, SHM_CHUNK + 1, 5 * SHM_CHUNK // 2):
            want = make_data(np.uint8, "sum", n, root)
            got = want.copy() if r == root else np.zeros(n, np.uint8)
            comm.Bcast(got, root=root, algorithm="shm")
            _ran(comm, "bcast_shm")
            assert_everywhere(mpi_comm, np.testing.assert_array_equal, got, want, f"n={n} root={root}")


def test_allgather_and_allgatherv(comm, mpi_comm):
    segment_of(comm)
    p, r = comm.size, comm.rank
    for n in (0, 1, 7, SHM_CHUNK // 2 + 3, SHM_CHUNK + 1):
        send = make_data(np.int16, "sum", n, r)
        got, want = np.zeros(n * p, np.int16), np.zeros(n * p, np.int16)
        comm.Allgather(send, got, algorithm="shm")
        _ran(comm, "allgather_shm")
        mpi_comm.Allgather(send, want)
        assert_everywhere(mpi_comm, np.testing.assert_array_equal, got, want, f"n={n}")
        inplace = np.zeros(n * p, np.int16)
        inplace[r * n:(r + 1) * n] = send
        comm.Allgather(MPI.IN_PLACE, inplace, algorithm="shm")
        assert_everywhere(mpi_comm, np.testing.assert_array_equal, inplace, want, f"in place n={n}")
        # Uneven blocks with zeros, in reverse rank order with gaps.
        counts = [(n + 3 * i) % (n + 2) for i in range(p)]
        displs, at = [0] * p, 1
        for i in reversed(range(p)):
            displs[i], at = at, at + counts[i] + 2
        mine = make_data(np.int16, "sum", counts[r], r)
        got, want = np.zeros(at, np.int16), np.zeros(at, np.int16)
        comm.Allgatherv(mine, [got, (counts, displs), MPI.SHORT], algorithm="shm")
        mpi_comm.Allgatherv(mine, [want, (counts, displs), MPI.SHORT])
        assert_everywhere(mpi_comm, np.testing.assert_array_equal, got, want, f"v counts={counts}")


def test_reduce_scatter(comm, mpi_comm):
    segment_of(comm)
    p, r = comm.size, comm.rank
    for block in (0, 1, 5, SHM_CHUNK // 8 + 1):
        send = make_data(np.float64, "sum", block * p, r)
        got, want = np.full(block, 7.0), np.zeros(block)
        comm.Reduce_scatter_block(send, got, algorithm="shm")
        _ran(comm, "reduce_scatter_shm")
        mpi_comm.Reduce_scatter_block(send, want)
        assert_close(got, want, np.float64, p, f"block={block}")
        buf = send.copy()
        comm.Reduce_scatter_block(MPI.IN_PLACE, buf, algorithm="shm")
        np.testing.assert_array_equal(buf[:block], got)
        np.testing.assert_array_equal(buf[block:], send[block:])  # past the block: untouched
        counts = [block + (2 * i) % 3 for i in range(p)]
        send = make_data(np.int64, "sum", sum(counts), r)
        got, want = np.zeros(counts[r], np.int64), np.zeros(counts[r], np.int64)
        comm.Reduce_scatter(send, got, counts, algorithm="shm")
        mpi_comm.Reduce_scatter(send, want, counts)
        np.testing.assert_array_equal(got, want, f"counts={counts}")


def test_gather_and_scatter(comm, mpi_comm):
    segment_of(comm)
    p, r = comm.size, comm.rank
    for root in sorted({0, p - 1}):
        for n in (0, 1, 9, SHM_CHUNK // p + 1, SHM_CHUNK + 5):
            mine = make_data(np.int8, "sum", n, r)
            got = np.zeros(n * p, np.int8) if r == root else None
            comm.Gather(mine, got, root=root, algorithm="shm")
            _ran(comm, "gather_shm")
            want = np.zeros(n * p, np.int8) if r == root else None
            mpi_comm.Gather(mine, want, root=root)
            whole = make_data(np.int8, "sum", n * p, root) if r == root else None
            out, ref = np.zeros(n, np.int8), np.zeros(n, np.int8)
            comm.Scatter(whole, out, root=root, algorithm="shm")
            _ran(comm, "scatter_shm")
            mpi_comm.Scatter(whole, ref, root=root)
            np.testing.assert_array_equal(out, ref, f"scatter n={n} root={root}")
            if r == root:
                np.testing.assert_array_equal(got, want, f"gather n={n} root={root}")
                got[:] = 0
                got[root * n:(root + 1) * n] = mine
                comm.Gather(MPI.IN_PLACE, got, root=root, algorithm="shm")
                np.testing.assert_array_equal(got, want, f"gather in place n={n}")
                comm.Scatter(whole, MPI.IN_PLACE, root=root, algorithm="shm")
            else:
                comm.Gather(mine, None, root=root, algorithm="shm")
                comm.Scatter(None, out, root=root, algorithm="shm")
                np.testing.assert_array_equal(out, ref)
    # Gatherv's counts are the root's alone: the shared-memory gather does not apply.
    counts = list(range(1, p + 1))
    got = np.zeros(sum(counts), np.int8) if r == root else None
    comm.Gatherv(np.full(counts[r], r, np.int8), [got, counts] if r == root else None, root=root, algorithm="shm")
    assert comm.last_algorithm != "gather_shm"
    if r == root:
        np.testing.assert_array_equal(got, np.repeat(np.arange(p), counts))


def test_barrier(comm, mpi_comm):
    segment_of(comm)
    for _ in range(3):
        comm.Barrier(algorithm="shm")
        _ran(comm, "barrier_shm")


def test_nonblocking_calls_run_in_the_segment(comm, mpi_comm):
    segment_of(comm)
    sends = [make_data(np.float64, "sum", n, comm.rank) for n in (3, 1000, SHM_CHUNK // 4)]
    outs = [np.zeros_like(x) for x in sends]
    reqs = [comm.Iallreduce(x, o, algorithm=a) for x, o, a in zip(sends, outs, ("shm_direct", "shm_pipelined",
                                                                             "shm_direct"))]
    for req in reqs:
        req.wait()
    for x, o in zip(sends, outs):
        want = np.empty_like(x)
        mpi_comm.Allreduce(x, want)
        assert_close(o, want, np.float64, comm.size, "nonblocking")


@pytest.mark.parametrize("what", ["count", "dtype", "op", "root", "collective", "algorithm"])
def test_a_mismatch_raises_everywhere_then_the_comm_works(mpi_comm, what):
    """Each rank's fingerprint rides in the first phase: a rank that differs makes every rank
    raise, with an in-place input left as it was; the next call is right."""
    c = shared_or_skip(mpi_comm)
    p, last = c.size, c.rank == c.size - 1
    buf = np.arange(8, dtype=np.float64)
    before = buf.copy()
    with pytest.raises(ValueError):
        if what == "count":
            c.Allreduce(MPI.IN_PLACE, buf[:7] if last else buf, algorithm="shm_direct")
        elif what == "dtype":
            c.Allreduce(MPI.IN_PLACE, buf.view(np.int64) if last else buf, algorithm="shm_direct")
        elif what == "op":
            c.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX if last else MPI.SUM, algorithm="shm_direct")
        elif what == "root":
            c.Bcast(buf, root=1 if last else 0, algorithm="shm")
        elif what == "collective":
            c.Bcast(buf, algorithm="shm") if last else c.Allreduce(MPI.IN_PLACE, buf, algorithm="shm_direct")
        else:
            c.Allreduce(MPI.IN_PLACE, buf, algorithm="ring" if last else "shm_pipelined")
    np.testing.assert_array_equal(buf, before)
    out = np.zeros(8)
    c.Allreduce(before, out)
    np.testing.assert_array_equal(out, before * p)
    c.Free()


def test_a_bad_argument_on_one_rank_raises_on_the_others(mpi_comm):
    c = shared_or_skip(mpi_comm)
    x = np.ones(4)
    if c.rank == 0:
        with pytest.raises(ValueError, match="recvbuf"):
            c.Allreduce(x, np.zeros(5), algorithm="shm_direct")
    else:
        with pytest.raises(ValueError, match="invalid arguments on another rank"):
            c.Allreduce(x, np.zeros(4), algorithm="shm_direct")
    out = np.zeros(4)
    c.Allreduce(x, out)
    np.testing.assert_array_equal(out, x * c.size)
    c.Free()


def test_a_rank_that_never_arrives_is_named(mpi_comm):
    """The watchdog watches the segment's waits: the ranks that wait raise StallError naming
    the one that never came, within its limit; the Comm is unusable after it."""
    c = shared(mpi_comm, timeout=1.0)
    if c._engine.segment is None:
        c.Free()
        pytest.skip("no shared segment")
    missing = c.size - 1
    if c.rank != missing:
        start = time.monotonic()
        with pytest.raises(StallError) as info:
            c.Allreduce(np.ones(4), np.zeros(4), algorithm="shm_direct")
        assert 1.0 <= info.value.waited and time.monotonic() - start < 60
        assert missing in {peer for peer, _ in info.value.peers}, info.value.peers
        assert f"{missing}" in str(info.value).split("for rank(s)")[1]
        with pytest.raises(RuntimeError, match="unusable"):
            c.Barrier()
    mpi_comm.Barrier()
    c.Free()


def _ours_in_dev_shm(creator):
    """The names in /dev/shm of the segments process ``creator`` made (another communicator of
    the launch may be making its own meanwhile)."""
    prefix = f"collectives-{creator}-"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix)) if os.path.isdir("/dev/shm") else []


def _our_mappings():
    """Mappings of this process backed by one of our segments (unlinked: "(deleted)")."""
    with open("/proc/self/maps") as f:
        return sum("/dev/shm/collectives-" in line for line in f)


def test_comms_leak_no_segment(mpi_comm):
    """Segments are unlinked once mapped and unmapped by Free: no growth in /dev/shm, in the
    open files or in the mappings, over a hundred Comms."""
    first = shared(mpi_comm)
    has = first._engine.segment is not None
    first.Free()
    if not has:
        pytest.skip("no shared segment")
    creator = mpi_comm.bcast(os.getpid())
    files, fds, maps = _ours_in_dev_shm(creator), len(os.listdir("/proc/self/fd")), _our_mappings()
    for _ in range(100):
        c = shared(mpi_comm)
        assert c._engine.segment is not None
        assert _our_mappings() == maps + 1
        c.Free()
    mpi_comm.Barrier()
    assert _ours_in_dev_shm(creator) == files == []
    assert len(os.listdir("/proc/self/fd")) == fds
    assert _our_mappings() == maps


def test_emulated_nodes_share_memory_inside_each_node_only(mpi_comm):
    p = mpi_comm.size
    if p < 4 or collectives.comm.NATIVE is False:
        pytest.skip("needs two emulated nodes of two ranks or more, and the native engine")
    with environ(COLLECTIVES_SHM="1", COLLECTIVES_NODE="2"):
        c = collectives.Comm(mpi_comm)
    nodes = c._nodes
    assert c._engine.segment is None  # it spans nodes
    intra = nodes.intra
    assert (intra._engine.segment is not None) == (intra.size > 1)
    assert nodes.lane._engine.segment is None
    x = make_data(np.float64, "sum", 100003, c.rank)
    got, want = np.zeros_like(x), np.zeros_like(x)
    c.Allreduce(x, got, algorithm="hierarchical" if p % 2 == 0 else "node_leader")
    mpi_comm.Allreduce(x, want)
    assert_close(got, want, np.float64, p, "emulated nodes")
    c.Free()


def test_auto_takes_the_segment(mpi_comm):
    c = shared_or_skip(mpi_comm)
    c.Allreduce(np.ones(2), np.zeros(2))
    assert c.last_algorithm.startswith("allreduce_shm")
    c.Barrier()
    assert c.last_algorithm == "barrier_shm"
    assert "shm" in c.explain("allreduce", 1 << 20)
    c.Free()


# (method, bytes of the whole buffer, what auto runs at 2 ranks on a segment): the tuning rows
# that send point to point, and the segment's own form on the far side of their bounds.
POINT_TO_POINT_ROWS = [("Bcast", 256 << 10, "bcast_binomial"), ("Bcast", 1 << 20, "bcast_shm"),
                       ("Gather", 384 << 10, "gather_binomial"), ("Gather", 256 << 10, "gather_shm"),
                       ("Scatter", 128 << 10, "scatter_linear"), ("Scatter", 64 << 10, "scatter_shm")]


@pytest.mark.parametrize("method, nbytes, algorithm", POINT_TO_POINT_ROWS)
def test_auto_leaves_the_segment_where_one_mpi_message_is_faster(mpi_comm, method, nbytes, algorithm):
    """At 2 ranks auto sends large scatters, and broadcasts and gathers of some sizes, point to
    point (docs/shm.md); either side of those rows' bounds the results are MPI's."""
    if mpi_comm.size != 2:
        pytest.skip("the rows are for 2 ranks")
    c = shared_or_skip(mpi_comm)
    p, r, whole = c.size, c.rank, nbytes // 8
    if method == "Bcast":
        got = make_data(np.float64, "sum", whole, 0) if r == 0 else np.zeros(whole)
        want = got.copy()
        c.Bcast(got)
        mpi_comm.Bcast(want)
    elif method == "Gather":
        mine = make_data(np.float64, "sum", whole // p, r)
        got, want = (np.zeros(whole), np.zeros(whole)) if r == 0 else (None, None)
        c.Gather(mine, got)
        mpi_comm.Gather(mine, want)
    else:
        send = make_data(np.float64, "sum", whole, 0) if r == 0 else None
        got, want = np.zeros(whole // p), np.zeros(whole // p)
        c.Scatter(send, got)
        mpi_comm.Scatter(send, want)
    assert c.last_algorithm == algorithm, (method, nbytes, c.last_algorithm)
    if got is not None:
        np.testing.assert_array_equal(got, want)
    c.Free()


@pytest.mark.serial
def test_when_no_segment_is_made():
    settings = config.snapshot({})
    assert shm.refusal(settings, 1, False) == "one rank"
    assert "fallback" in shm.refusal(settings, 2, True)
    assert shm.refusal(config.snapshot({"COLLECTIVES_SHM": "0"}), 2, False) == "COLLECTIVES_SHM=0"
    crowded = shm.refusal(settings, 4, False, {"MPI_LOCALNRANKS": "4"}, cores=2)
    assert "4 ranks on 2 cores" in crowded
    assert shm.refusal(config.snapshot({"COLLECTIVES_SHM": "1"}), 4, False, {"MPI_LOCALNRANKS": "4"}, cores=2) is None
    assert shm.refusal(settings, 2, False, {"MPI_LOCALNRANKS": "2"}, cores=2) is None
    with pytest.raises(ValueError, match="COLLECTIVES_SHM"):
        config.snapshot({"COLLECTIVES_SHM": "yes"})


def test_a_segment_that_cannot_be_made_leaves_the_comm_on_point_to_point(mpi_comm, caplog):
    """A segment larger than /dev/shm holds: one logged reason, and the collectives run
    point-to-point."""
    if mpi_comm.size < 2 or not collectives.comm.NATIVE:
        pytest.skip("a segment needs two ranks and the native engine")
    with caplog.at_level(logging.INFO, logger="collectives"), environ(COLLECTIVES_SHM="1",
                                                                       COLLECTIVES_SHM_BYTES=str(1 << 50)):
        c = collectives.Comm(mpi_comm)
    assert c._engine.segment is None
    if c.rank == 0:
        assert any("no shared segment" in m for m in caplog.messages), caplog.messages
    out = np.zeros(3)
    c.Allreduce(np.ones(3), out)
    assert (out == c.size).all() and "shm" not in c.last_algorithm
    c.Free()
