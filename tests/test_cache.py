"""Byte-bounded caches (collectives.cache) and the schedule cache built on one (registry.plan)."""
import gc
import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from collectives import cache, registry
from collectives.cache import ByteLRU
from collectives.schedule import Schedule


@pytest.mark.serial
def test_least_recently_used_goes_first():
    c = ByteLRU(100)
    for k in "abc":
        c.put(k, k.upper(), 30)
    assert c.get("a") == "A"  # a is now the most recent: b goes first
    c.put("d", "D", 30)
    assert "b" not in c and [k in c for k in "acd"] == [True] * 3
    assert c.nbytes == 90 and c.evictions == 1
    c.put("a", "A2", 60)  # replacing an entry re-counts its bytes
    assert c.nbytes <= 100 and c.get("a") == "A2" and "c" not in c
    assert c.put("huge", 1, 101) == 1 and "huge" not in c  # larger than the bound: not kept
    assert c.get("nope", 7) == 7
    c.clear()
    assert len(c) == 0 and c.nbytes == 0


@pytest.mark.serial
def test_total_bytes_sums_every_cache():
    before = cache.total_bytes()
    a, b = ByteLRU(1000), ByteLRU(1000)
    a.put(1, None, 100)
    b.put(1, None, 250)
    assert cache.total_bytes() - before == 350
    del a
    gc.collect()
    assert cache.total_bytes() - before == 250


@pytest.mark.serial
def test_bound_from_the_environment(monkeypatch):
    monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", "4096")
    assert ByteLRU().max_bytes == 4096
    monkeypatch.delenv("COLLECTIVES_CACHE_BYTES")
    assert ByteLRU().max_bytes == 32 << 20
    for bad in ("lots", "-1", "1.5"):
        monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", bad)
        with pytest.raises(ValueError, match="COLLECTIVES_CACHE_BYTES"):
            ByteLRU()


@pytest.mark.serial
def test_thousand_sizes_stay_under_the_bound(monkeypatch):
    """1,000 distinct sizes under the segmented ring (about 9 KiB of steps each at 1 Mi elements,
    9 MiB unbounded; 64 MiB messages hold 0.14 MiB, scaled down here to keep the test short):
    the schedule cache keeps under its bound, and the memory tracemalloc sees it hold agrees
    with its accounting."""
    plans = ByteLRU(2 << 20)
    monkeypatch.setattr(registry, "_PLANS", plans)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        largest = 0
        for i in range(1000):
            steps = registry.plan("allreduce_ring_segmented", 0, 4, (1 << 20) + 97 * i)[0]
            largest = max(largest, steps.nbytes)
            assert plans.nbytes <= plans.max_bytes
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert 1000 * largest > 4 * plans.max_bytes  # unbounded, the plans would not fit
    assert plans.evictions > 500 and plans.nbytes > 0.9 * plans.max_bytes
    assert abs(held - plans.nbytes) < 0.05 * plans.nbytes, (held, plans.nbytes)
    assert cache.total_bytes() >= plans.nbytes


def test_evicted_plan_is_rebuilt(comm, monkeypatch):
    """A plan pushed out by others is built again, equal to a fresh build, and the all-reduce
    it runs still matches native MPI."""
    plans = ByteLRU(64 << 10)
    monkeypatch.setattr(registry, "_PLANS", plans)
    name, n = "allreduce_ring", 5000
    first = registry.plan(name, comm.rank, comm.size, n)[0]
    for other in range(1, 400):
        registry.plan(name, comm.rank, comm.size, n + other)
    assert (name, comm.rank, comm.size, n) not in plans
    again = registry.plan(name, comm.rank, comm.size, n)[0]
    fresh = Schedule(comm.rank, comm.size)
    registry._BY_NAME[name].build(fresh, n)
    np.testing.assert_array_equal(again, fresh.finish())
    np.testing.assert_array_equal(again, first)
    x = np.random.default_rng(comm.rank).standard_normal(n)
    mine, native = np.empty_like(x), np.empty_like(x)
    comm.Allreduce(x, mine, algorithm=name)
    comm.comm.Allreduce(x, native, op=MPI.SUM)
    np.testing.assert_allclose(mine, native, rtol=1e-12, atol=1e-12)
