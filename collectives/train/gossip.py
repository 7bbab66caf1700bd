"""Gossip averaging: neighbour graphs, Metropolis-Hastings mixing weights, one mixing step.

A gossip step replaces each rank's parameters x_i by sum_j W_ij x_j over its neighbours j
and itself.  W holds Metropolis-Hastings weights on an undirected graph,

    W_ij = 1 / (1 + max(deg i, deg j))  for an edge i-j,   W_ii = 1 - sum_{j != i} W_ij,

which make W symmetric and doubly stochastic on any graph, so the ranks' average is kept
at every step and the models approach it (the consensus distance shrinks) when the graph,
or the union of the graphs over a few steps, is connected.  Weights are exact fractions.

Topologies (``--topology``):

* ``ring``         ranks i and i + 1 (mod p);
* ``torus``        a rows x cols grid with wrap-around, rows the largest divisor of p not
                   above sqrt(p) (a prime p gives the ring);
* ``exponential``  i and i + 2^k (mod p) for 2^k < p, taken undirected: degree about 2 log2 p;
* ``matching``     a random perfect matching drawn anew every step from a generator seeded
                   by the seed and the step, the same on every rank without any message
                   (an odd p leaves one rank out, which keeps its parameters).
"""
from fractions import Fraction

import numpy as np
from mpi4py import MPI

from .. import p2p

TOPOLOGIES = ("ring", "torus", "exponential", "matching")


def grid(p):
    """(rows, cols) of the 2-D torus on ``p`` ranks: rows the largest divisor of p with rows^2 <= p."""
    rows = max(r for r in range(1, int(np.sqrt(p)) + 1) if p % r == 0)
    return rows, p // rows


def graph(topology, p, step=0, seed=0):
    """The neighbours of each of the ``p`` ranks (a list of sets) at ``step``."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; one of {', '.join(TOPOLOGIES)}")
    adj = [set() for _ in range(p)]

    def link(a, b):
        if a != b:
            adj[a].add(int(b))
            adj[b].add(int(a))

    if topology == "ring":
        for i in range(p):
            link(i, (i + 1) % p)
    elif topology == "torus":
        rows, cols = grid(p)
        for i in range(p):
            r, c = divmod(i, cols)
            link(i, (r + 1) % rows * cols + c)
            link(i, r * cols + (c + 1) % cols)
    elif topology == "exponential":
        hop = 1
        while hop < p:
            for i in range(p):
                link(i, (i + hop) % p)
            hop *= 2
    else:
        order = np.random.default_rng([seed, step, 0x4D41]).permutation(p)
        for a, b in zip(order[0::2], order[1::2]):
            link(a, b)
    return adj


def row(adj, i):
    """Rank ``i``'s row of the Metropolis-Hastings matrix: {rank: Fraction} over i and its neighbours."""
    out = {j: Fraction(1, 1 + max(len(adj[i]), len(adj[j]))) for j in adj[i]}
    out[i] = 1 - sum(out.values(), Fraction(0))
    return out


def matrix(adj):
    """The whole Metropolis-Hastings matrix as a list of lists of Fractions."""
    p = len(adj)
    rows = [row(adj, i) for i in range(p)]
    return [[r.get(j, Fraction(0)) for j in range(p)] for r in rows]


class Gossip:
    """This rank's gossip: its row of W at each step, the exchange and the weighted sum."""

    def __init__(self, topology, size, rank, seed=0):
        self.topology, self.size, self.rank, self.seed = topology, size, rank, seed
        self.fixed = None if topology == "matching" else row(graph(topology, size), rank)

    def row(self, step):
        """{rank: weight} of this rank's row of W at ``step`` (float weights)."""
        exact = self.fixed or row(graph(self.topology, self.size, step, self.seed), self.rank)
        return {j: float(v) for j, v in exact.items()}

    def exchange(self, comm, w, weights):
        """Send ``w`` to the neighbours in ``weights`` and receive theirs: {rank: array}."""
        peers = sorted(set(weights) - {self.rank})
        inbox = {q: np.empty_like(w) for q in peers}
        reqs = [p2p.receive(comm, inbox[q], q) for q in peers]
        p2p.wait(reqs + [p2p.push(comm, w, q) for q in peers])
        return inbox

    def combine(self, w, weights, inbox):
        """sum_j W_ij x_j: this rank's ``w`` and the neighbours' arrays in ``inbox`` (a new array)."""
        out = weights[self.rank] * w
        for q in sorted(inbox):
            out += weights[q] * inbox[q]
        return out


def consensus_distance(comm, w):
    """(average of ``w`` over the ranks of mpi4py-like ``comm``, mean over ranks of ||w_i - average||^2)."""
    mean = w.copy()
    comm.Allreduce(MPI.IN_PLACE, mean)
    mean /= comm.Get_size()
    d = w - mean
    dist = np.array([d @ d])
    comm.Allreduce(MPI.IN_PLACE, dist)
    return mean, float(dist[0]) / comm.Get_size()
