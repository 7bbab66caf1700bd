"""Naive all-to-all all-reduce.

Steps: every rank starts receives of the other p-1 vectors into scratch slots and sends its
own vector to every other rank (starting with its right neighbour, so the ranks do not all
send to rank 0 first), waits for all of them, then combines the p vectors in rank order,
x0 op x1 op ... op x_{p-1}: the same order on every rank, so every rank gets the same bits.

Restrictions: (p-1) n elements of scratch; the registry refuses it above
COLLECTIVES_MAX_SCRATCH.  One round of messages, so it can win for tiny vectors on few
ranks; it moves p-1 times the data of the ring.

Cost: (p-1) alpha + (p-1) n beta + (p-1) n gamma: a rank's p-1 messages are in flight at once,
but each still pays its start-up, so the model charges every one.

Bytes sent per rank: (p-1) n by every rank.
"""
from ..schedule import ACC, TMP


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return (p - 1) * (alpha + n * (beta + gamma))


def allreduce_all_to_all(s, count):
    """All-reduce ACC in place: everyone sends everyone its vector, then all combine in rank order."""
    p, r = s.size, s.rank

    def slot(i):
        return (ACC, 0, count) if i == r else (TMP, (i - (i > r)) * count, count)

    others = [(r + k) % p for k in range(1, p)]
    for i in others:
        s.irecv(i, *slot(i))
    for i in others:
        s.isend(i, ACC, 0, count)
    s.waitall()
    for i in range(1, p):
        s.reduce(slot(0), slot(i))
    s.copy((ACC, 0, count), slot(0))
