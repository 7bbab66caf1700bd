"""Node-aware compressed all-reduce under COLLECTIVES_NODE layouts on one host.

Every rank's gradient is a pure function of its rank (tests.test_compression.grad), so each
rank computes the exact sum with NumPy; results are checked against it (exactly up to float
rounding for ``none``, within the documented error bounds for the quantizers), for identical
bits on every rank through a native Allgather of a hash, and for the bytes sent between nodes.
"""
import hashlib

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import compression
from collectives.compression import COMPRESSORS, ErrorFeedback, allreduce
from collectives.node import layout
from tests.test_compression import (QUANTIZERS, SETTINGS, SIZES, chunk_sizes, error_bound, expected, grad,
                                    payload_nbytes, reduce_scatter_bytes)

WORLD = MPI.COMM_WORLD
# Regular layouts of several nodes with several ranks: 2x2 fits np 4, 2x3 and 3x2 np 6,
# 2x4 and 4x2 np 8.
LAYOUTS = ["2x2", "2x3", "3x2", "2x4", "4x2"]


def node_comm(monkeypatch, spec, force=True):
    """A collectives.Comm over COMM_WORLD whose nodes are laid out as ``spec`` (skip if it
    does not fit this launch); ``force``: every compressor goes node-aware, whatever it saves."""
    try:
        counts = layout(spec, WORLD.size)
    except ValueError:
        pytest.skip(f"layout {spec} does not fit {WORLD.size} ranks")
    monkeypatch.setenv("COLLECTIVES_NODE", spec)
    if force:
        monkeypatch.setattr(compression, "NODE_RATIO", 0)
    return collectives.Comm(WORLD), counts


@pytest.fixture(params=["whole", "pieces"])
def segmented(request, monkeypatch):
    """"pieces": the pipeline cuts vectors into segments of 256 bytes (several segments from
    a few hundred elements on, an uneven last one), "whole": the default (one segment here)."""
    if request.param == "pieces":
        monkeypatch.setattr(compression, "SEGMENT_BYTES", 256)
    return request.param


def largest(segmented):
    """The longest vector a test sends: ~10^5 elements in one segment, ~2 x 10^4 (hundreds of
    256-byte segments, each a round of Python-level messages) in pieces."""
    return 100_003 if segmented == "whole" else 20_011


def assert_same_bits(out, what):
    """Every rank of COMM_WORLD holds the same bytes: native Allgather of a SHA-256 digest."""
    mine = np.frombuffer(hashlib.sha256(np.ascontiguousarray(out).tobytes()).digest(), np.uint8)
    every = np.empty((WORLD.size, len(mine)), np.uint8)
    WORLD.Allgather(mine, every)
    assert (every == mine).all(), f"{what}: result differs across ranks"


def rounding(gs, dtype):
    """Bound on float rounding of any order of summing ``gs``."""
    return 4 * len(gs) * np.finfo(dtype).eps * sum(np.abs(g.astype(np.float64)) for g in gs)


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_none_is_the_exact_sum(monkeypatch, segmented, spec, dtype):
    """``none`` across nodes: NumPy's sum of every rank's vector up to summation order."""
    comm, _ = node_comm(monkeypatch, spec)
    with comm:
        for n in SIZES + [largest(segmented)]:
            gs = [grad(q, n, 0, dtype) for q in range(WORLD.size)]
            seen = []
            out, state = allreduce(comm, gs[WORLD.rank], "none", report=seen.append)
            what = f"none {spec} n={n}: {seen}"
            assert out.dtype == dtype and out.shape == (n,) and state is None
            assert seen[0].shape == "sum/node", what
            assert np.all(np.abs(out - np.sum(gs, axis=0, dtype=np.float64)) <= rounding(gs, dtype)), what
            assert_same_bits(out, what)


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name,ratio", [("randk", 0.1), ("topk", 0.5)], ids=["randk", "topk-dense"])
def test_summed_shapes_match_the_decoded_sum(monkeypatch, spec, name, ratio):
    """random-k (sum shape) and top-k's dense fallback across nodes, two steps with error
    feedback: the sum of every rank's decoded payload, rebuilt rank by rank."""
    # expected() builds its compressors from SETTINGS
    monkeypatch.setitem(SETTINGS, name, dict(ratio=ratio))
    comm, _ = node_comm(monkeypatch, spec)
    p, r = WORLD.size, WORLD.rank
    with comm:
        for n in SIZES:
            comp, state = COMPRESSORS[name](**SETTINGS[name]), None
            for step in range(2):
                out, state = allreduce(comm, grad(r, n, step, np.float64), comp, state)
            gs = [grad(q, n, 1, np.float64) for q in range(p)]
            what = f"{name} {spec} n={n}: {comp.last}"
            np.testing.assert_allclose(out, expected(name, p, n, 2, np.float64), rtol=0,
                                       atol=np.max(rounding(gs, np.float64), initial=0) * 4, err_msg=what)
            assert comp.last.shape.endswith("/node") or (name == "topk" and n == 0), what
            assert_same_bits(out, what)


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name", QUANTIZERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantizers_within_bound(monkeypatch, segmented, spec, name, dtype):
    """int8, qsgd, fp16 and sign across nodes against NumPy's exact sum, within the flat
    shape's bound of two roundings (a node's sum is no larger than the sum of its ranks'
    magnitudes, so the bound carries over), error feedback off; the node-aware shape ran."""
    comm, _ = node_comm(monkeypatch, spec)
    p, r = WORLD.size, WORLD.rank
    with comm:
        for n in SIZES + [10_007]:
            comp = COMPRESSORS[name](**SETTINGS[name], error_feedback=False)
            gs = [grad(q, n, 0, dtype) for q in range(p)]
            out, state = allreduce(comm, gs[r], comp)
            err = np.abs(out - sum(g.astype(np.float64) for g in gs))
            bound = error_bound(name, gs, comp) + rounding(gs, dtype)
            what = f"{name} {spec} n={n}: worst excess {np.max(err - bound, initial=0)}"
            assert out.dtype == dtype and out.shape == (n,) and state is None
            assert comp.last.shape == "requantize/node", comp.last
            assert np.all(err <= bound), what
            assert_same_bits(out, what)


def lane_bytes(comp, n, counts, itemsize):
    """Bytes this rank sends to other nodes: the flat shape's, on its shard, across its lane."""
    k, r = counts[0], WORLD.rank
    shard = chunk_sizes(n, k, comp.unit)[r % k]
    return reduce_scatter_bytes(comp, shard, len(counts), r // k, itemsize)


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name", ["none"] + QUANTIZERS)
def test_bytes_between_nodes(monkeypatch, segmented, spec, name):
    """wire_bytes is what the lane exchange sends, and a node's ranks together send about
    2 (N - 1) / N of the whole payload: k times less than the flat shape's 2 k (N - 1) / N."""
    comm, counts = node_comm(monkeypatch, spec)
    N, k = len(counts), counts[0]
    with comm:
        for n in SIZES + [largest(segmented)]:
            comp = COMPRESSORS[name](**SETTINGS.get(name, {}))
            allreduce(comm, grad(WORLD.rank, n, 0, np.float32), comp)
            got = comp.last.wire_bytes
            assert got == lane_bytes(comp, n, counts, 4), f"{name} {spec} n={n}: {comp.last}"
            per_node = np.zeros(N, np.int64)
            WORLD.Allreduce(np.eye(N, dtype=np.int64)[WORLD.rank // k] * got, per_node)
            whole = payload_nbytes(comp, n, 4)
            slack = 2 * k * N * payload_nbytes(comp, comp.unit, 4)
            assert per_node.max() <= 2 * (N - 1) / N * whole + slack, (name, spec, n, per_node)


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name,settings", [("sign", {}), ("int8", dict(error_feedback=True)),
                                           ("randk", {})], ids=["sign", "int8", "randk"])
def test_error_feedback_across_nodes(monkeypatch, segmented, spec, name, settings):
    """Residual shapes (whole gradient; the requantizers' residual nonzero only on this rank's
    shard, the server chunk inside it) and, over 4 calls, sum of the results = sum of the
    gradients - every residual: error feedback delays, never loses, across nodes too.  The
    first call starts from a residual nonzero everywhere (as a checkpoint from another rank
    count leaves it), which must be sent, not stranded outside the shard."""
    comm, counts = node_comm(monkeypatch, spec)
    p, r, n, k = WORLD.size, WORLD.rank, 3001, counts[0]
    comp, state = COMPRESSORS[name](**dict(SETTINGS[name], **settings)), ErrorFeedback()
    state.residual = grad(r, n, 99, np.float64)
    got, true = np.zeros(n), sum(grad(q, n, 99, np.float64) for q in range(p))
    with comm:
        for step in range(4):
            out, state = allreduce(comm, grad(r, n, step, np.float64), comp, state)
            got += out
            true += sum(grad(q, n, step, np.float64) for q in range(p))
    assert state.residual.shape == (n,) and state.residual.dtype == np.float64
    held = state.residual.copy()
    if comp.shape == "requantize":
        shard = np.cumsum([0] + chunk_sizes(n, k, comp.unit))[r % k:r % k + 2]
        lo, hi = state.server_span
        assert shard[0] <= lo <= hi <= shard[1] and state.server.shape == (hi - lo,)
        assert not held[:shard[0]].any() and not held[shard[1]:].any()
        held[lo:hi] += state.server
    else:
        assert state.server is None
    left = np.empty(n)
    WORLD.Allreduce(held, left)
    scale = 4 * p * np.max(np.abs(true))
    np.testing.assert_allclose(got + left, true, rtol=0, atol=1e-12 * scale)
    assert np.max(np.abs(left)) > 1e-6 * scale  # something was held back: the check has teeth


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name", ["topk", "dgc", "threshold"])
def test_sparse_pairs_cross_to_each_node_once(monkeypatch, spec, name):
    """The sparse all-gather across nodes, two steps with error feedback: the bits of decoding
    every rank's pairs in rank order (NumPy, rank by rank; the dense fallback of small vectors
    within rounding), identical on every rank; top-k's pairs (k of them, uint16 gap + float64
    value, after a 16-byte head) go to each other node once, and nothing else."""
    comm, counts = node_comm(monkeypatch, spec)
    p, r, N = WORLD.size, WORLD.rank, len(counts)
    with comm:
        for n in SIZES + [20_011]:
            comp, state = COMPRESSORS[name](**SETTINGS[name]), None
            for step in range(2):
                out, state = allreduce(comm, grad(r, n, step, np.float64), comp, state)
            what = f"{name} {spec} n={n}: {comp.last}"
            want = expected(name, p, n, 2, np.float64)
            if comp.last.shape == "sparse/node":
                np.testing.assert_array_equal(out, want, err_msg=what)
            else:  # the dense fallback, summed in another order
                gs = [grad(q, n, 1, np.float64) for q in range(p)]
                np.testing.assert_allclose(out, want, rtol=0, atol=np.max(rounding(gs, np.float64), initial=0) * 4,
                                           err_msg=what)
            assert_same_bits(out, what)
            assert comp.last.shape.endswith("/node"), what
            if name == "topk" and n == 20_011:
                assert comp.last.shape == "sparse/node", what
                k = round(SETTINGS[name]["ratio"] * n)
                assert comp.last.wire_bytes == (N - 1) * (16 + k * (2 + 8)), what


def with_silent_ranks(q, n, step, dtype):
    """Rank q's gradient, zero on every third rank (from rank 1): threshold selects nothing there."""
    return grad(q, n, step, dtype) * (q % 3 != 1)


@pytest.mark.parametrize("spec", ["one node", "one rank per node", "uneven"] + LAYOUTS)
@pytest.mark.parametrize("name", ["topk", "dgc", "threshold"])
def test_sparse_counts_differ_per_rank(monkeypatch, spec, name):
    """Counts that differ per rank (DGC's and threshold's; none at all where the gradient is
    zero) reach every rank with the pairs: the bits of NumPy decoding every rank's pairs in
    rank order, flat and node-aware, into a reused ``out`` decoded in blocks of 125 float64
    (the last one shorter)."""
    p, r = WORLD.size, WORLD.rank
    monkeypatch.setattr(compression, "BLOCK_BYTES", 1000)
    spec = {"one node": f"1x{p}", "one rank per node": f"{p}x1", "uneven": f"{max(p - 1, 1)},1"}.get(spec, spec)
    comm, counts = node_comm(monkeypatch, spec)
    settings = dict(SETTINGS, threshold=dict(threshold=20.0))
    with comm:
        for n in [0, 20_011]:
            comp, state, out = COMPRESSORS[name](**settings[name]), None, np.full(n, np.nan)
            for step in range(2):
                got, state = allreduce(comm, with_silent_ranks(r, n, step, np.float64), comp, state, out=out)
            what = f"{name} {spec} n={n}: {comp.last}"
            assert got is out and comp.last.shape.startswith("sparse") and "dense" not in comp.last.shape, what
            np.testing.assert_array_equal(out, expected(name, p, n, 2, np.float64, with_silent_ranks, settings),
                                          err_msg=what)
            assert_same_bits(out, what)


@pytest.mark.parametrize("flat", ["one node", "one rank per node",
                                  pytest.param("uneven", marks=pytest.mark.mpi(min_size=3))])
@pytest.mark.parametrize("name", ["none", "int8"])
def test_flat_shape_otherwise(monkeypatch, segmented, flat, name):
    """One node, nodes of one rank, and uneven nodes keep the flat shape and its bytes."""
    p = WORLD.size
    spec = {"one node": f"1x{p}", "one rank per node": f"{p}x1", "uneven": f"{p - 1},1"}[flat]
    comm, _ = node_comm(monkeypatch, spec)
    with comm:
        comp = COMPRESSORS[name](**SETTINGS.get(name, {}))
        gs = [grad(q, 4099, 0, np.float32) for q in range(p)]
        out, _ = allreduce(comm, gs[WORLD.rank], comp)
    assert comp.last.shape == comp.shape, comp.last
    assert comp.last.wire_bytes == reduce_scatter_bytes(comp, 4099, p, WORLD.rank, 4)
    if name == "int8":
        bound = error_bound(name, gs, comp) + rounding(gs, np.float32)
        assert np.all(np.abs(out - sum(g.astype(np.float64) for g in gs)) <= bound)
    if name == "none":
        assert np.all(np.abs(out - np.sum(gs, axis=0, dtype=np.float64)) <= rounding(gs, np.float32))
    assert_same_bits(out, f"{name} {spec}")


@pytest.mark.parametrize("spec", LAYOUTS)
def test_fp16_overflow_across_nodes(monkeypatch, spec):
    """A node sum beyond float16's range reaches every rank as inf: all redo the call exactly,
    and error feedback starts over."""
    comm, _ = node_comm(monkeypatch, spec)
    p, r = WORLD.size, WORLD.rank
    g = np.full(5, 1e5 if r == 0 else 1.0, np.float32)
    with comm, pytest.warns(RuntimeWarning, match="overflowed"):
        out, state = allreduce(comm, g, COMPRESSORS["fp16"](scale=1.0, error_feedback=True))
    np.testing.assert_array_equal(out, np.full(5, np.float32(1e5) + (p - 1), np.float32))
    assert not state.residual.any() and not state.server.any()
    assert_same_bits(out, f"fp16 overflow {spec}")


@pytest.mark.parametrize("spec", LAYOUTS)
def test_requantize_goes_node_aware_where_it_pays(monkeypatch, spec):
    """At the default NODE_RATIO (1/8), int8 (a quarter of float32's bytes) saves enough between
    nodes to go node-aware at every layout here, sign (1/32) does not; none always does."""
    comm, _ = node_comm(monkeypatch, spec, force=False)
    g = grad(WORLD.rank, 4099, 0, np.float32)
    with comm:
        for name, shape in [("int8", "requantize/node"), ("sign", "requantize"), ("none", "sum/node")]:
            comp = COMPRESSORS[name]()
            allreduce(comm, g, comp)
            assert comp.last.shape == shape, (name, spec, comp.last)


@pytest.mark.parametrize("spec", ["2x2", "2x4"])
def test_node_ratio_from_the_environment(monkeypatch, spec):
    """COLLECTIVES_NODE_RATIO moves the threshold: 0 sends sign node-aware too, 1e9 keeps int8
    flat; a value that is not a number >= 0 is refused by name."""
    g = grad(WORLD.rank, 4099, 0, np.float32)
    for ratio, name, shape in [("0", "sign", "requantize/node"), ("1e9", "int8", "requantize")]:
        monkeypatch.setenv("COLLECTIVES_NODE_RATIO", ratio)  # read when the Comm is made
        comm, _ = node_comm(monkeypatch, spec, force=False)
        with comm:
            comp = COMPRESSORS[name]()
            allreduce(comm, g, comp)
            assert comp.last.shape == shape, (ratio, name, spec, comp.last)
            assert compression.node_ratio(comm) == float(ratio)
    for bad in ("fast", "-1", "nan"):
        monkeypatch.setenv("COLLECTIVES_NODE_RATIO", bad)
        with pytest.raises(ValueError, match="COLLECTIVES_NODE_RATIO"):
            node_comm(monkeypatch, spec, force=False)


@pytest.mark.serial
@pytest.mark.parametrize("n,k,N,S,unit", [(0, 2, 2, 1, 64), (1, 2, 2, 1, 64), (4099, 2, 2, 3, 64),
                                          (10_007, 3, 2, 5, 64), (10_007, 2, 4, 7, 1), (100, 4, 2, 9, 8)])
def test_pieces_keep_shards_and_cells(n, k, N, S, unit):
    """Pieces tile the vector in order and cut every cell into S runs of whole units, the cells
    being the shards' lane chunks whatever S is: the error-feedback residuals keep their place."""
    o = compression.pieces(n, k, N, S, unit)
    shards = np.cumsum([0] + chunk_sizes(n, k, unit))
    for l in range(k):
        cells = shards[l] + np.cumsum([0] + chunk_sizes(int(shards[l + 1] - shards[l]), N, unit))
        np.testing.assert_array_equal(o[l, :, 0], cells[:-1])
        np.testing.assert_array_equal(o[l, :, -1], cells[1:])
    flat = o[:, :, :-1].reshape(-1, S).ravel()
    assert flat[0] == 0 and o[-1, -1, -1] == n
    ends = o[:, :, 1:].reshape(-1)
    np.testing.assert_array_equal(flat[1:], ends[:-1])
    assert np.all(np.diff(o, axis=2) >= 0)
    assert all(e % unit == 0 for e in ends if e != n)


@pytest.mark.serial
def test_segments_from_size(monkeypatch):
    """One segment per SEGMENT_BYTES of the vector, at most a cell's units, at least one."""
    monkeypatch.setattr(compression, "SEGMENT_BYTES", 1 << 20)
    assert compression.segments(4 << 20, 4, 512, 4) == 16
    assert compression.segments((4 << 20) + 1, 4, 512, 4) == 17
    assert compression.segments(4 << 20, 8, 512, 4) == 32
    assert compression.segments(4096, 4, 512, 4) == 1
    assert compression.segments(1000, 4, 512, 4) == 1
    assert compression.segments(0, 4, 512, 4) == 1
    monkeypatch.setattr(compression, "SEGMENT_BYTES", 256)
    assert compression.segments(4099, 4, 64, 4) == 16
    assert compression.segments(4099, 4, 64, 8) == 8


@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("name", ["none", "int8", "fp16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_segments(monkeypatch, spec, name, dtype):
    """Vectors of many segments (uneven last one; shorter than a bucket): the exact sum for
    none, within the bound for int8 and fp16, same bits everywhere, the lane bytes of one
    segment, and the same residual layout under error feedback."""
    comm, counts = node_comm(monkeypatch, spec)
    monkeypatch.setattr(compression, "SEGMENT_BYTES", 1024)
    p, r = WORLD.size, WORLD.rank
    with comm:
        for n in [33, 4099, 20_011]:
            comp = COMPRESSORS[name](**SETTINGS.get(name, {}), error_feedback=False)
            S = compression.segments(n, np.dtype(dtype).itemsize, comp.unit, p)
            assert (S > 1) == (n > 33), (n, S)
            gs = [grad(q, n, 0, dtype) for q in range(p)]
            out, _ = allreduce(comm, gs[r], comp)
            err = np.abs(out - sum(g.astype(np.float64) for g in gs))
            bound = rounding(gs, dtype) + (error_bound(name, gs, comp) if name != "none" else 0)
            what = f"{name} {spec} n={n} S={S}: worst excess {np.max(err - bound, initial=0)}"
            assert np.all(err <= bound), what
            assert comp.last.wire_bytes == lane_bytes(comp, n, counts, np.dtype(dtype).itemsize), what
            assert_same_bits(out, what)
