"""Byte-bounded caches (collectives.cache) and a Comm's plan cache built on one."""
import gc
import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import cache, registry
from collectives.cache import ByteLRU


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
    gc.collect()  # caches of Comms already freed go now, not between the sums below
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
    """A Comm's plans are held to COLLECTIVES_CACHE_BYTES, read when it is made."""
    monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", "4096")
    with collectives.Comm(MPI.COMM_SELF) as c:
        assert c._engine.plans.max_bytes == 4096
    monkeypatch.delenv("COLLECTIVES_CACHE_BYTES")
    with collectives.Comm(MPI.COMM_SELF) as c:
        assert c._engine.plans.max_bytes == 32 << 20
    for bad in ("lots", "-1", "1.5"):
        monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", bad)
        with pytest.raises(ValueError, match="COLLECTIVES_CACHE_BYTES"):
            collectives.Comm(MPI.COMM_SELF)


@pytest.mark.serial
def test_thousand_sizes_stay_under_the_bound():
    """1,000 distinct sizes under the segmented ring (about 9 KiB of steps each at 1 Mi elements,
    9 MiB unbounded; 64 MiB messages hold 0.14 MiB, scaled down here to keep the test short),
    kept as the engine keeps a plan (its steps and registry.PLAN_OVERHEAD): the cache keeps
    under its bound, and the memory tracemalloc sees it hold agrees with its accounting."""
    plans = ByteLRU(2 << 20)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        largest = 0
        for i in range(1000):
            n = (1 << 20) + 97 * i
            steps = registry.schedule("allreduce_ring_segmented", 0, 4, n)[0]
            plans.put(("allreduce_ring_segmented", n), steps, steps.nbytes + registry.PLAN_OVERHEAD)
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


def test_evicted_plan_is_rebuilt(mpi_comm, monkeypatch):
    """A plan pushed out by others is made again, and the all-reduce it runs still matches
    native MPI."""
    monkeypatch.setenv("COLLECTIVES_CACHE_BYTES", str(64 << 10))
    name, n = "allreduce_ring", 5000
    x = np.random.default_rng(mpi_comm.rank).standard_normal(n + 400)
    with collectives.Comm(mpi_comm) as comm:
        for m in [n, *range(n + 1, n + 400), n]:
            mine, native = np.empty(m), np.empty(m)
            comm.Allreduce(x[:m], mine, algorithm=name)
            mpi_comm.Allreduce(x[:m], native, op=MPI.SUM)
            np.testing.assert_allclose(mine, native, rtol=1e-12, atol=1e-12)
        assert comm._engine.plans.evictions > 0 or comm.size == 1
