"""Schedules walked over a node map: the rounds of every rank's schedule of an all-reduce, lined
up into levels, and the time of those levels on a cluster's links.

The cost model of the emulated cluster (bench/net/model_check.py's predictions beside
``make bench-net``'s measurements), and the reference tests/test_node.py and tests/test_cost.py
check the node-aware all-reduces and the schedules against.  The flat model of the algorithms'
headers is model.py's.
"""
import importlib


# The testbed model: each algorithm's own schedule walked over a node map.
#
# The header formulas above are closed forms for a flat network.  On nodes, which messages
# stay in shared memory and how many share a node's link depend on which rank talks to which
# in each step, and that is exactly what the schedules hold as data (collectives.schedule).
# So instead of a second formula per algorithm, the model builds every rank's schedule with
# the same builders the executor runs, cuts it into rounds (a Sendrecv row, or Isend/Irecv rows
# up to their Waitall), lines the rounds of all ranks up into levels (a message's send and
# receive rounds are the same level; a rank's rounds follow each other) and sums the levels:
#
#   level time = max over ranks of (max over its messages of the message's time
#                                   + gamma x bytes it combines or copies in that level)
#   message time = intra-node alpha (+ the pipeline's start-up above the eager size)
#                  + (bytes the sender puts in shared memory this level) x intra-node beta,
#                  on one node;
#                = inter-node alpha + the longer of (its own bytes x the in-burst beta) and
#                  (bytes crossing the busier of the two links it uses, the sender node's
#                  uplink and the receiver node's downlink, this level, less what that link's
#                  token bucket still holds) x inter-node beta, between nodes (tbf shapes each
#                  link in each direction; its bucket holds the burst and refills at the link
#                  rate while the levels run).  Within the bucket tbf does not hold packets
#                  back: a message then costs what the two ends' TCP stacks take for its own
#                  bytes, in parallel with the other messages on the link (measured: two
#                  pairs exchanging 64 KiB across one link at once take as long as one pair,
#                  0.20 against 0.19 ms; from 1 MiB they take twice as long).
#
# A call also has a fixed cost the walk leaves out: the Python and Cython entry, argument
# handling, the node-aware algorithms' three phase calls and their wrapper, and the latency of
# oversubscribed ranks (4 on 2 cores) to answer each other beyond the fitted alpha.  It does not
# depend on the size, so ``fixed_cost`` takes it from the same launch's timing of the same call
# at a small size (measure.py times every algorithm at 4 KiB), where it is most of the time.
#
# The node-aware all-reduces (collectives.node) are the same walk over the concatenated
# schedules of their phases on the node and lane communicators, each phase the algorithm
# ``auto`` picks there (registry.decide, check off), so concurrent lanes share the node links.

class Links:
    """Model parameters: (alpha s, beta s/byte) within a node and between nodes, gamma s/byte,
    the links' token bucket: ``burst`` bytes pass at ``fast`` s/byte instead of beta, and the
    shared-memory pipeline: a message within a node of more than ``eager`` bytes costs
    ``step`` = (first, later) s more than alpha, ``first`` in a call's first level, ``later``
    in the others.

    The testbed's tbf lets a burst through at the speed of the TCP stack and refills it at the
    link rate (1/beta); every link starts full (measure.py leaves the links idle before each
    sample).  ``fast`` is per message: the messages sharing a link within its burst do not
    slow each other (the comment above).  burst 0 is a plain alpha-beta link.

    MPICH moves a shared-memory message of up to one eager cell (8064 B of payload measured
    under MPICH 5.0.2: 8064 B took 15 us, 8128 B 29 us, 4 ranks bound 2 per core) in that cell;
    a longer one goes by its pipeline, whose start waits for the receiver to take part.  With
    ranks sharing cores that start costs a turn of the scheduler, once per message whatever its
    length.  It costs most in a call's first level, right after the Barrier that starts a
    timed call, when the receiver may not be running yet (an eager message waits in its cell
    instead): 24-88 us in twelve bound 2x2 testbed launches (single exchanges after a
    Barrier), against 10-12 us between the exchanges of a back-to-back train.  (0, 0): no such
    term.
    """

    def __init__(self, intra, inter, gamma, burst=0, fast=0.0, step=(0.0, 0.0), eager=0):
        self.intra, self.inter, self.gamma, self.burst, self.fast = intra, inter, gamma, burst, fast
        self.step, self.eager = step, eager


def rounds(steps, itemsize):
    """A rank's schedule rows as rounds [sends, recvs, bytes combined or copied], sends and recvs
    lists of (peer, bytes): a Sendrecv row is a round, so are Isend/Irecv rows up to their
    Waitall; a combine or copy (one pass over memory each) counts to the round open or last
    closed (a new round if there is none)."""
    from collectives.schedule import COPY, IRECV, ISEND, NONE, REDUCE, SENDRECV, WAITALL

    out, open_ = [], None
    for kind, _, _, sc, dest, _, _, rc, source in steps.tolist():
        if kind == SENDRECV:
            out.append([[(dest, sc * itemsize)] if dest != NONE else [],
                        [(source, rc * itemsize)] if source != NONE else [], 0])
        elif kind in (ISEND, IRECV):
            if open_ is None:
                open_ = [[], [], 0]
                out.append(open_)
            if kind == ISEND:
                open_[0].append((dest, sc * itemsize))
            else:
                open_[1].append((source, rc * itemsize))
        elif kind == WAITALL:
            open_ = None
        elif kind in (REDUCE, COPY):
            if open_ is None and not out:
                out.append([[], [], 0])
            (open_ or out[-1])[2] += sc * itemsize
    return out


def _phase(algo, members, args, itemsize):
    """{global rank: rounds} of ``algo``'s schedule on the communicator of ranks ``members``."""
    return {rank: _member(algo, members, sub, args, itemsize) for sub, rank in enumerate(members)}


def _member(algo, members, sub, args, itemsize):
    """The rounds of ``algo``'s schedule at rank ``sub`` of the communicator of ranks ``members``,
    its peers named by their global ranks."""
    from collectives.registry import schedule

    steps = schedule(algo.name, sub, len(members), *args)[0]
    return [[[(members[q], b) for q, b in sends], [(members[q], b) for q, b in recvs], red]
            for sends, recvs, red in rounds(steps, itemsize)]


def _auto(collective, size, count, nbytes, uniform=True):
    from collectives.registry import Shape, Topology, decide

    return decide(collective, "auto", Shape(count, nbytes, uniform), Topology(size))[0]


def _call(phase, size, itemsize):
    """(Algorithm, builder arguments, schedule element size) of the schedule that the Comm method
    of ``phase`` (collectives.node.Phase) plans on a communicator of ``size`` ranks, check off:
    the choice and arguments collectives.jobs and the fast path give; Bcast and Allgatherv move
    bytes."""
    from collectives.plans import plan_args

    blocked = isinstance(phase.counts, tuple)
    total = sum(phase.counts) if blocked else phase.counts
    nbytes = total * itemsize
    uniform = not blocked or len(set(phase.counts)) == 1
    if phase.method == "Reduce_scatter":
        algo = _auto("reduce_scatter", size, total, nbytes, uniform)
        return algo, plan_args(algo, (phase.counts, not phase.in_place), True), itemsize
    if phase.method == "Allreduce":
        algo = _auto("allreduce", size, total, nbytes)
        return algo, plan_args(algo, (total,), not phase.in_place), itemsize
    if phase.method == "Allgatherv":
        return _auto("allgather", size, total, nbytes, uniform), (tuple(c * itemsize for c in phase.counts),), 1
    if phase.method == "Reduce":
        return _auto("reduce", size, total, nbytes), (total, phase.root), itemsize
    if phase.method == "Bcast":
        return _auto("bcast", size, nbytes, nbytes), (nbytes, phase.root), 1
    raise ValueError(f"no schedule for a {phase.method} phase")


def allreduce_rounds(name, nodes, k, count, itemsize=4):
    """{rank: rounds} of all-reducing ``count`` elements with algorithm ``name`` (full name) on
    ``nodes`` nodes of ``k`` ranks (rank = node x k + local index), out of place; a node-aware
    algorithm by the phases its module describes (``phases``), which its run reads too."""
    from collectives.plans import plan_args
    from collectives.registry import NODE_ALGORITHMS, select

    p, nbytes = nodes * k, count * itemsize
    if name not in {a.name for a in NODE_ALGORITHMS["allreduce"]}:
        algo = select("allreduce", name, p, count, nbytes)
        if algo.name != name:
            raise ValueError(f"{name} does not apply at {p} ranks")
        return _phase(algo, list(range(p)), plan_args(algo, (count,), True), itemsize)
    if nodes < 2 or k < 2:
        raise ValueError(f"{name} is node-aware: it needs several nodes of several ranks, not {nodes}x{k}")
    phases = importlib.import_module(f"collectives.algorithms.{name}").phases
    out = {r: [] for r in range(p)}
    for r in range(p):
        node, local = divmod(r, k)
        for phase in phases(count, k, local):
            members, sub = {"intra": (range(node * k, (node + 1) * k), local),
                            "lane": (range(local, p, k), node)}[phase.comm]
            algo, args, size = _call(phase, len(members), itemsize)
            out[r] += _member(algo, members, sub, args, size)
    return out


def levels(ranks):
    """Level of each round of ``ranks`` ({rank: rounds}): [[level per round] per rank], the
    least that puts both ends of every message in one level and a rank's rounds in order."""
    sent, received = {}, {}
    for r, rows in ranks.items():
        for i, (sends, recvs, _) in enumerate(rows):
            for q, _ in sends:
                sent.setdefault((r, q), []).append(i)
            for q, _ in recvs:
                received.setdefault((q, r), []).append(i)
    if {k: len(v) for k, v in sent.items()} != {k: len(v) for k, v in received.items()}:
        raise ValueError("the schedules' sends and receives do not match")
    pairs = [((r, i), (q, j)) for (r, q), at in sent.items() for i, j in zip(at, received[(r, q)])]
    level = {r: list(range(len(rows))) for r, rows in ranks.items()}
    for _ in range(sum(len(rows) for rows in ranks.values()) + 1):
        changed = False
        for (r, i), (q, j) in pairs:
            if level[r][i] != level[q][j]:
                level[r][i] = level[q][j] = max(level[r][i], level[q][j])
                changed = True
        for row in level.values():
            for i in range(1, len(row)):
                if row[i] <= row[i - 1]:
                    row[i] = row[i - 1] + 1
                    changed = True
        if not changed:
            return level
    raise ValueError("the schedules' rounds cannot be lined up (a wait cycle)")


def walk(ranks, node_of, links):
    """Predicted seconds of the rounds ``ranks`` ({rank: rounds}) with rank r on node
    ``node_of[r]`` under ``links`` (the level sum of the comment above: a message's own bytes
    at links.fast, or its link's bytes beyond the token bucket at the inter-node beta)."""
    level = levels(ranks)
    at_level = [[] for _ in range(1 + max((max(row) for row in level.values() if row), default=-1))]
    for r, rows in ranks.items():
        for i, row in enumerate(rows):
            at_level[level[r][i]].append((r, row))
    alpha, beta = links.inter
    tokens = {}  # ("up" | "down", node) -> bytes left in its bucket
    total = 0.0
    for depth, entries in enumerate(at_level):
        step = links.step[depth > 0]
        load = {}  # ("shm", rank) / ("up" | "down", node) -> bytes this level
        for r, (sends, _, _) in entries:
            for q, nbytes in sends:
                for key in _uses(r, q, node_of):
                    load[key] = load.get(key, 0) + nbytes
        wire = {key: (links.intra[1] * n if key[0] == "shm" else
                      (n - tokens.setdefault(key, links.burst)) * beta)
                for key, n in load.items()}
        messages, local = {}, {}  # rank -> its slowest message, its bytes combined or copied
        for r, (sends, _, nbytes) in entries:
            local[r] = local.get(r, 0) + nbytes
            for q, size in sends:
                keys = _uses(r, q, node_of)
                t = (links.intra[0] + step * (size > links.eager) + wire[keys[0]] if keys[0][0] == "shm" else
                     alpha + max(size * links.fast, *(wire[key] for key in keys)))
                for end in (r, q):
                    messages[end] = max(messages.get(end, 0), t)
        took = max((messages.get(r, 0) + links.gamma * local.get(r, 0) for r in messages.keys() | local.keys()),
                   default=0)
        for key in tokens:
            tokens[key] = min(links.burst, tokens[key] - load.get(key, 0) + took / beta)
        total += took
    return total


def _uses(r, q, node_of):
    """What a message from rank r to rank q loads: the sender's shared memory on one node, else
    the sender node's uplink and the receiver node's downlink."""
    x, y = node_of[r], node_of[q]
    return [("shm", r)] if x == y else [("up", x), ("down", y)]


def predict(name, nodes, k, nbytes, links, itemsize=4, fixed=0.0):
    """Predicted seconds of all-reduce algorithm ``name`` over ``nbytes`` on ``nodes`` x ``k``,
    plus the call's ``fixed`` cost (``fixed_cost``)."""
    ranks = allreduce_rounds(name, nodes, k, nbytes // itemsize, itemsize)
    return walk(ranks, [r // k for r in range(nodes * k)], links) + fixed


def fixed_cost(name, nodes, k, small, measured, links, itemsize=4):
    """Seconds of an all-reduce call of algorithm ``name`` that the walk leaves out (the
    comment above ``Links``): ``measured``, the call's time at ``small`` bytes, less the walk's
    time there."""
    return measured - predict(name, nodes, k, small, links, itemsize)
