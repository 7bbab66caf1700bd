"""Every algorithm's ``cost`` (alpha-beta-gamma) against the Cost line of its header."""
import importlib
import math

import pytest

from collectives.algorithms.allreduce_ring_segmented import SEGMENT
from collectives.registry import ALGORITHMS, NODE_ALGORITHMS

ALL = [a.name for table in (ALGORITHMS, NODE_ALGORITHMS) for rows in table.values() for a in rows]
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
    "barrier_dissemination": ("ceil(lg p) alpha", lambda p, n: math.ceil(math.log2(p)) * A),
    "reduce_scatter_pairwise": ("(p-1) alpha + ((p-1)/p) n beta + ((p-1)/p) n gamma",
                                lambda p, n: (p - 1) * A + ((p - 1) / p) * n * B + ((p - 1) / p) * n * G),
    "gather_binomial": ("ceil(lg p) alpha + ((p-1)/p) n beta", lambda p, n: math.ceil(math.log2(p)) * A
                        + ((p - 1) / p) * n * B),
}


def _module(name):
    return importlib.import_module(f"collectives.algorithms.{name}")


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_has_a_cost(name):
    mod = _module(name)
    assert callable(getattr(mod, "cost", None)), f"{name} has no cost(p, n, alpha, beta, gamma)"
    assert "Cost" in mod.__doc__
    for p in (2, 3, 8):
        small, large = mod.cost(p, 8, A, B, G), mod.cost(p, 1 << 24, A, B, G)
        assert 0 < small <= large and (small < large) == (not name.startswith("barrier")), (name, p)


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_cost_matches_the_header(name):
    text, formula = HEADERS[name]
    mod = _module(name)
    assert text in " ".join(mod.__doc__.split()), f"{name}'s header no longer reads {text!r}"
    # The recursive doubling line is its cost for p off a power of two; at a power of two the
    # fold's terms vanish (lg pof2 steps).
    ps = (3, 5, 6, 7) if name == "allreduce_recursive_doubling" else (2, 3, 4, 5, 8, 13)
    for p in ps:
        for n in (4, 1000, 1 << 20, (1 << 20) + 12):
            assert mod.cost(p, n, A, B, G) == pytest.approx(formula(p, n), rel=1e-12), (p, n)


def test_model_fits_alpha_and_beta_from_a_ping_pong():
    from bench import model

    rows = [{"algorithm": "native", "size": n, "min(us)": (2e-6 + n / 10e9) * 1e6} for n in (8, 1 << 16, 1 << 20)]
    rows.append({"algorithm": "ours", "size": 8, "min(us)": 0.1})  # only native rows count
    alpha, beta = model.fit_alpha_beta(rows)
    assert alpha == pytest.approx(2e-6 + 8 / 10e9) and beta == pytest.approx(1 / 10e9, rel=1e-3)
    with pytest.raises(SystemExit, match="no size of 64 KiB or more slower"):
        model.fit_alpha_beta([dict(row, **{"min(us)": 5.0}) for row in rows])
    # The projection's choice at a point is the least cost over the collective's algorithms.
    (n, best, us), = model.project("allreduce", 1024, 1.5e-6, 8 / 100e9, 1 / 40e9, [1 << 26])
    costs = {a.name: _module(a.name).cost(1024, 1 << 26, 1.5e-6, 8 / 100e9, 1 / 40e9) for a in ALGORITHMS["allreduce"]}
    assert best == min(costs, key=costs.get) and us == pytest.approx(costs[best] * 1e6)
