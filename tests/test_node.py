"""Node-aware all-reduces under COLLECTIVES_NODE layouts on one host, against native MPI and NumPy."""
import importlib

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import node, plans
from collectives.node import layout
from tests.launch import mpiexec, own_jobs
from util import ALL_DTYPES, assert_close, assert_everywhere, check_allreduce, make_data, reference, sizes

NODE_ALGORITHMS = ["allreduce_hierarchical", "allreduce_node_leader"]
# Uneven layouts (the last two) run node_leader only: hierarchical falls back to it.  Three
# uneven nodes ("1,3,4", 8 ranks) meet the tests of the phases and the choice, not the matrix.
LAYOUTS = ["2x2", "2x3", "3x2", "3,1", "1,2"]


def _node_comm(monkeypatch, spec, timeout=None):
    size = MPI.COMM_WORLD.Get_size()
    try:
        layout(spec, size)
    except ValueError:
        pytest.skip(f"layout {spec} does not fit {size} ranks")
    monkeypatch.setenv("COLLECTIVES_NODE", spec)
    return collectives.Comm(MPI.COMM_WORLD, timeout=timeout)


@pytest.mark.matrix
@pytest.mark.parametrize("spec", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("algorithm", NODE_ALGORITHMS + ["auto"])
def test_node_allreduce(monkeypatch, spec, algorithm, dtype):
    world = MPI.COMM_WORLD
    with _node_comm(monkeypatch, spec) as comm:
        check_allreduce(comm, world, dtype, sizes(world.size) + [70000], f"{algorithm} {spec}",
                        algorithm=algorithm)


@pytest.mark.parametrize("timeout", [0, 120], ids=["unwatched", "watched"])
@pytest.mark.parametrize("spec", LAYOUTS + ["1,3,4"])
@pytest.mark.parametrize("algorithm", NODE_ALGORITHMS)
def test_node_allreduce_in_place_and_choice(monkeypatch, spec, algorithm, timeout):
    # watched, the constructor finds the nodes itself (the sub-communicators it makes must not)
    p, r = MPI.COMM_WORLD.size, MPI.COMM_WORLD.rank
    with _node_comm(monkeypatch, spec, timeout) as comm:
        buf = make_data(np.float64, "sum", 1001, r)
        want = reference(np.float64, "sum", 1001, p)
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algorithm)
        assert_close(buf, want, np.float64, p, f"{algorithm} {spec} in place")
        uniform = len(set(layout(spec, p))) == 1
        expected = algorithm if uniform else "allreduce_node_leader"
        assert comm.last_algorithm == expected


class _Recorder:
    """A communicator of collectives.node.Nodes (``role`` "intra" or "lane") that notes each
    collective call as (method, role, counts, displs, root, in place) in ``calls``, then makes it."""

    def __init__(self, comm, role, calls):
        self._comm, self._role, self._calls = comm, role, calls

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def _note(self, method, counts, displs=None, root=None, in_place=False):
        self._calls.append((method, self._role, counts, displs, root, in_place))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts, op=MPI.SUM):
        self._note("Reduce_scatter", tuple(recvcounts), in_place=sendbuf is MPI.IN_PLACE)
        self._comm.Reduce_scatter(sendbuf, recvbuf, recvcounts, op=op)

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        self._note("Allreduce", recvbuf.size, in_place=sendbuf is MPI.IN_PLACE)
        self._comm.Allreduce(sendbuf, recvbuf, op=op)

    def Allgatherv(self, sendbuf, recvbuf):
        _, (counts, displs) = recvbuf
        self._note("Allgatherv", tuple(counts), tuple(displs), in_place=sendbuf is MPI.IN_PLACE)
        self._comm.Allgatherv(sendbuf, recvbuf)

    def Reduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0):
        in_place = sendbuf is MPI.IN_PLACE
        self._note("Reduce", (recvbuf if in_place else sendbuf).size, root=root, in_place=in_place)
        self._comm.Reduce(sendbuf, recvbuf, op=op, root=root)

    def Bcast(self, buf, root=0):
        self._note("Bcast", buf.size, root=root)
        self._comm.Bcast(buf, root=root)


def _equal(got, want, what):
    assert got == want, f"{what}: {got} != {want}"


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("spec", ["2x2", "2x3", "3x2", "4x2", "3,1", "1,2", "1,3,4"])
@pytest.mark.parametrize("algorithm", NODE_ALGORITHMS)
def test_node_allreduce_makes_the_phases_it_describes(monkeypatch, algorithm, spec, dtype, in_place):
    """The run's calls on the node communicators are the module's ``phases``; the schedules they
    plan are the rounds bench/simulate.py walks for this rank; the result is native MPI's."""
    from bench.simulate import allreduce_rounds, rounds

    world = MPI.COMM_WORLD
    try:
        counts = layout(spec, world.size)
    except ValueError:
        pytest.skip(f"layout {spec} does not fit {world.size} ranks")
    if algorithm == "allreduce_hierarchical" and len(set(counts)) > 1:
        pytest.skip("hierarchical needs equal nodes (test_node_allreduce_in_place_and_choice: the fallback)")
    phases = importlib.import_module(f"collectives.algorithms.{algorithm}").phases
    monkeypatch.setenv("COLLECTIVES_NODE", spec)
    # The model's rounds are point-to-point schedules: no node communicator runs its phases in
    # a shared segment here (tests/test_shm.py runs the phases inside a node in the segment).
    monkeypatch.setenv("COLLECTIVES_SHM", "0")
    planned = []

    def plan(name, rank, size, *args):
        made = real_plan(name, rank, size, *args)
        planned.append((name, made[0]))
        return made
    real_plan = plans.schedule
    monkeypatch.setattr(plans, "schedule", plan)
    itemsize = np.dtype(dtype).itemsize
    for n in (1, 2, 5, 10, 1001, 70001):
        # A new Comm each time: a Comm plans a call shape once; check off, as the model has it
        # (with the check, ``auto`` may pick the fused forms).
        with collectives.Comm(world, check=False) as comm:
            calls = []
            nodes = comm._nodes
            nodes.intra, nodes.lane = _Recorder(nodes.intra, "intra", calls), _Recorder(nodes.lane, "lane", calls)
            send = (np.arange(n) % 5 + world.rank).astype(dtype)  # small integers: sums exact in any order
            recv = send.copy() if in_place else np.empty_like(send)
            want = np.empty_like(send)
            world.Allreduce(send, want)
            del planned[:]
            comm.Allreduce(MPI.IN_PLACE if in_place else send, recv, algorithm=algorithm)
            described = [tuple(phase) for phase in phases(n, nodes.intra.size, nodes.local, in_place)]
            assert_everywhere(world, np.testing.assert_array_equal, recv, want)
            assert_everywhere(world, _equal, calls, described, f"n={n}: the calls made")
            if nodes.uniform and n >= max(counts):
                # One schedule planned per call, peers renamed to world ranks (a call without
                # elements plans none under the NumPy fallback: only counts that fill every block).
                members = {"intra": nodes.grid[:, nodes.lane.rank], "lane": nodes.grid[nodes.local]}
                ran = []
                for (name, steps), (_, role, *_) in zip(planned, calls):
                    size = 1 if name.startswith(("bcast", "allgather")) else itemsize  # they move bytes
                    ran += [[[(int(members[role][q]), b) for q, b in moves] for moves in (sends, recvs)] + [combined]
                            for sends, recvs, combined in rounds(steps, size)]
                model = allreduce_rounds(algorithm, len(counts), counts[0], n, itemsize)[world.rank]
                assert_everywhere(world, _equal, (len(planned), ran), (len(calls), model),
                                  f"n={n}: (schedules planned, their rounds) against (calls, the model's rounds)")


@pytest.mark.parametrize("spec", ["3,1", "1,2", "1,3,4"])
def test_auto_takes_node_leader_where_hierarchical_does_not_apply(monkeypatch, spec):
    # Nodes of different sizes: the table's hierarchical row does not apply, its node_leader row does.
    p = MPI.COMM_WORLD.size
    buf = np.ones((1 << 20) // 8)
    with _node_comm(monkeypatch, spec) as comm:
        comm.Allreduce(MPI.IN_PLACE, buf)
        assert comm.last_algorithm == "allreduce_node_leader"
        assert np.all(buf == p)


@pytest.mark.parametrize("nbytes, expected", [(8, None), (128 << 10, "allreduce_hierarchical"),
                                              (4 << 20, "allreduce_hierarchical")])
def test_auto_picks_node_aware_only_across_nodes(monkeypatch, nbytes, expected):
    p = MPI.COMM_WORLD.size
    buf = np.ones(nbytes // 8)
    spec = "2" if p % 2 == 0 and p > 2 else str(p)
    monkeypatch.setenv("COLLECTIVES_NODE", spec)
    with collectives.Comm(MPI.COMM_WORLD) as comm:
        comm.Allreduce(MPI.IN_PLACE, buf)
        multi = p > 2 and spec == "2"
        if multi and expected is not None:
            assert comm.last_algorithm == expected
        else:
            assert comm.last_algorithm not in NODE_ALGORITHMS
        assert np.all(buf == p)


# auto's flat choice on a communicator that spans nodes (the table's rows keyed by nodes), written out:
# recursive doubling up to 64 KiB, the ring above; with the check on, the fused form up to the most
# a fused collective carries (collectives.eager; exchange.FUSED_DEFAULT across nodes).
SPREAD_CHOICE = [(8, "allreduce_recursive_doubling"), (4096, "allreduce_recursive_doubling"),
                 (64 << 10, "allreduce_recursive_doubling"), ((64 << 10) + 4, "allreduce_ring"),
                 (1 << 20, "allreduce_ring")]


@pytest.mark.parametrize("first", ["allreduce", "iallreduce"])
@pytest.mark.parametrize("check", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize("spec", ["1", "2", ""], ids=["one_rank_per_node", "two_per_node", "one_node"])
def test_flat_choice_across_nodes(monkeypatch, spec, check, first):
    world = MPI.COMM_WORLD
    p = world.size
    if spec:
        monkeypatch.setenv("COLLECTIVES_NODE", spec)
    else:
        monkeypatch.delenv("COLLECTIVES_NODE", raising=False)
    monkeypatch.delenv("COLLECTIVES_ALLREDUCE", raising=False)
    counts = layout(spec, p) if spec else [p]
    spans, multi = len(counts) > 1, len(counts) > 1 and max(counts) > 1
    with collectives.Comm(world, check=check) as comm:
        for nbytes, across in SPREAD_CHOICE:
            x = np.arange(nbytes // 4, dtype=np.float32) + world.rank
            y, want = np.empty_like(x), np.empty_like(x)
            if first == "iallreduce":
                # a plan made for one node before the first Allreduce finds the nodes
                comm.Iallreduce(x, y).wait()
            comm.Allreduce(x, y)
            world.Allreduce(x, want)
            assert np.array_equal(y, want), nbytes
            why = comm.explain("allreduce", nbytes // 4)
            if comm._engine.segment is not None:  # one node: its shared-memory rows
                assert not spans and comm.last_algorithm in collectives.shm_names("allreduce"), nbytes
                assert "tuning.json" in why, why
            elif check and nbytes <= comm._engine.fused_bytes:
                assert comm.last_algorithm == "allreduce_fused", nbytes
            elif multi and nbytes > (64 << 10):
                assert comm.last_algorithm in NODE_ALGORITHMS, nbytes
            elif spans:
                assert comm.last_algorithm == across, nbytes
                assert why.startswith(f"{across}: auto: allreduce row") and "nodes 2.." in why, why
            else:
                assert "nodes 2.." not in why and "tuning.json" in why, why


def test_forced_node_algorithm_on_one_node_falls_back():
    p = MPI.COMM_WORLD.size
    with collectives.Comm(MPI.COMM_WORLD) as comm:
        buf = np.ones(10)
        comm.Allreduce(MPI.IN_PLACE, buf, algorithm="hierarchical")
        assert comm.last_algorithm not in NODE_ALGORITHMS
        assert np.all(buf == p)


@pytest.mark.serial
@pytest.mark.parametrize("spec, counts", [("2", None), ("2x3", [3, 3]), ("3x2", [2, 2, 2]),
                                          ("1,2,2", [1, 2, 2])])
def test_layout(spec, counts):
    assert layout(spec, 6 if counts is None else sum(counts)) == (counts or [2, 2, 2])
    assert layout("2", 5) == [2, 2, 1]


@pytest.mark.serial
@pytest.mark.parametrize("spec", ["0", "2x", "abc", "2x2", "3,0,3"])
def test_bad_layout(spec):
    with pytest.raises(ValueError, match="COLLECTIVES_NODE"):
        layout(spec, 6)


@own_jobs
def test_six_ranks_in_a_job_of_their_own():
    """2x3 and 3x2 need 6 ranks, which the suite's launches (1..4, 8) never have: launch them,
    with the reduced matrix of the rank counts outside make test's DTYPES_NPS."""

    done = mpiexec(6, ["-m", "pytest", "-p", "no:cacheprovider", "-q", "--with-mpi", "-k", "2x3 or 3x2", "tests/test_node.py",
                       "--matrix=reduced", "--serial=skip"],
                   timeout=600, env={"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


# (algorithm of the first half of the ranks, of the rest): node-aware against node-aware, and
# against flat ones, the first (index 0 of the agreement) among them.
MISMATCHED = [("hierarchical", "node_leader"), ("hierarchical", "all_to_all"), ("ring", "node_leader")]


@pytest.mark.mpi(min_size=4)
@pytest.mark.parametrize("first", ["fresh", "warm"])
@pytest.mark.parametrize("mine, theirs", MISMATCHED)
def test_node_aware_algorithms_that_differ_raise_on_every_rank(monkeypatch, mine, theirs, first):
    """Ranks that would run different phases (or one flat, one node-aware) raise the same
    ValueError naming the algorithm, instead of waiting in different collectives; then the
    same Comm still all-reduces right.  ``fresh``: this is the Comm's first all-reduce, so the
    ranks also find the nodes in it."""
    world = MPI.COMM_WORLD
    p, r = world.size, world.rank
    if p % 2:
        pytest.skip("needs nodes of two ranks")
    with _node_comm(monkeypatch, "2") as comm:
        x = np.ones(1 << 18, np.float32)
        if first == "warm":
            comm.Allreduce(MPI.IN_PLACE, x.copy())
        buf = x.copy()
        with pytest.raises(ValueError) as err:
            comm.Allreduce(MPI.IN_PLACE, buf, algorithm=mine if r < p // 2 else theirs)
        assert "algorithm ranges" in str(err.value)
        messages = world.allgather(str(err.value))
        assert messages == [messages[0]] * p
        assert np.array_equal(buf, x), "the buffer was written before the algorithms were compared"
        check_allreduce(comm, world, np.float32, [1 << 18], "after the mismatch", algorithm=theirs)


@pytest.mark.mpi(min_size=2)
def test_first_allreduce_against_another_collective_raises_on_every_rank(monkeypatch):
    """A Comm's first all-reduce finds the nodes with MPI's own collectives; a rank in another
    collective must make every rank raise, not leave the others in the discovery."""
    world = MPI.COMM_WORLD
    p, r = world.size, world.rank
    with _node_comm(monkeypatch, "2" if p % 2 == 0 else str(p)) as comm:
        x = np.arange(64, dtype=np.float32)
        with pytest.raises(ValueError, match="ranks called different collectives"):
            if r == 0:
                comm.Allreduce(MPI.IN_PLACE, x.copy())
            else:
                comm.Bcast(x.copy())
        check_allreduce(comm, world, np.float32, [64, 1 << 18], "after the mismatch")
