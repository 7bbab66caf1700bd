"""The sparse all-gather: every rank's packed pairs to every rank, node-aware across nodes.

Raw Isend/Irecv of bytes on the lane's and the node's private duplicates, one message per
rank's pairs (collectives.compression.wire) under constants.TAG_PAIRS; a receive takes a
whole slot and the message's size tells its count.
"""
from mpi4py import MPI

from ..constants import TAG_PAIRS


def gather_pairs(grid, local, intra, lane, room, slot, size, stats):
    """Every rank's packed pairs, in rank order (views of ``room``).

    ``grid[l, m]`` is the rank that is the l-th of its node (``intra``, None with one rank per
    node) and the m-th of its lane (``lane``); rank r's pairs arrive in ``room[r slot:]``, this
    rank's are there already (``size`` bytes).  This rank sends its pairs to the other ranks of
    its lane (one copy per other node) and of its node, and passes each lane arrival on to the
    other ranks of its node (shared memory) as it comes, in lane order, so one tag keeps them
    apart (MPI's messages from one sender do not overtake each other).  A node link carries
    each of its ranks' pairs N - 1 times instead of the flat all-gather's p - k: k times fewer
    bytes between nodes.  Receives take a whole slot: a message's size tells its count.
    """
    k, N = grid.shape
    me = lane.rank
    mine = int(grid[local, me])
    peers = [q for q in range(k) if q != local]
    others = [m for m in range(N) if m != me]

    def at(r, nbytes=slot):
        return room[r * slot:r * slot + nbytes]

    recv, sizes, status = {}, {mine: size}, MPI.Status()
    for m in others:
        recv[int(grid[local, m])] = lane._coll.Irecv([at(grid[local, m]), MPI.BYTE], m, TAG_PAIRS)
    for q in peers:
        for m in [me] + others:
            recv[int(grid[q, m])] = intra._coll.Irecv([at(grid[q, m]), MPI.BYTE], q, TAG_PAIRS)
    sends = [lane._coll.Isend([at(mine, size), MPI.BYTE], m, TAG_PAIRS) for m in others]
    sends += [intra._coll.Isend([at(mine, size), MPI.BYTE], q, TAG_PAIRS) for q in peers]
    stats.wire_bytes += len(others) * size
    for m in others:
        r = int(grid[local, m])
        recv.pop(r).Wait(status)
        sizes[r] = status.Get_count(MPI.BYTE)
        sends += [intra._coll.Isend([at(r, sizes[r]), MPI.BYTE], q, TAG_PAIRS) for q in peers]
    for r, req in recv.items():
        req.Wait(status)
        sizes[r] = status.Get_count(MPI.BYTE)
    MPI.Request.Waitall(sends)
    return [at(r, sizes[r]) for r in range(grid.size)]

