"""Bruck's all-to-all: ceil(lg p) messages per rank, each carrying about half the data.

Steps: rank r lays out its blocks rotated, position i holding the block for rank (r+i) mod p.
In step k = 1, 2, 4, ... < p it sends the blocks at every position with bit k set to rank
(r+k) mod p, packed, and receives as many from rank (r-k) mod p into the same positions.  A
block at position i has then moved i ranks on, to its destination, once the steps of all of
i's bits have run; so position i ends holding the block from rank (r-i) mod p, which a step
whose k is i's highest bit writes straight to its place in ACC.  The own block (position 0)
never moves.

Restrictions: every rank's block of the same size (Alltoall, not Alltoallv).  Each block
travels up to ceil(lg p) times and is packed and unpacked on the way: it wins where the
messages are small and their number, not their bytes, sets the time (MPICH uses it for short
messages).  Scratch: p + 2 floor(p/2) blocks.

Cost: ceil(lg p) (alpha + (n/2) beta), for n bytes sent by each rank in all.

Bytes sent per rank: at most ceil(lg p) n/2; exactly (lg p) n/2 when p is a power of two.
"""
from ..schedule import ACC, IN, TMP
from ._cost import lg


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma):
    """The header's Cost for p ranks and n bytes."""
    return lg(p) * (alpha + n / 2 * beta)


def _runs(positions):
    """(first, length) of each run of consecutive positions."""
    runs = []
    for i in positions:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return runs


def alltoall_bruck(s, sends, recvs):
    """Block j of IN (``sends[j]``: offset, count; every count the same) to rank j, rank j's
    block for this rank into ``recvs[j]`` of ACC."""
    p, r = s.size, s.rank
    b = sends[r][1]
    most = p // 2  # positions with a given bit set, at most
    rotated, packed, got = 0, p * b, (p + most) * b  # TMP: the positions, the send, the receive
    # Positions 1 .. p-r-1 come from blocks r+1 .. p-1 of IN, positions p-r .. p-1 from 0 .. r-1.
    s.copy((TMP, rotated + b, (p - 1 - r) * b), (IN, sends[(r + 1) % p][0], (p - 1 - r) * b))
    s.copy((TMP, rotated + (p - r) * b, r * b), (IN, sends[0][0], r * b))
    k = 1
    while k < p:
        runs = _runs([i for i in range(1, p) if i & k])
        moving = sum(n for _, n in runs)
        if len(runs) == 1:
            send = (TMP, rotated + runs[0][0] * b, moving * b)
        else:
            at = packed
            for first, n in runs:
                s.copy((TMP, at, n * b), (TMP, rotated + first * b, n * b))
                at += n * b
            send = (TMP, packed, moving * b)
        s.sendrecv((r + k) % p, send, (r - k) % p, (TMP, got, moving * b))
        at = got
        for first, n in runs:
            if first == k:
                # Positions k .. 2k-1 have no higher bit: each block is at its destination.
                for i in range(first, first + n):
                    s.copy((ACC, *recvs[(r - i) % p]), (TMP, at + (i - first) * b, b))
            else:
                s.copy((TMP, rotated + first * b, n * b), (TMP, at, n * b))
            at += n * b
        k <<= 1
    s.copy((ACC, *recvs[r]), (IN, *sends[r]))
