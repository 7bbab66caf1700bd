"""Gossip topologies: the graphs, the Metropolis-Hastings matrix (exactly doubly stochastic and
symmetric), one gossip step against NumPy's dense W @ X, and consensus without gradients."""
from fractions import Fraction

import numpy as np
import pytest

from collectives import Comm
from collectives.train.gossip import TOPOLOGIES, Gossip, consensus_distance, graph, grid, matrix
from collectives.train.job import make_trainer
from train_util import fit, world_fixture

world = world_fixture()
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17]


def _expected_neighbours(topology, p, i):
    """Rank i's neighbours by the definition, written out independently of gossip.graph."""
    if topology == "ring":
        return {(i - 1) % p, (i + 1) % p} - {i}
    if topology == "torus":
        rows = max(r for r in range(1, p + 1) if p % r == 0 and r * r <= p)
        cols = p // rows
        r, c = divmod(i, cols)
        return {((r + dr) % rows) * cols + (c + dc) % cols for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))} - {i}
    hops = [2 ** k for k in range(p.bit_length()) if 2 ** k < p]
    return {(i + sign * h) % p for h in hops for sign in (1, -1)} - {i}


@pytest.mark.serial
@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("p", SIZES)
def test_mixing_matrix_is_exactly_doubly_stochastic_and_symmetric(topology, p):
    for step in range(4 if topology == "matching" else 1):
        adj = graph(topology, p, step, seed=3)
        W = matrix(adj)
        assert all(isinstance(x, Fraction) for r in W for x in r)
        for i in range(p):
            assert sum(W[i]) == 1 and sum(W[j][i] for j in range(p)) == 1
            for j in range(p):
                assert W[i][j] == W[j][i] and W[i][j] >= 0
                # Metropolis-Hastings: 1 / (1 + max degree) on an edge, nothing off the graph
                expected = Fraction(1, 1 + max(len(adj[i]), len(adj[j]))) if j in adj[i] else 0
                if i != j:
                    assert W[i][j] == expected
        if topology == "matching":
            assert all(len(n) <= 1 for n in adj) and sum(len(n) for n in adj) == 2 * (p // 2)
        else:
            assert all(adj[i] == _expected_neighbours(topology, p, i) for i in range(p))


@pytest.mark.serial
def test_torus_grid_and_matchings_change_every_step():
    assert [grid(p) for p in (4, 6, 8, 9, 12, 7)] == [(2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (1, 7)]
    matchings = {tuple(tuple(sorted(n)) for n in graph("matching", 8, step, seed=1)) for step in range(10)}
    assert len(matchings) > 5
    assert graph("matching", 8, 4, seed=1) == graph("matching", 8, 4, seed=1)
    with pytest.raises(ValueError, match="unknown topology"):
        graph("star", 4)


def _gathered(comm, x):
    return np.array(comm.allgather(x))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_gossip_step_is_the_dense_product(mpi_comm, topology):
    p, r = mpi_comm.size, mpi_comm.rank
    comm = Comm(mpi_comm)
    x = np.random.default_rng([11, r]).standard_normal(37)
    for step in range(3):
        mixer = Gossip(topology, p, r, seed=5)
        weights = mixer.row(step)
        before = _gathered(mpi_comm, x)
        x = mixer.combine(x, weights, mixer.exchange(comm, x, weights))
        W = np.array(matrix(graph(topology, p, step, seed=5)), dtype=float)
        np.testing.assert_allclose(_gathered(mpi_comm, x), W @ before, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(before.mean(0), _gathered(mpi_comm, x).mean(0), rtol=1e-12, atol=1e-14)
    comm.Free()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_consensus_distance_shrinks_without_gradients(mpi_comm, topology):
    p, r = mpi_comm.size, mpi_comm.rank
    comm = Comm(mpi_comm)
    x = np.random.default_rng([12, r]).standard_normal(50) * (r + 1)
    mixer = Gossip(topology, p, r, seed=2)
    X = _gathered(mpi_comm, x)
    mean, first = consensus_distance(comm, x)
    np.testing.assert_allclose(mean, X.mean(0), rtol=1e-12, atol=1e-14)
    assert first == pytest.approx(((X - X.mean(0)) ** 2).sum(1).mean(), rel=1e-12)
    distances = [first]
    for step in range(40):
        weights = mixer.row(step)
        x = mixer.combine(x, weights, mixer.exchange(comm, x, weights))
        distances.append(consensus_distance(comm, x)[1])
    # W symmetric and doubly stochastic: ||X - mean||^2 never grows (down to rounding of the mean)
    assert all(b <= a * (1 + 1e-12) + 1e-24 * first for a, b in zip(distances, distances[1:])), distances
    if p > 1:
        assert distances[-1] < 1e-3 * first
    comm.Free()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_gossip_training_converges_and_reports_consensus(world, topology):
    comm, data = world
    trainer, w = fit(comm, data, optimizer="sgd", lr=0.05, momentum=0.9, epochs=4, sync="gossip",
                     topology=topology)
    assert trainer.final[0] < 0.15
    np.testing.assert_array_equal(comm.comm.bcast(w), w)
    distances = [row["consensus"] for row in trainer.history]
    assert len(distances) == 4 and all(d >= 0 for d in distances)
    if comm.size == 1:
        assert distances == [0.0] * 4


def test_topology_needs_gossip(world):
    comm, data = world
    with pytest.raises(ValueError, match="--topology applies to --sync gossip"):
        make_trainer(comm, data, optimizer="sgd", topology="torus")
    with pytest.raises(ValueError, match="unknown topology"):
        make_trainer(comm, data, optimizer="sgd", sync="gossip", topology="star")
