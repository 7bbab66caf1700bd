"""Segmented (pipelined) ring all-reduce, for large messages.

Steps: as allreduce_ring (ring reduce-scatter of p near-equal blocks, then ring all-gather),
but in the reduce-scatter each block moves as a train of SEGMENT-element messages received
alternately into two scratch slots, and segment j is combined while segment j+1 is on the
wire (reduce_scatter_ring with ``segment``).  Scratch is two segments instead of a block of
n/p: the combine reads a segment that has just arrived and is still in cache, so the scratch
traffic never reaches DRAM, and the combine overlaps the transfer.  The all-gather writes
straight into place and combines nothing, so it keeps whole blocks: cutting them would only
add message latency.  Like allreduce_ring it reads the caller's input from IN where each
block is first touched, so the input is never copied into ACC first.

SEGMENT is an element count, not a byte count: a schedule is built once per element count
and serves every dtype.  16 Ki elements is 64 KiB of float32 and 128 KiB of float64; two
slots stay within a core's L2 cache.

Restrictions: none.  Pays (p-1) ceil(n / (p SEGMENT)) message latencies in the first phase,
so it is for messages of many segments per block.

Cost: (p-1) (ceil(n / (p m)) + 1) alpha + 2 ((p-1)/p) n beta + ((p-1)/p) n gamma, m = SEGMENT,
with most of the gamma term overlapped.

Bytes sent per rank: 2 ((p-1)/p) n by every rank, as allreduce_ring.
"""
from ..schedule import blocks
from .allgather_ring import allgather_ring
from .reduce_scatter_ring import reduce_scatter_ring

SEGMENT = 16 << 10


STEPS = "exchange"  # every rank sends and receives at once in each step


def cost(p, n, alpha, beta, gamma, itemsize=4):
    """The header's Cost for p ranks and n bytes (float32 segments)."""
    m = SEGMENT * itemsize
    return ((p - 1) * (-(-n // (p * m)) + 1) * alpha + 2 * (p - 1) / p * n * beta
            + (p - 1) / p * n * gamma)


def allreduce_ring_segmented(s, count):
    """All-reduce IN into ACC: ring reduce-scatter in segments, then ring all-gather."""
    counts, _ = blocks(count, s.size)
    reduce_scatter_ring(s, counts, segment=SEGMENT)
    allgather_ring(s, counts)
