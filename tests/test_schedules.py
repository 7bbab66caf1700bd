"""The schedules of every algorithm of every collective at p = 2..12, without MPI.

Every rank's schedule runs in this one process on symbolic data: an element is a name
("x3.7": rank 3's element 7) and a combine builds the pair (left, right), so a result
is its own reduction tree.  Checks: no deadlock, no message left over, matching sizes,
every input in each result exactly once (the data in its place, for the collectives that
only move it), and, for all-reduce, the same tree on every rank: the bit-identity the MPI
tests sample, here for every element and every p up to 12, including those no mpiexec
run uses.  A barrier must let no rank out before it has heard, directly or through others,
from every rank.

Each schedule runs as its algorithm builds it, and again with every message of more than two
elements cut into pieces of at most two (``plans.split_messages``, as the engine's plans cut the
messages above MPI's eager limit), so the split forms meet the same checks.

Each schedule runs under two models of a blocking send.  EAGER: a send completes at once,
as MPI buffers small messages, so only the order of receives can deadlock.  RENDEZVOUS: a
send completes only once the destination has posted the matching receive, as MPI_Send may
for any message (large ones always do), so a ring of blocking sends deadlocks.  Sendrecv
posts both halves at once; Isend and Irecv never block until their Waitall.
"""
import itertools

import numpy as np
import pytest

from collectives.plans import split_messages
from collectives.registry import ALGORITHMS, Shape, Topology
from collectives.schedule import (ACC, COPY, IN, INT_MAX, IRECV, ISEND, NONE, OUT, REDUCE, SENDRECV, TMP,
                                  WAITALL, Schedule, displacements)

RANKS = range(2, 13)
MODELS = pytest.mark.parametrize("eager", [True, False], ids=["eager", "rendezvous"])
KINDS = {SENDRECV: "sendrecv", REDUCE: "reduce", COPY: "copy", ISEND: "isend", IRECV: "irecv",
         WAITALL: "waitall"}

pytestmark = pytest.mark.serial


class Request:
    """One posted send or receive, done once matched; an eager send is done when posted."""

    def __init__(self, done=False):
        self.done = done


class Machine:
    """p ranks running their schedules over Python lists, matching sends and receives per
    (source, destination) pair in posting order, as MPI does on one communicator and tag.

    ``args(r)`` gives rank r's builder arguments (or one tuple for every rank);
    ``buffers(r)`` gives its (ACC, IN) lists, or (ACC, IN, OUT), None where a rank has none.
    ``piece`` > 0: messages are cut into pieces of at most that many elements first.
    """

    piece = 0

    def __init__(self, build, p, args, buffers, eager):
        self.p, self.eager = p, eager
        self.steps = []
        self.bufs = []
        for r in range(p):
            s = Schedule(r, p)
            build(s, *(args(r) if callable(args) else args))
            steps = s.finish()
            if self.piece:
                steps, _ = split_messages(steps, 1, self.piece, INT_MAX)
            self.steps.append(steps.tolist())
            acc, inp, *out = buffers(r)
            self.bufs.append({ACC: acc, TMP: [None] * s.tmp_count, IN: inp, OUT: out[0] if out else None})
        self.sends = {}   # (source, dest): posted sends not yet matched, in posting order
        self.recvs = {}   # (source, dest): posted receives not yet matched, in posting order
        self.heard = [{r} for r in range(p)]  # whom each rank has heard from, through others too

    def _match(self, send, recv):
        (data, heard, sreq), (r, source, buf, off, cnt, rreq) = send, recv
        assert len(data) == cnt, f"rank {r} expects {cnt} elements from {source}, gets {len(data)}"
        self.bufs[r][buf][off:off + cnt] = data
        self.heard[r] |= heard
        sreq.done = rreq.done = True

    def _send(self, r, dest, buf, off, cnt):
        req = Request(done=self.eager)
        send = (self.bufs[r][buf][off:off + cnt], frozenset(self.heard[r]), req)
        waiting = self.recvs.get((r, dest))
        if waiting:
            self._match(send, waiting.pop(0))
        else:
            self.sends.setdefault((r, dest), []).append(send)
        return req

    def _recv(self, r, source, buf, off, cnt):
        req = Request()
        recv = (r, source, buf, off, cnt, req)
        waiting = self.sends.get((source, r))
        if waiting:
            self._match(waiting.pop(0), recv)
        else:
            self.recvs.setdefault((source, r), []).append(recv)
        return req

    @staticmethod
    def _uses(row):
        """The (buf, off, cnt, writes) regions a step reads or writes."""
        kind, ab, ao, ac, ap, bb, bo, bc, bp = row
        if kind == SENDRECV:
            return [(ab, ao, ac, False)] * (ap != NONE) + [(bb, bo, bc, True)] * (bp != NONE)
        if kind == REDUCE:
            return [(ap, bp, ac, False), (bb, bo, bc, False), (ab, ao, ac, True)]
        if kind == COPY:
            return [(bb, bo, bc, False), (ab, ao, ac, True)]
        if kind == IRECV:
            return [(bb, bo, bc, True)]
        if kind == ISEND:
            return [(ab, ao, ac, False)]
        return []

    def _step(self, r, row, state):
        """Run one step of rank ``r``; False when it must wait.

        A step may not write memory that a started Isend reads, nor touch memory that a
        started Irecv writes, before their Waitall: MPI leaves the outcome undefined.
        """
        kind, ab, ao, ac, ap, bb, bo, bc, bp = row
        b = self.bufs[r]
        if state["blocking"] is None:
            for buf, off, cnt, writes in self._uses(row):
                for _, sbuf, soff, scnt, swrites in state["started"]:
                    assert not (buf == sbuf and off < soff + scnt and soff < off + cnt
                                and (writes or swrites)), \
                        f"rank {r}: {KINDS[kind]} uses {buf}[{off}:{off + cnt}] while a started " \
                        f"{'irecv' if swrites else 'isend'} owns {sbuf}[{soff}:{soff + scnt}]"
        if kind == SENDRECV:
            if state["blocking"] is None:
                state["blocking"] = ([self._send(r, ap, ab, ao, ac)] if ap != NONE else []) + \
                                    ([self._recv(r, bp, bb, bo, bc)] if bp != NONE else [])
            if not all(req.done for req in state["blocking"]):
                return False
            state["blocking"] = None
        elif kind == REDUCE:
            # As the executors combine: dst = left first (unless dst is left), then dst = (dst,
            # src), src read after that copy, so a src that is dst's memory shows as (left, left).
            for i in range(ac):
                b[ab][ao + i] = b[ap][bp + i]
                b[ab][ao + i] = (b[ab][ao + i], b[bb][bo + i])
        elif kind == COPY:
            b[ab][ao:ao + ac] = b[bb][bo:bo + bc]
        elif kind == ISEND:
            state["started"].append((self._send(r, ap, ab, ao, ac), ab, ao, ac, False))
        elif kind == IRECV:
            state["started"].append((self._recv(r, bp, bb, bo, bc), bb, bo, bc, True))
        elif kind == WAITALL:
            if not all(req.done for req, *_ in state["started"]):
                return False
            state["started"] = []
        return True

    def run(self):
        """Run every rank to the end; each rank's ACC."""
        pcs = [0] * self.p
        states = [{"blocking": None, "started": []} for _ in range(self.p)]
        moved = True
        while moved:
            moved = False
            for r in range(self.p):
                while pcs[r] < len(self.steps[r]) and self._step(r, self.steps[r][pcs[r]], states[r]):
                    pcs[r] += 1
                    moved = True
        model = "eager" if self.eager else "rendezvous"
        stuck = {}
        for r in range(self.p):
            if pcs[r] < len(self.steps[r]):
                row = self.steps[r][pcs[r]]
                stuck[r] = f"{KINDS[row[0]]} to {row[4]} from {row[8]}"
        assert not stuck, f"deadlock ({model} sends): ranks wait forever at steps {stuck}"
        assert not any(self.sends.values()), f"messages sent but never received ({model} sends)"
        assert not any(self.recvs.values()), f"receives posted but never matched ({model} sends)"
        return [b[ACC] for b in self.bufs]


@pytest.fixture(autouse=True, params=[0, 2], ids=["whole", "pieces"])
def pieces(request, monkeypatch):
    """Every test here runs on the schedules as built, then on their split forms."""
    monkeypatch.setattr(Machine, "piece", request.param)
    return request.param


def test_split_forms_cut_messages(pieces):
    """The split forms do cut: a recursive-doubling all-reduce's one message of 7 elements
    becomes pieces of at most two, all posted before one wait; unsplit it stays one row."""
    rd = next(a for a in ALGORITHMS["allreduce"] if a.name == "allreduce_recursive_doubling")
    steps = Machine(rd.build, 2, (7,), lambda r: ([f"x{r}.{i}" for i in range(7)], None), True).steps[0]
    kinds = [row[0] for row in steps]
    if pieces:
        assert kinds[:9] == [IRECV] * 4 + [ISEND] * 4 + [WAITALL], kinds
        assert sorted(row[7] for row in steps[:4]) == [1, 2, 2, 2]
    else:
        assert kinds[0] == SENDRECV and steps[0][3] == 7


def _leaves(tree):
    return _leaves(tree[0]) + _leaves(tree[1]) if isinstance(tree, tuple) else [tree]


def _inputs(p, n):
    return [[f"x{r}.{i}" for i in range(n)] for r in range(p)]


def _uneven(p, seed):
    return tuple(int(c) for c in np.random.default_rng([p, seed]).integers(0, 5, p))


def _counts(p):
    """Equal blocks, all-empty blocks and two draws of uneven ones (zeros among them)."""
    return ((3,) * p, (0,) * p, _uneven(p, 1), _uneven(p, 2))


def _check_allreduce(algorithm, sizes, eager):
    # An algorithm taking ``apart`` builds an in-place and an out-of-place schedule.
    for p, extra in itertools.product(RANKS, ((False,), (True,)) if algorithm.apart else ((),)):
        for n in sizes(p):
            data = _inputs(p, n)
            if algorithm.reads_in:
                m = Machine(algorithm.build, p, (n, *extra), lambda r: ([None] * n, list(data[r])), eager)
                out = m.run()
                assert [b[IN] for b in m.bufs] == data, f"p={p} n={n}: IN written"
            else:
                out = Machine(algorithm.build, p, (n, *extra), lambda r: (list(data[r]), None), eager).run()
            for i in range(n):
                assert sorted(_leaves(out[0][i])) == sorted(d[i] for d in data), (p, n, i)
                assert all(o[i] == out[0][i] for o in out), f"p={p} n={n}: element {i} differs"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["allreduce"], ids=lambda a: a.name)
def test_allreduce_schedule(algorithm, eager):
    _check_allreduce(algorithm, lambda p: (0, 1, p - 1, p + 1, 2 * p + 3), eager)


def _check_prefix(algorithm, eager, exclusive):
    """Rank r's prefix is ranks 0 .. r's inputs (0 .. r-1 ``exclusive``) in rank order, each
    combine's left operand from lower ranks than its right; in place (IN is ACC's memory)
    too, and IN is never written; exclusive, rank 0's ACC stays as it was."""
    for p, apart in itertools.product(range(1, 13), (False, True)):
        for n in (0, 1, p - 1, p + 1, 2 * p + 3):
            data = _inputs(p, n)
            kept = [[f"kept{r}.{i}" for i in range(n)] for r in range(p)]

            def start(r):
                inp = list(data[r])
                return (list(kept[r]) if apart else inp), inp
            m = Machine(algorithm.build, p, (n, apart), start, eager)
            out = m.run()
            for r in range(p):
                what = f"p={p} n={n} apart={apart} rank {r}"
                if exclusive and r == 0:
                    assert out[r] == (kept[r] if apart else data[r]), f"{what}: ACC written"
                    continue
                if apart:
                    assert m.bufs[r][IN] == data[r], f"{what}: IN written"
                for i in range(n):
                    want = [f"x{k}.{i}" for k in range(r + (not exclusive))]
                    assert _leaves(out[r][i]) == want, f"{what}, element {i}: {out[r][i]}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["scan"], ids=lambda a: a.name)
def test_scan_schedule(algorithm, eager):
    _check_prefix(algorithm, eager, exclusive=False)


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["exscan"], ids=lambda a: a.name)
def test_exscan_schedule(algorithm, eager):
    _check_prefix(algorithm, eager, exclusive=True)


def _alltoall_matrices(p, uniform):
    """Elements from rank i to rank j: equal blocks of 3, 1 and 0, and, unless ``uniform``, two
    draws of uneven ones (zeros among them)."""
    even = [[[c] * p for _ in range(p)] for c in (3, 1, 0)]
    if uniform:
        return even
    return even + [np.random.default_rng([p, seed]).integers(0, 4, (p, p)).tolist() for seed in (1, 2)]


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["alltoall"], ids=lambda a: a.name)
def test_alltoall_schedule(algorithm, eager):
    """Rank j's ACC ends with every rank i's block for j, in rank order; IN is never written.
    The algorithms without a restriction also get uneven blocks (an Alltoallv's)."""
    uniform = algorithm.restriction is not None
    for p in range(1, 13):
        for counts in _alltoall_matrices(p, uniform):
            data = [[f"x{i}.{j}.{t}" for j in range(p) for t in range(counts[i][j])] for i in range(p)]
            want = [[f"x{i}.{j}.{t}" for i in range(p) for t in range(counts[i][j])] for j in range(p)]

            def blocks(sizes):
                return tuple(zip(displacements(sizes), sizes))

            def args(r):
                return blocks(counts[r]), blocks([counts[i][r] for i in range(p)])
            m = Machine(algorithm.build, p, args, lambda r: ([None] * len(want[r]), list(data[r])), eager)
            out = m.run()
            assert [b[IN] for b in m.bufs] == data, f"p={p} counts={counts}: IN written"
            for r in range(p):
                assert out[r] == want[r], f"p={p} counts={counts}: rank {r}"


def _multigraphs(p):
    """Per rank, (destinations, sources) lists of directed multigraphs on p ranks: every
    destination once, a self edge, edges repeated, a rank with none; the sources listed in a
    shuffled order, an edge's k-th repeat at its k-th place among its sender's."""
    rng = np.random.default_rng(p)
    graphs = [[[(r + 1) % p] for r in range(p)],
              [[r, (r + 1) % p, (r + 1) % p, (r + 2) % p] if r else [] for r in range(p)],
              [rng.integers(0, p, rng.integers(0, 4)).tolist() for _ in range(p)]]
    out = []
    for dests in graphs:
        sources = [[] for _ in range(p)]
        for i in rng.permutation(p).tolist():
            for j in dests[i]:
                sources[j].append(i)
        out.append([(dests[r], sources[r]) for r in range(p)])
    return out


def _check_neighbor(algorithm, eager, allgather):
    """Rank j's receive block from its k-th edge from i ends holding i's send block of its
    k-th edge to j (Neighbor_allgather: i's one block); IN is never written."""
    for p in range(1, 9):
        for graph in _multigraphs(p):
            # Edge (i, j, k): elements i sends on its k-th edge to j (its one block's for allgather).
            def edges(r, out):
                seen, result = {}, []
                for peer in graph[r][0 if out else 1]:
                    k = seen[peer] = seen.get(peer, -1) + 1
                    result.append((r, peer, k) if out else (peer, r, k))
                return result

            def size(e):
                return 1 + e[0] % 2 if allgather else (e[0] + 2 * e[1] + e[2]) % 3

            def block(e):
                return [f"x{e[0]}.{t}" if allgather else f"x{e[0]}>{e[1]}#{e[2]}.{t}" for t in range(size(e))]

            sends = [[None] if allgather else edges(r, True) for r in range(p)]
            data = [block((r, None, None)) if allgather else sum((block(e) for e in sends[r]), [])
                    for r in range(p)]
            want = [sum((block(e) for e in edges(r, False)), []) for r in range(p)]

            def args(r):
                send_at = displacements([size(e) for e in edges(r, True)]) if not allgather else None
                out = tuple((e[1], 0 if allgather else send_at[i], size((r, None, None)) if allgather else size(e))
                            for i, e in enumerate(edges(r, True)))
                recv = edges(r, False)
                return out, tuple((e[0], at, size(e)) for e, at in zip(recv, displacements([size(e) for e in recv])))
            m = Machine(algorithm.build, p, args, lambda r: ([None] * len(want[r]), list(data[r])), eager)
            out = m.run()
            assert [b[IN] for b in m.bufs] == data, f"p={p} graph={graph}: IN written"
            for r in range(p):
                assert out[r] == want[r], f"p={p} graph={graph}: rank {r}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["neighbor_allgather"], ids=lambda a: a.name)
def test_neighbor_allgather_schedule(algorithm, eager):
    _check_neighbor(algorithm, eager, True)


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["neighbor_alltoall"], ids=lambda a: a.name)
def test_neighbor_alltoall_schedule(algorithm, eager):
    _check_neighbor(algorithm, eager, False)


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["allgather"], ids=lambda a: a.name)
def test_allgather_schedule(algorithm, eager):
    for p in RANKS:
        for counts in _counts(p):
            at = displacements(counts) + (sum(counts),)
            want = [f"b{r}.{i}" for r in range(p) for i in range(counts[r])]

            def own(r):
                return [want[x] if at[r] <= x < at[r + 1] else None for x in range(at[p])], None
            for r, got in enumerate(Machine(algorithm.build, p, (counts,), own, eager).run()):
                assert got == want, f"p={p} counts={counts}: rank {r}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["reduce_scatter"], ids=lambda a: a.name)
def test_reduce_scatter_schedule(algorithm, eager):
    """With ``out`` the rank's block must end in OUT (the executors then copy nothing out)."""
    # An algorithm taking ``apart`` builds both schedules (IN apart from ACC, or not).
    for p, out, extra in itertools.product(RANKS, (False, True), ((False,), (True,)) if algorithm.apart else ((),)):
        for counts in _counts(p):
            at = displacements(counts) + (sum(counts),)
            data = _inputs(p, at[p])
            # An algorithm reading IN starts from an ACC (and OUT) of unknowns, so any read
            # of them before they are written shows up as a None leaf.
            m = Machine(algorithm.build, p, (counts, out, *extra),
                        (lambda r: ([None] * at[p], list(data[r]), [None] * counts[r]))
                        if algorithm.reads_in else (lambda r: (list(data[r]), None, None)), eager)
            accs = m.run()
            if algorithm.reads_in:
                assert [b[IN] for b in m.bufs] == data, f"p={p} out={out} counts={counts}: IN written"
            for r in range(p):
                got = m.bufs[r][OUT] if out else accs[r][at[r]:at[r + 1]]
                assert len(got) == counts[r], f"p={p} out={out} counts={counts}: rank {r} wrote past OUT"
                for i, tree in enumerate(got):
                    want = sorted(d[at[r] + i] for d in data)
                    assert sorted(_leaves(tree)) == want, (p, out, counts, r, i)


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["bcast"], ids=lambda a: a.name)
def test_bcast_schedule(algorithm, eager):
    for p in RANKS:
        for n in (0, 1, p + 1, 2 * p + 3):
            want = [f"b{i}" for i in range(n)]
            for root in range(p):
                def start(r):
                    return (list(want) if r == root else [None] * n), None
                for r, got in enumerate(Machine(algorithm.build, p, (n, root), start, eager).run()):
                    assert got == want, f"p={p} n={n} root={root}: rank {r}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["reduce"], ids=lambda a: a.name)
def test_reduce_schedule(algorithm, eager):
    """Non-roots get no ACC at all (None), so a schedule that touches theirs fails."""
    for p in RANKS:
        for n in (0, 1, p + 1):
            data = _inputs(p, n)
            for root in range(p):
                def start(r):
                    return ([None] * n if r == root else None), data[r]
                out = Machine(algorithm.build, p, (n, root), start, eager).run()[root]
                for i in range(n):
                    assert sorted(_leaves(out[i])) == sorted(d[i] for d in data), (p, n, root, i)


def _rooted_cases(algorithm, p):
    """(counts, args) of the gather and scatter cases ``algorithm`` takes at p ranks.

    Equal counts are known everywhere (Gather, Scatter); unequal ones only at the root, the
    other ranks seeing -1 for every count but their own, as Gatherv and Scatterv pass them.
    """
    for counts in _counts(p):
        uniform = len(set(counts)) == 1
        if algorithm.applies(Shape(sum(counts), sum(counts), uniform), Topology(p)) is not None:
            continue
        for root in range(p):
            def args(r, counts=counts, root=root, uniform=uniform):
                known = counts if uniform or r == root else \
                    tuple(c if i == r else -1 for i, c in enumerate(counts))
                return known, root
            yield counts, root, args


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["gather"], ids=lambda a: a.name)
def test_gather_schedule(algorithm, eager):
    for p in RANKS:
        for counts, root, args in _rooted_cases(algorithm, p):
            want = [f"b{r}.{i}" for r in range(p) for i in range(counts[r])]

            def start(r):
                own = [f"b{r}.{i}" for i in range(counts[r])]
                return ([None] * len(want) if r == root else None), own
            got = Machine(algorithm.build, p, args, start, eager).run()[root]
            assert got == want, f"p={p} counts={counts} root={root}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["scatter"], ids=lambda a: a.name)
def test_scatter_schedule(algorithm, eager):
    for p in RANKS:
        for counts, root, args in _rooted_cases(algorithm, p):
            blocks = [[f"b{r}.{i}" for i in range(counts[r])] for r in range(p)]

            def start(r):
                return [None] * counts[r], (sum(blocks, []) if r == root else None)
            for r, got in enumerate(Machine(algorithm.build, p, args, start, eager).run()):
                assert got == blocks[r], f"p={p} counts={counts} root={root}: rank {r}"


@MODELS
@pytest.mark.parametrize("algorithm", ALGORITHMS["barrier"], ids=lambda a: a.name)
def test_barrier_schedule(algorithm, eager):
    for p in RANKS:
        machine = Machine(algorithm.build, p, (), lambda r: ([], None), eager)
        machine.run()
        for r in range(p):
            assert machine.heard[r] == set(range(p)), f"p={p}: rank {r} leaves before hearing from all"


def test_segmented_ring_schedule(monkeypatch):
    """Segments of 3 elements, so blocks go as trains, of unequal length when blocks are uneven."""
    monkeypatch.setattr("collectives.algorithms.allreduce_ring_segmented.SEGMENT", 3)
    ring = next(a for a in ALGORITHMS["allreduce"] if a.name == "allreduce_ring_segmented")
    for eager in (True, False):
        _check_allreduce(ring, lambda p: (3 * p, 7 * p - 1, 10 * p + 2), eager)


def _send_then_receive(s):
    """Every rank sends to its right neighbour, then receives from its left: a ring of MPI_Send."""
    p, r = s.size, s.rank
    s.send((r + 1) % p, ACC, 0, 1)
    s.recv((r - 1) % p, ACC, 0, 1)


def _receive_then_send(s):
    """Every rank receives from its left neighbour before it sends: deadlocks however sends go."""
    p, r = s.size, s.rank
    s.recv((r - 1) % p, ACC, 0, 1)
    s.send((r + 1) % p, ACC, 0, 1)


@pytest.mark.parametrize("build,eager,deadlocks", [
    (_send_then_receive, True, False), (_send_then_receive, False, True),
    (_receive_then_send, True, True), (_receive_then_send, False, True),
], ids=["send-recv-eager", "send-recv-rendezvous", "recv-send-eager", "recv-send-rendezvous"])
def test_machine_finds_deadlocks(build, eager, deadlocks):
    """The checker itself: a ring of blocking sends deadlocks only when sends wait for receives."""
    machine = Machine(build, 3, (), lambda r: ([f"x{r}"], None), eager)
    if deadlocks:
        with pytest.raises(AssertionError, match="deadlock"):
            machine.run()
    else:
        assert machine.run() == [["x2"], ["x0"], ["x1"]]


def _combine_before_wait(s):
    """Rank 1 combines into the block its Irecv is still writing."""
    if s.rank == 0:
        s.send(1, ACC, 0, 1)
    else:
        s.irecv(0, TMP, 0, 1)
        s.reduce((ACC, 0, 1), (TMP, 0, 1))
        s.waitall()


def _overwrite_before_wait(s):
    """Rank 0 overwrites what its Isend is still reading."""
    if s.rank == 0:
        s.isend(1, ACC, 0, 2)
        s.copy((ACC, 1, 1), (ACC, 0, 1))
        s.waitall()
    else:
        s.recv(0, ACC, 0, 2)


@pytest.mark.parametrize("build,owner", [(_combine_before_wait, "irecv"), (_overwrite_before_wait, "isend")],
                         ids=["combine-before-wait", "overwrite-before-wait"])
def test_machine_finds_buffer_races(build, owner):
    """The checker itself: touching memory that a started request owns fails, whatever the timing."""
    machine = Machine(build, 2, (), lambda r: ([f"x{r}.0", f"x{r}.1"], None), eager=True)
    with pytest.raises(AssertionError, match=f"while a started {owner}"):
        machine.run()


def _pipeline(name, fuse=True):
    """A builder running stage s's steps of pipeline schedule ``name`` (collectives.parallel.pipeline)."""
    from collectives.parallel import pipeline

    def build(s, micro):
        pipeline.as_schedule(s, pipeline.schedule(name, s.size, s.rank, micro, fuse), micro)
    return build


def _nested(j, stages):
    """What stage 0's gradient slot of micro-batch j must hold: every stage's backward paired
    micro-batch j's activation with the gradient from the stage above, from the top down."""
    tree = f"x{j}"
    for _ in range(stages - 1):
        tree = (f"x{j}", tree)
    return tree


@MODELS
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "pipedream", "forward"])
def test_pipeline_schedule(name, eager):
    """Every pipeline schedule at 1..12 stages and 1..9 micro-batches: no deadlock, every message
    received, each micro-batch's activation reaches the last stage and its gradient stage 0."""
    for p in range(1, 13):
        for micro in range(1, 10):
            def start(r):
                return [f"x{i}" if r == 0 and i < micro else None for i in range(4 * micro)], None
            out = Machine(_pipeline(name), p, (micro,), start, eager).run()
            assert out[-1][micro:2 * micro] == [f"x{j}" for j in range(micro)], (p, micro)
            if name != "forward":
                assert out[0][3 * micro:] == [_nested(j, p) for j in range(micro)], (p, micro)


@pytest.mark.parametrize("name", ["1f1b", "pipedream"])
def test_unfused_one_f_one_b_deadlocks_unbuffered(name):
    """Without a sendrecv, 1F1B's activation sent forward meets a gradient sent back: fine when
    sends are buffered, a deadlock when they wait for their receive."""
    Machine(_pipeline(name, fuse=False), 2, (2,), lambda r: ([f"x{r}"] * 8, None), eager=True).run()
    with pytest.raises(AssertionError, match="deadlock"):
        Machine(_pipeline(name, fuse=False), 2, (2,), lambda r: ([f"x{r}"] * 8, None), eager=False).run()
