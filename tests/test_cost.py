"""Every algorithm's ``cost`` (alpha-beta-gamma) against the Cost line of its header."""
import importlib
import json
import math

import numpy as np
import pytest

from collectives.algorithms.allreduce_ring_segmented import SEGMENT
from collectives.algorithms.alltoall_scattered import WINDOW
from collectives.constants import SHM_CHUNK
from collectives.registry import ALGORITHMS, NODE_ALGORITHMS, SHM as SHARED
from collectives.schedule import ISEND, NONE, SENDRECV, Schedule, blocks

pytestmark = pytest.mark.serial

ALL = [a.name for table in (ALGORITHMS, NODE_ALGORITHMS, SHARED) for rows in table.values() for a in rows]
A, B, G = 1.7e-6, 1 / 9e9, 1 / 20e9


def _pof2(p):
    return 2 ** math.floor(math.log2(p))


# The header's formula as printed there, and the same formula transcribed by hand.
HEADERS = {
    "allreduce_ring": ("2 (p-1) alpha + 2 ((p-1)/p) n beta + ((p-1)/p) n gamma",
                       lambda p, n: 2 * (p - 1) * A + 2 * ((p - 1) / p) * n * B + ((p - 1) / p) * n * G),
    "allreduce_ring_segmented": (
        "(p-1) (ceil(n / (p m)) + 1) alpha + 2 ((p-1)/p) n beta + ((p-1)/p) n gamma, m = SEGMENT",
        lambda p, n: ((p - 1) * (math.ceil(n / (p * SEGMENT * 4)) + 1) * A + 2 * ((p - 1) / p) * n * B
                      + ((p - 1) / p) * n * G)),
    "allreduce_recursive_doubling": (
        "(lg pof2 + 2) alpha + (lg pof2 + 2) n beta + (lg pof2 + 1) n gamma",
        lambda p, n: (math.log2(_pof2(p)) + 2) * A + (math.log2(_pof2(p)) + 2) * n * B
        + (math.log2(_pof2(p)) + 1) * n * G),
    "bcast_binomial": ("ceil(lg p) (alpha + n beta)", lambda p, n: math.ceil(math.log2(p)) * (A + n * B)),
    "scan_recursive_doubling": ("ceil(lg p) (alpha + n beta) + (2 ceil(lg p) - 1) n gamma",
                                lambda p, n: math.ceil(math.log2(p)) * (A + n * B)
                                + (2 * math.ceil(math.log2(p)) - 1) * n * G),
    "exscan_recursive_doubling": ("ceil(lg p) (alpha + n beta) + 2 (ceil(lg p) - 1) n gamma",
                                  lambda p, n: math.ceil(math.log2(p)) * (A + n * B)
                                  + 2 * (math.ceil(math.log2(p)) - 1) * n * G),
    "barrier_dissemination": ("ceil(lg p) alpha", lambda p, n: math.ceil(math.log2(p)) * A),
    "alltoall_pairwise": ("(p-1) alpha + ((p-1)/p) n beta", lambda p, n: (p - 1) * A + (p - 1) / p * n * B),
    "alltoall_scattered": ("ceil((p-1)/w) alpha + ((p-1)/p) n beta, w = WINDOW",
                           lambda p, n: math.ceil((p - 1) / WINDOW) * A + (p - 1) / p * n * B),
    "alltoall_bruck": ("ceil(lg p) (alpha + (n/2) beta)", lambda p, n: math.ceil(math.log2(p)) * (A + n / 2 * B)),
    "neighbor_allgather_linear": ("alpha + n beta", lambda p, n: A + n * B),
    "neighbor_alltoall_linear": ("alpha + n beta", lambda p, n: A + n * B),
    "reduce_scatter_pairwise": ("(p-1) alpha + ((p-1)/p) n beta + ((p-1)/p) n gamma",
                                lambda p, n: (p - 1) * A + ((p - 1) / p) * n * B + ((p - 1) / p) * n * G),
    "gather_binomial": ("ceil(lg p) alpha + ((p-1)/p) n beta", lambda p, n: math.ceil(math.log2(p)) * A
                        + ((p - 1) / p) * n * B),
    "allreduce_shm_direct": ("alpha + 2 n beta + (p-1) n gamma", lambda p, n: A + 2 * n * B + (p - 1) * n * G),
    "allreduce_shm_pipelined": ("2 R alpha + 2 n beta + ((p-1)/p) n gamma, R = ceil(n / c)",
                                lambda p, n: 2 * math.ceil(n / SHM_CHUNK) * A + 2 * n * B + (p - 1) / p * n * G),
    "bcast_shm": ("R alpha + 2 n beta, R = ceil(n / c)", lambda p, n: math.ceil(n / SHM_CHUNK) * A + 2 * n * B),
}


def _module(name):
    return importlib.import_module(f"collectives.algorithms.{name}")


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_has_a_cost(name):
    mod = _module(name)
    assert callable(getattr(mod, "cost", None)), f"{name} has no cost(p, n, alpha, beta, gamma)"
    assert getattr(mod, "STEPS", None) in ("exchange", "one-way", "shared"), f"{name} has no STEPS"
    assert "Cost" in mod.__doc__
    for p in (2, 3, 8):
        small, large = mod.cost(p, 8, A, B, G), mod.cost(p, 1 << 24, A, B, G)
        assert 0 < small <= large and (small < large) == (not name.startswith("barrier")), (name, p)


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_cost_matches_the_header(name):
    text, formula = HEADERS[name]
    mod = _module(name)
    assert text in " ".join(mod.__doc__.split()), f"{name}'s header does not read {text!r}"
    # The recursive doubling line is its cost for p off a power of two; at a power of two the
    # fold's terms vanish (lg pof2 steps).
    ps = (3, 5, 6, 7) if name == "allreduce_recursive_doubling" else (2, 3, 4, 5, 8, 13)
    for p in ps:
        for n in (4, 1000, 1 << 20, (1 << 20) + 12):
            assert mod.cost(p, n, A, B, G) == pytest.approx(formula(p, n), rel=1e-12), (p, n)


# Each header's "Bytes sent per rank" line transcribed: (the busiest rank's bytes for p ranks
# and n bytes, whether that is exact or a bound); n is the whole vector, as in the Cost line.
def _lg(p):
    return math.ceil(math.log2(p))


def _every(f):
    return f, True


def _fold(f_pof2, f_else, exact=True):
    return (lambda p, n: f_pof2(p, n) if _pof2(p) == p else f_else(p, n)), exact


SENT = {
    "allgather_pairwise": _every(lambda p, n: (p - 1) / p * n),
    "allgather_ring": _every(lambda p, n: (p - 1) / p * n),
    "allgather_recursive_doubling": _fold(lambda p, n: (p - 1) / p * n,
                                          lambda p, n: (2 * (_pof2(p) - 1) / p + 1) * n, exact=False),
    "allreduce_all_to_all": _every(lambda p, n: (p - 1) * n),
    "allreduce_binomial": _every(lambda p, n: _lg(p) * n),
    "allreduce_rabenseifner": _fold(lambda p, n: 2 * (p - 1) / p * n,
                                    lambda p, n: (2 * (_pof2(p) - 1) / _pof2(p) + 1) * n),
    "allreduce_recursive_doubling": _fold(lambda p, n: math.log2(p) * n,
                                          lambda p, n: (math.log2(_pof2(p)) + 1) * n),
    "allreduce_reduce_bcast": _every(lambda p, n: (p - 1) * n),
    "allreduce_ring": _every(lambda p, n: 2 * (p - 1) / p * n),
    "allreduce_ring_segmented": _every(lambda p, n: 2 * (p - 1) / p * n),
    "allreduce_round_robin": _every(lambda p, n: 2 * (p - 1) / p * n),
    "barrier_dissemination": _every(lambda p, n: 0),
    "barrier_linear": _every(lambda p, n: 0),
    "bcast_binomial": _every(lambda p, n: _lg(p) * n),
    "bcast_scatter_allgather": _every(lambda p, n: 2 * (p - 1) / p * n),
    "gather_binomial": _fold(lambda p, n: n / 2, lambda p, n: n / 2, exact=False),
    "gather_linear": _every(lambda p, n: n / p),
    "reduce_binomial": _every(lambda p, n: n),
    "reduce_scatter_pairwise": _every(lambda p, n: (p - 1) / p * n),
    "reduce_scatter_ring": _every(lambda p, n: (p - 1) / p * n),
    "reduce_scatter_recursive_halving": _fold(lambda p, n: (p - 1) / p * n, lambda p, n: n),
    "scatter_binomial": _every(lambda p, n: (p - 1) / p * n),
    "scatter_linear": _every(lambda p, n: (p - 1) / p * n),
    "scan_recursive_doubling": _every(lambda p, n: _lg(p) * n),
    "exscan_recursive_doubling": _every(lambda p, n: _lg(p) * n),
    "alltoall_pairwise": _every(lambda p, n: (p - 1) / p * n),
    "alltoall_scattered": _every(lambda p, n: (p - 1) / p * n),
    "alltoall_bruck": _fold(lambda p, n: math.log2(p) * n / 2, lambda p, n: _lg(p) * n / 2, exact=False),
    # n less what a rank sends itself: with _builder_args' neighbours 0 and p - 1 every rank
    # but those two sends all of n from 3 ranks; at 2 each copies half of it to itself.
    "neighbor_allgather_linear": _every(lambda p, n: n if p > 2 else n / 2),
    "neighbor_alltoall_linear": _every(lambda p, n: n if p > 2 else n / 2),
}


def _builder_args(collective, n, p):
    """A builder's arguments for n elements of one byte in all (so counts are bytes), root 0."""
    counts, _ = blocks(n, p)
    return {"allreduce": (n,), "bcast": (n, 0), "reduce": (n, 0), "allgather": (counts,),
            "reduce_scatter": (counts,), "gather": (counts, 0), "scatter": (counts, 0), "barrier": (),
            "scan": (n, True), "exscan": (n, True), "alltoall": (_blocks(n // p, p),) * 2,
            # Two neighbours each way, half the bytes to each.
            "neighbor_allgather": (((0, 0, n // 2), (p - 1, 0, n // 2)),) * 2,
            "neighbor_alltoall": (((0, 0, n // 2), (p - 1, n // 2, n // 2)),) * 2}[collective]


def _blocks(each, p):
    """(offset, count) of p blocks of ``each`` elements in rank order."""
    return tuple((i * each, each) for i in range(p))


def _busiest_sender(name, collective, p, n):
    """The most bytes any rank's schedule sends (one-byte elements)."""
    most = 0
    for r in range(p):
        s = Schedule(r, p)
        getattr(_module(name), name)(s, *_builder_args(collective, n, p))
        steps = s.finish()
        sends = steps[np.isin(steps[:, 0], (SENDRECV, ISEND)) & (steps[:, 4] != NONE)]
        most = max(most, int(sends[:, 3].sum()))
    return most


def test_every_flat_algorithm_states_its_bytes_sent():
    flat = [a.name for rows in ALGORITHMS.values() for a in rows]
    assert sorted(flat) == sorted(SENT)
    for name in ALL:
        assert "Bytes sent per rank:" in _module(name).__doc__, name


@pytest.mark.parametrize("name", sorted(SENT))
def test_bytes_sent_match_the_header(name):
    """The schedule's busiest rank sends what the header says (at most that, for a bound), for
    every p from 2 to 16 and a vector that splits evenly into any of them."""
    formula, exact = SENT[name]
    collective = next(c for c, rows in ALGORITHMS.items() if name in [a.name for a in rows])
    n = 720720  # divisible by 1..16
    for p in range(2, 17):
        sent, stated = _busiest_sender(name, collective, p, n), formula(p, n)
        if exact:
            assert sent == pytest.approx(stated), (p, sent / n)
        else:
            assert sent <= stated * (1 + 1e-12), (p, sent / n)
    if not exact:  # a bound that is reached at the powers of two
        assert all(_busiest_sender(name, collective, p, n) == pytest.approx(formula(p, n)) for p in (2, 4, 8, 16))


def test_model_fits_alpha_and_beta_per_size_from_a_ping_pong():
    from bench import model

    # p50 = 3 us + n x 1/(10 GB/s) up to 1 MiB, twice that per byte at 64 MiB (out of cache).
    rows = [{"algorithm": "native", "size": n, "p50(us)": (3e-6 + n * per) * 1e6, "min(us)": (2e-6 + n * per) * 1e6}
            for n, per in ((8, 1e-10), (4096, 1e-10), (1 << 20, 1e-10), (1 << 26, 2e-10))]
    rows.append({"algorithm": "ours", "size": 8, "p50(us)": 0.1, "min(us)": 0.1})  # only native rows count
    assert model.fit_alpha(rows) == pytest.approx(2e-6 + 8e-10)  # the fastest sample
    alpha, table = model.fit_beta(rows)  # the median call
    assert alpha == pytest.approx(3e-6 + 8e-10)
    assert [n for n, _ in table] == [4096, 1 << 20, 1 << 26]
    assert table[1][1] == pytest.approx(1e-10 - 8e-10 / (1 << 20))
    assert table[2][1] == pytest.approx(2e-10 - 8e-10 / (1 << 26))
    with pytest.raises(SystemExit, match="no size of 64 KiB or more slower"):
        model.fit_beta([dict(row, **{"p50(us)": 5.0}) for row in rows])
    # The projection's choice at a point is the least cost over the collective's algorithms.
    (n, best, us), = model.project("allreduce", 1024, 1.5e-6, 8 / 100e9, 1 / 40e9, [1 << 26])
    costs = {a.name: _module(a.name).cost(1024, 1 << 26, 1.5e-6, 8 / 100e9, 1 / 40e9) for a in ALGORITHMS["allreduce"]}
    assert best == min(costs, key=costs.get) and us == pytest.approx(costs[best] * 1e6)


def test_per_byte_is_linear_in_lg_n_between_sizes():
    from bench.model import per_byte

    table = [(1024, 1.0), (4096, 3.0), (16384, 3.0)]
    assert per_byte(table, 2048) == pytest.approx(2.0)  # half way in lg n
    assert per_byte(table, 1024) == 1.0 and per_byte(table, 4096) == 3.0
    assert per_byte(table, 8) == 1.0 and per_byte(table, 1 << 30) == 3.0  # the end values beyond
    with pytest.raises(ValueError, match="empty"):
        per_byte([], 8)


# A fit of the shared-memory model: at np=3 alpha 1 us, beta 0.1 ns/B at 4 KiB and 0.3 ns/B
# from 64 KiB; beyond the eager cell alpha 5 us, beta 0.2 ns/B at 16 KiB and 0.4 ns/B from
# 256 KiB; gamma 0.01 ns/B at 4 KiB and 0.03 ns/B from 64 KiB, the kernel 1.5x slower shared by
# 3 processes.  Every rank's exchange with its neighbours at once took 21 us at 8 KiB (left out:
# below 4 KiB), 5 us + 0.6 ns/B at 64 KiB and 5 us + 0.8 ns/B at 1 MiB.
XCHG = [[8, 21e-6], [65536, 5e-6 + 65536 * 6e-10], [1 << 20, 5e-6 + (1 << 20) * 8e-10]]
SHM = {"ping_pong": [[3, 1e-6, [[4096, 1e-10], [65536, 3e-10]]]],
       "pipeline": [[3, 5e-6, [[16384, 2e-10], [262144, 4e-10]]]], "exchange": [[3, XCHG]],
       "gamma_by_size": [[4096, 1e-11], [65536, 3e-11]], "share_by_ranks": [[1, 1.0], [2, 1.0], [3, 1.5]]}


def test_shm_params_by_hand():
    from bench.model import EAGER, shm_params

    # 16 KiB is half way from 4 KiB to 64 KiB in lg n; at np=3 its messages (a third) are eager.
    alpha, beta, gamma = shm_params(SHM, 3, 16384)
    assert (alpha, beta, gamma) == pytest.approx((1e-6, 2e-10, 2e-11 * 1.5))
    # From 3 x (EAGER + 1) bytes a third is beyond the eager cell: the pipeline's alpha and beta
    # (64 KiB is half way from 16 KiB to 256 KiB in lg n).
    assert shm_params(SHM, 3, 3 * EAGER + 2)[0] == 1e-6 and shm_params(SHM, 3, 3 * (EAGER + 1))[0] == 5e-6
    assert shm_params(SHM, 3, 65536) == pytest.approx((5e-6, 3e-10, 3e-11 * 1.5))
    assert shm_params(SHM, 3, 1 << 26) == pytest.approx((5e-6, 4e-10, 3e-11 * 1.5))
    with pytest.raises(SystemExit, match="no ping-pong or kernel sharing at np=4"):
        shm_params(SHM, 4, 16384)
    # An exchange algorithm: beta so that one step of n bytes costs the exchange's p50 there,
    # with the alpha in use (the pipeline's here), linear in lg n between the exchange's sizes.
    assert shm_params(SHM, 3, 65536, "exchange") == pytest.approx((5e-6, 6e-10, 3e-11 * 1.5))
    assert shm_params(SHM, 3, 1 << 20, "exchange")[1] == pytest.approx(8e-10)
    assert shm_params(SHM, 3, 1 << 18, "exchange")[1] == pytest.approx(7e-10)
    # With the eager alpha (1 us) at 16 KiB: the table's 64 KiB point is (5 us - 1 us) / 64 KiB + 0.6 ns/B.
    assert shm_params(SHM, 3, 16384, "exchange")[1] == pytest.approx(4e-6 / 65536 + 6e-10)
    with pytest.raises(SystemExit, match="no exchange at np=4"):
        shm_params(dict(SHM, ping_pong=SHM["ping_pong"] + [[4, 1e-6, [[4096, 1e-10]]]],
                        pipeline=SHM["pipeline"] + [[4, 5e-6, [[16384, 2e-10]]]],
                        share_by_ranks=SHM["share_by_ranks"] + [[4, 2.0]]), 4, 65536, "exchange")
    for key in ("share_by_ranks", "pipeline", "exchange"):
        with pytest.raises(SystemExit, match=f"lack {key}"):
            shm_params({k: v for k, v in SHM.items() if k != key}, 3, 16384)


def test_shm_params_of_the_shared_segment_by_hand():
    from bench.model import predicted, shm_params

    # A copy at 0.05 ns/B at 4 KiB and 0.2 ns/B from 64 KiB; one phase 0.4 us at np=3.
    shared = dict(SHM, copy_by_size=[[4096, 5e-11], [65536, 2e-10]], phase=[[3, 4e-7]])
    # 16 KiB is half way from 4 KiB to 64 KiB in lg n; the 3 ranks copy and combine at once (1.5x).
    assert shm_params(shared, 3, 16384, "shared") == pytest.approx((4e-7, 1.25e-10 * 1.5, 2e-11 * 1.5))
    # The pipelined all-reduce of 1 MiB: 4 rounds of 256 KiB, two phases each, 2 n copied at
    # 0.3 ns/B, two thirds of n combined at 0.045 ns/B.
    n = 1 << 20
    assert predicted("allreduce_shm_pipelined", 3, n, shared) == pytest.approx(
        8 * 4e-7 + 2 * n * 3e-10 + 2 / 3 * n * 4.5e-11)
    with pytest.raises(SystemExit, match="lack copy_by_size, phase"):
        shm_params(SHM, 3, 16384, "shared")
    with pytest.raises(SystemExit, match="no phase or kernel sharing at np=4"):
        shm_params(shared, 4, 16384, "shared")


def test_fit_phase_takes_barrier_shm():
    from bench.model import fit_phase

    rows = [{"algorithm": "native", "p50(us)": 2.0}, {"algorithm": "barrier_shm", "p50(us)": 0.5}]
    assert fit_phase(rows) == pytest.approx(5e-7)
    with pytest.raises(SystemExit, match="no barrier_shm row"):
        fit_phase(rows[:1])


def test_model_fits_the_pipelined_alpha_from_the_ping_pong_beyond_the_eager_cell():
    from bench import model

    # One-way p50 = 2 us eager; from 16 KiB 7 us + n x 0.1 ns/B, and 64 MiB at twice the rate.
    def p50(n):
        return 2e-6 if n <= 4096 else 7e-6 + n * (1e-10 if n <= (1 << 20) else 2e-10)

    rows = [{"algorithm": "native", "size": n, "p50(us)": p50(n) * 1e6}
            for n in (8, 4096, 16384, 65536, 262144, 1 << 20, 1 << 26)]
    start, table = model.fit_pipeline(rows, 2e-6)
    assert start == pytest.approx(7e-6)  # the line through 16, 64 and 256 KiB
    assert [n for n, _ in table] == [16384, 65536, 262144, 1 << 20, 1 << 26]
    # One message of n bytes still costs its ping-pong time.
    for n, per in table:
        assert start + n * per == pytest.approx(p50(n))
    # The eager alpha is the floor, and the line needs two sizes.
    assert model.fit_pipeline(rows, 9e-6)[0] == 9e-6
    with pytest.raises(SystemExit, match="fewer than two sizes"):
        model.fit_pipeline([r for r in rows if r["size"] != 65536 and r["size"] != 262144], 2e-6)


def test_compare_adds_the_fixed_cost_at_4_kib():
    from bench.model import compare

    def ring(n, alpha, beta, gamma):  # allreduce_ring's header at p = 3
        return 4 * alpha + 2 * (2 / 3) * n * beta + (2 / 3) * n * gamma

    def row(size, us, algorithm="allreduce_ring", place="out"):
        return {"size": size, "algorithm": algorithm, "place": place, "p50(us)": us, "min(us)": us / 2}

    # float32 split over 3 ranks: 64 KiB rounds down to 16383 elements, 65532 B.  The fixed cost
    # comes from the largest size up to 4 KiB (4092 B), not from 12 B.
    result = {"collective": "allreduce", "np": 3, "rows": [
        row(12, 5.0), row(4092, 20.0), row(4092, 1.0, "native"), row(16380, 30.0), row(65532, 90.0), row(65532, 80.0, place="in"),
        row(65532, 70.0, "native"), row(65532, 60.0, "allreduce_rabenseifner")]}
    # At 4 KiB the messages are eager (alpha 1 us); at 64 KiB they go by the pipeline (5 us).
    # The ring exchanges (STEPS): its beta is the exchange's, whose first size from 4 KiB is
    # 64 KiB; 4092 and 65532 B both take that end value, with the alpha each is charged.
    fixed = 20e-6 - ring(4092, 1e-6, (5e-6 + 65536 * 6e-10 - 1e-6) / 65536, _shm_at(4092)[1])
    expected = (ring(65532, 5e-6, 6e-10, _pipe_at(65532)[1]) + fixed) * 1e6
    # Only the ring's out-of-place 64 KiB cell: native is no algorithm, Rabenseifner has no 4 KiB cell.
    (cell,) = compare([result], SHM)
    assert cell[:6] == ("allreduce", 3, 65532, "allreduce_ring", 90.0, 45.0)
    assert cell[6:] == pytest.approx((expected, fixed * 1e6, expected / 90 - 1, expected / 45 - 1))


def test_agreement_of_launches_by_hand(tmp_path):
    from bench.model import agreement, results_from

    def launch(ring, binomial, gather=50.0):
        def row(size, us, algorithm, place="out"):
            return {"size": size, "algorithm": algorithm, "place": place, "p50(us)": us}
        return [{"collective": "allreduce", "np": 3, "rows": [
                    row(65532, ring, "allreduce_ring"), row(65532, binomial, "allreduce_binomial"),
                    row(65532, 1.0, "native"), row(65532, 1.0, "auto"), row(65532, 9.0, "allreduce_ring", "in"),
                    row(4092, 1.0, "allreduce_ring")]},
                {"collective": "gather", "np": 2, "rows": [row(1 << 20, gather, "gather_linear")]}]

    # A repeat mode's file holds each launch's records.
    path = tmp_path / "launches_np3_x3.json"
    path.write_text(json.dumps({"runs": [launch(100.0, 100.0), launch(120.0, 200.0), launch(130.0, 100.0)]}))
    # The ring's 64 KiB cell: 100, 120, 130 pairwise, 100/120 -17%, 120/100 +20%, 100/130 -23%,
    # 130/100 +30% (out), 120/130 -8%, 130/120 +8%: 5 of 6.  The binomial's: 100 against 200 (-50%,
    # +100%) out four times, 100 against 100 twice in: 2 of 6.  Native, auto, in place and 4 KiB
    # are no cells.  The gather at np=2: 3 launches of 50 us, 6 of 6.
    assert agreement(results_from([str(path)])) == [(2, 6, 6), (3, 7, 12)]
    # One launch has no pair.
    assert agreement(launch(100.0, 100.0)) == []


def _pipe_at(n):
    """SHM's pipelined beta and gamma at n bytes, by hand (beta linear in lg n from 16 KiB to 256 KiB)."""
    w = min(max(math.log2(n / 16384) / 4, 0), 1)
    return 2e-10 + w * 2e-10, _shm_at(n)[1]


def _shm_at(n):
    """SHM's beta and gamma at n bytes, by hand (linear in lg n from 4 KiB to 64 KiB, flat beyond)."""
    w = min(max(math.log2(n / 4096) / 4, 0), 1)
    return 1e-10 + w * 2e-10, (1e-11 + w * 2e-11) * 1.5


def test_ranks_of():
    from bench.model import ranks_of

    assert ranks_of("2:4") == (2, 3, 4)
    for bad in ("1:4", "4:2", "8"):
        with pytest.raises(SystemExit, match="--ranks"):
            ranks_of(bad)


# The testbed model (bench/simulate.py): schedules walked over a node map, against hand-computed
# times.  Intra-node (a, b) and inter-node (IA, IB) differ, so a wrong link type shows.
a, b, IA, IB = 20e-6, 0.1e-9, 40e-6, 8e-9


def _links(gamma=G, burst=0, fast=0.0):
    from bench.simulate import Links

    return Links((a, b), (IA, IB), gamma, burst, fast)


def test_ring_on_two_nodes_of_two_by_hand():
    from bench.simulate import predict

    n = 1 << 20
    # 0 -> 1 and 2 -> 3 stay on a node, 1 -> 2 and 3 -> 0 cross a link each way, one message
    # per link per step: 6 steps of n/4 on the wire, the first 3 combining n/4.
    assert predict("allreduce_ring", 2, 2, n, _links()) == pytest.approx(6 * (IA + n / 4 * IB) + 3 * n / 4 * G)


def test_recursive_doubling_on_two_nodes_of_two_shares_the_link():
    from bench.simulate import predict

    n = 1 << 20
    # Distance 1 stays on the node; at distance 2 both ranks of a node cross its link at once,
    # and the ranks whose result ends in scratch copy it to ACC.
    expected = (a + n * b + n * G) + (IA + 2 * n * IB + 2 * n * G)
    assert predict("allreduce_recursive_doubling", 2, 2, n, _links()) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["allreduce_ring", "allreduce_recursive_doubling", "allreduce_rabenseifner"])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_one_rank_per_node_is_the_header_cost(name, p):
    from bench.simulate import predict

    n = 3 << 20  # divisible by every block count here
    # The header leaves out recursive doubling's final copy out of scratch (one more pass).
    copy = n * G if name == "allreduce_recursive_doubling" else 0
    assert predict(name, p, 1, n, _links()) == pytest.approx(_module(name).cost(p, n, IA, IB, G) + copy)


@pytest.mark.parametrize("name", ["allreduce_hierarchical", "allreduce_node_leader"])
def test_node_aware_lanes_share_the_link(name):
    from bench.simulate import Links, predict

    n = 1 << 22
    # Free shared memory and start-ups: only the bytes each node's link carries remain, n
    # either way (hierarchical's two lanes carry n/2 each at once; the one leader carries n).
    links = Links((0.0, 0.0), (0.0, IB), 0.0)
    assert predict(name, 2, 2, n, links) == pytest.approx(n * IB)
    with pytest.raises(ValueError, match="several nodes of several ranks"):
        predict(name, 4, 1, n, links)


def test_token_bucket_by_hand():
    from bench.simulate import walk

    burst, fast, n = 256 << 10, 1e-9, 1 << 20
    two = {0: [[[(1, n)], [(1, n)], 0]] * 2, 1: [[[(0, n)], [(0, n)], 0]] * 2}
    # First exchange: the burst goes at once, the rest at the rate: IA + (n - burst) IB; the
    # bucket then holds what the rate refilled in IA alone, so the second pays n IB - IA.
    expected = IA + (n - burst) * IB + n * IB
    assert walk(two, [0, 1], _links(0.0, burst, fast)) == pytest.approx(expected)
    small = {0: [[[(1, 4096)], [(1, 4096)], 0]], 1: [[[(0, 4096)], [(0, 4096)], 0]]}
    assert walk(small, [0, 1], _links(0.0, burst, fast)) == pytest.approx(IA + 4096 * fast)


def test_token_bucket_is_per_message_within_the_burst():
    from bench.simulate import walk

    burst, fast, n = 256 << 10, 1e-9, 64 << 10
    # Two pairs across one link (ranks 0, 1 on node 0; 2, 3 on node 1): within the bucket each
    # message pays its own bytes at the fast rate, in parallel, not the link's 2 n.
    pairs = {0: [[[(2, n)], [(2, n)], 0]], 2: [[[(0, n)], [(0, n)], 0]],
             1: [[[(3, n)], [(3, n)], 0]], 3: [[[(1, n)], [(1, n)], 0]]}
    node_of = [0, 0, 1, 1]
    assert walk(pairs, node_of, _links(0.0, burst, fast)) == pytest.approx(IA + n * fast)
    # Beyond the bucket the link's bytes queue: 2 n less the burst at the link rate.
    big = 1 << 20
    pairs = {r: [[[(q, big)], [(q, big)], 0]] for r, q in ((0, 2), (2, 0), (1, 3), (3, 1))}
    assert walk(pairs, node_of, _links(0.0, burst, fast)) == pytest.approx(IA + (2 * big - burst) * IB)


def test_shared_memory_pipeline_by_hand():
    from bench.simulate import Links, allreduce_rounds, walk

    first, later, eager = 50e-6, 10e-6, 8064
    links = Links((a, b), (IA, IB), 0.0, step=(first, later), eager=eager)
    for n, extra in ((eager, 0.0), (eager + 64, first + later)):
        # Two exchanges in shared memory, back to back: the pipeline's start-up, beyond the
        # eager cell only, is the first level's in the first and the later one's in the second.
        two = {0: [[[(1, n)], [(1, n)], 0]] * 2, 1: [[[(0, n)], [(0, n)], 0]] * 2}
        assert walk(two, [0, 0], links) == pytest.approx(2 * (a + n * b) + extra)
    # Between nodes no such term: recursive doubling on 2 x 2 pays it once, on its first level
    # (within a node); the second crosses the link.
    n = 1 << 20
    expected = (a + first + n * b) + (IA + 2 * n * IB)
    rounds = allreduce_rounds("allreduce_recursive_doubling", 2, 2, n // 4)
    assert walk(rounds, [0, 0, 1, 1], links) == pytest.approx(expected)


def test_fixed_cost_by_hand():
    from bench.simulate import fixed_cost, predict

    small, n, measured = 4096, 1 << 20, 1e-3
    # The ring on 2 x 2 (test_ring_on_two_nodes_of_two_by_hand): 6 steps of a quarter each.
    ring = lambda size: 6 * (IA + size / 4 * IB) + 3 * size / 4 * G  # noqa: E731
    fixed = fixed_cost("allreduce_ring", 2, 2, small, measured, _links())
    assert fixed == pytest.approx(measured - ring(small))
    assert predict("allreduce_ring", 2, 2, n, _links(), fixed=fixed) == pytest.approx(ring(n) + measured - ring(small))


def test_unmatched_schedules_are_refused():
    from bench.simulate import walk

    with pytest.raises(ValueError, match="do not match"):
        walk({0: [[[(1, 8)], [], 0]], 1: [[[], [], 0]]}, [0, 1], _links())
    cycle = {0: [[[], [(1, 8)], 0], [[(1, 8)], [], 0]], 1: [[[], [(0, 8)], 0], [[(0, 8)], [], 0]]}
    with pytest.raises(ValueError, match="wait cycle"):
        walk(cycle, [0, 1], _links())


# The node-aware all-reduces' rounds, written out by hand at 2 nodes x 2 ranks (rank = node x 2 +
# local index), float32.  r ^ 1 is the other rank of r's node, r ^ 2 its lane peer.  Each phase
# runs the auto choice on its 2-rank communicator; the table is fixed here (not the measured
# one, which a re-tune may change): reduce-scatter by the ring up to 16 B and recursive halving
# above, all-reduce by recursive doubling, all-gather pairwise, reduce and bcast binomial.
HAND_TABLE = {
    "reduce_scatter": [{"ranks": [1, None], "bytes": [0, 16], "algorithm": "reduce_scatter_ring"},
                       {"ranks": [1, None], "bytes": [17, None], "algorithm": "reduce_scatter_recursive_halving"}],
    "allreduce": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "allreduce_recursive_doubling"}],
    "allgather": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "allgather_pairwise"}],
    "reduce": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "reduce_binomial"}],
    "bcast": [{"ranks": [1, None], "bytes": [0, None], "algorithm": "bcast_binomial"}],
}


@pytest.fixture
def hand_table(tmp_path, monkeypatch):
    import json

    from collectives import tuning

    path = tmp_path / "hand.json"
    path.write_text(json.dumps({"format": tuning.FORMAT, "metadata": {"by": "hand"}, "collectives": HAND_TABLE}))
    monkeypatch.setenv("COLLECTIVES_TUNING", str(path))


def test_hierarchical_rounds_by_hand(hand_table):
    from bench.simulate import allreduce_rounds

    # count 10: blocks of 5 elements (20 B).  Reduce-scatter in the node (recursive halving):
    # swap the other's block and combine it; the lane all-reduce of the block (recursive
    # doubling): swap and combine, the higher rank into scratch and copied back (40 B); the
    # all-gather in the node (pairwise): swap the blocks.
    assert allreduce_rounds("allreduce_hierarchical", 2, 2, 10) == {
        r: [[[(r ^ 1, 20)], [(r ^ 1, 20)], 20],
            [[(r ^ 2, 20)], [(r ^ 2, 20)], 20 if r < 2 else 40],
            [[(r ^ 1, 20)], [(r ^ 1, 20)], 0]] for r in range(4)}
    # count 1, fewer elements than ranks per node: blocks of 1 and 0.  Local rank 1 sends the
    # element to local rank 0 and receives nothing; lane 1 all-reduces an empty block (the
    # model plans it, 0 bytes); the all-gather sends the element back.
    assert allreduce_rounds("allreduce_hierarchical", 2, 2, 1) == {
        0: [[[], [(1, 4)], 4], [[(2, 4)], [(2, 4)], 4], [[(1, 4)], [(1, 0)], 0]],
        1: [[[(0, 4)], [], 0], [[(3, 0)], [(3, 0)], 0], [[(0, 0)], [(0, 4)], 0]],
        2: [[[], [(3, 4)], 4], [[(0, 4)], [(0, 4)], 8], [[(3, 4)], [(3, 0)], 0]],
        3: [[[(2, 4)], [], 0], [[(1, 0)], [(1, 0)], 0], [[(2, 0)], [(2, 4)], 0]]}


def test_node_leader_rounds_by_hand(hand_table):
    from bench.simulate import allreduce_rounds

    # count 10 (40 B): local rank 1 sends its vector to the leader, which combines it (binomial
    # reduce); the leaders 0 and 2 swap and combine (recursive doubling, 2 copies back too);
    # the leader sends the result to local rank 1 (binomial broadcast).
    leader = {r: [[[], [(r + 1, 40)], 40], [[(r ^ 2, 40)], [(r ^ 2, 40)], 40 if r < 2 else 80],
                  [[(r + 1, 40)], [], 0]] for r in (0, 2)}
    other = {r: [[[(r - 1, 40)], [], 0], [[], [(r - 1, 40)], 0]] for r in (1, 3)}
    assert allreduce_rounds("allreduce_node_leader", 2, 2, 10) == {**leader, **other}


@pytest.mark.parametrize("name", ["allreduce_hierarchical", "allreduce_node_leader"])
@pytest.mark.parametrize("nodes, k", [(4, 1), (1, 4), (2, 1)])
def test_node_aware_rounds_need_several_nodes_of_several_ranks(name, nodes, k):
    from bench.simulate import allreduce_rounds

    with pytest.raises(ValueError, match="several nodes of several ranks"):
        allreduce_rounds(name, nodes, k, 10)
