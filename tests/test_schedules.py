"""The schedules of the all-reduce, all-gather and reduce-scatter algorithms at p = 2..12, without MPI.

Every rank's schedule runs in this one process on symbolic data: an element is a name
("x3.7": rank 3's element 7) and a combine builds the pair (left, right), so a result
is its own reduction tree.  Checks: no deadlock (sends are eager, so only receive order
matters), no message left over, matching sizes, every input in each result exactly once,
and, for all-reduce, the same tree on every rank: the bit-identity the MPI tests sample,
here for every element and every p up to 12, including those no mpiexec run uses.
"""
import numpy as np
import pytest

from collectives.registry import ALGORITHMS
from collectives.schedule import (ACC, COPY, IN, IRECV, ISEND, NONE, REDUCE, SENDRECV, TMP,
                                  WAITALL, Schedule, displacements)

RANKS = range(2, 13)


class Machine:
    """p ranks running their schedules over Python lists, with FIFO channels between them."""

    def __init__(self, algorithm, p, args, buffers):
        self.p = p
        self.steps = []
        self.bufs = []
        for r in range(p):
            s = Schedule(r, p)
            algorithm.build(s, *args)
            self.steps.append(s.finish().tolist())
            acc, inp = buffers(r)
            self.bufs.append({ACC: acc, TMP: [None] * s.tmp_count, IN: inp})
        self.channels = {}

    def _send(self, r, dest, buf, off, cnt):
        self.channels.setdefault((r, dest), []).append(self.bufs[r][buf][off:off + cnt])

    def _recv(self, r, source, buf, off, cnt):
        """Take the next message from ``source`` into place; False when there is none yet."""
        queue = self.channels.get((source, r))
        if not queue:
            return False
        data = queue.pop(0)
        assert len(data) == cnt, f"rank {r} expects {cnt} elements from {source}, gets {len(data)}"
        self.bufs[r][buf][off:off + cnt] = data
        return True

    def _step(self, r, row, state):
        """Run one step of rank ``r``; False when it must wait for a message."""
        kind, ab, ao, ac, ap, bb, bo, bc, bp = row
        b = self.bufs[r]
        if kind == SENDRECV:
            if ap != NONE and not state["sent"]:
                self._send(r, ap, ab, ao, ac)
                state["sent"] = True
            if bp != NONE and not self._recv(r, bp, bb, bo, bc):
                return False
            state["sent"] = False
        elif kind == REDUCE:
            left = b[ap if ap != NONE else ab]
            b[ab][ao:ao + ac] = [(left[ao + i], b[bb][bo + i]) for i in range(ac)]
        elif kind == COPY:
            b[ab][ao:ao + ac] = b[bb][bo:bo + bc]
        elif kind == ISEND:
            self._send(r, ap, ab, ao, ac)
        elif kind == IRECV:
            state["posted"].append((bp, bb, bo, bc))
        elif kind == WAITALL:
            while state["posted"]:
                if not self._recv(r, *state["posted"][0]):
                    return False
                state["posted"].pop(0)
        return True

    def run(self):
        """Run every rank to the end; each rank's ACC."""
        pcs = [0] * self.p
        states = [{"sent": False, "posted": []} for _ in range(self.p)]
        moved = True
        while moved:
            moved = False
            for r in range(self.p):
                while pcs[r] < len(self.steps[r]) and self._step(r, self.steps[r][pcs[r]], states[r]):
                    pcs[r] += 1
                    moved = True
        stuck = [r for r in range(self.p) if pcs[r] < len(self.steps[r])]
        assert not stuck, f"deadlock: ranks {stuck} wait forever"
        assert not any(self.channels.values()), "messages sent but never received"
        return [b[ACC] for b in self.bufs]


def _leaves(tree):
    return _leaves(tree[0]) + _leaves(tree[1]) if isinstance(tree, tuple) else [tree]


def _inputs(p, n):
    return [[f"x{r}.{i}" for i in range(n)] for r in range(p)]


def _check_allreduce(algorithm, sizes):
    for p in RANKS:
        for n in sizes(p):
            data = _inputs(p, n)
            if algorithm.reads_in:
                out = Machine(algorithm, p, (n,), lambda r: ([None] * n, data[r])).run()
            else:
                out = Machine(algorithm, p, (n,), lambda r: (list(data[r]), None)).run()
            for i in range(n):
                assert sorted(_leaves(out[0][i])) == sorted(d[i] for d in data), (p, n, i)
                assert all(o[i] == out[0][i] for o in out), f"p={p} n={n}: element {i} differs"


@pytest.mark.parametrize("algorithm", ALGORITHMS["allreduce"], ids=lambda a: a.name)
def test_allreduce_schedule(algorithm):
    _check_allreduce(algorithm, lambda p: (0, 1, p - 1, p + 1, 2 * p + 3))


def _uneven(p, seed):
    return tuple(int(c) for c in np.random.default_rng([p, seed]).integers(0, 5, p))


@pytest.mark.parametrize("algorithm", ALGORITHMS["allgather"], ids=lambda a: a.name)
def test_allgather_schedule(algorithm):
    for p in RANKS:
        for counts in ((3,) * p, _uneven(p, 1), _uneven(p, 2)):
            at = displacements(counts) + (sum(counts),)
            want = [f"b{r}.{i}" for r in range(p) for i in range(counts[r])]

            def own(r):
                return [want[x] if at[r] <= x < at[r + 1] else None for x in range(at[p])], None
            for r, got in enumerate(Machine(algorithm, p, (counts,), own).run()):
                assert got == want, f"p={p} counts={counts}: rank {r}"


@pytest.mark.parametrize("algorithm", ALGORITHMS["reduce_scatter"], ids=lambda a: a.name)
def test_reduce_scatter_schedule(algorithm):
    for p in RANKS:
        for counts in ((3,) * p, _uneven(p, 1), _uneven(p, 2)):
            at = displacements(counts) + (sum(counts),)
            data = _inputs(p, at[p])
            out = Machine(algorithm, p, (counts,), lambda r: (list(data[r]), None)).run()
            for r in range(p):
                for i in range(at[r], at[r + 1]):
                    assert sorted(_leaves(out[r][i])) == sorted(d[i] for d in data), (p, counts, r, i)


def test_segmented_ring_schedule(monkeypatch):
    """Segments of 3 elements, so blocks go as trains, of unequal length when blocks are uneven."""
    monkeypatch.setattr("collectives.algorithms.allreduce_ring_segmented.SEGMENT", 3)
    ring = next(a for a in ALGORITHMS["allreduce"] if a.name == "allreduce_ring_segmented")
    _check_allreduce(ring, lambda p: (3 * p, 7 * p - 1, 10 * p + 2))
