"""Block layouts of Allgather(v), Gather(v) and Scatter(v).

A buffer of a v-variant holds ``counts[i]`` elements for rank i at ``displs[i]``.  The
schedules want the blocks in rank order from offset 0; ``pack`` gives them so (the buffer
itself when they already lie so, else a scratch copy) and ``unpack`` puts them back.
"""
from .buffers import parse
from .executor import buffer
from .schedule import blocks, displacements


def root_blocks(spec, name, size, writable, vector):
    """The root's (array, counts, displs) in elements from its Gather(v)/Scatter(v) spec."""
    if not vector:
        arr, total, _ = parse(spec, name, writable=writable, blocks=size)
        if total % size:
            raise ValueError(f"{name}: {total} elements do not split evenly over {size} ranks")
        counts = (total // size,) * size
        return arr, counts, displacements(counts)
    arr, counts, displs = parse(spec, name, writable=writable, vector=True)
    if counts is None:
        if arr.size % size:
            raise ValueError(f"{name}: {arr.size} elements do not split evenly over {size} ranks; "
                             "give counts, e.g. [buf, (counts, displs), MPI.DOUBLE]")
        counts, displs = blocks(arr.size, size)
    if len(counts) != size:
        raise ValueError(f"{name}: {len(counts)} counts for a communicator of size {size}")
    return arr, counts, displs


def _move(dst, dst_displs, src, src_displs, counts, ranks):
    for i in ranks:
        dst[dst_displs[i]:dst_displs[i] + counts[i]] = src[src_displs[i]:src_displs[i] + counts[i]]


def pack(comm, arr, counts, displs, ranks=None):
    """``arr``'s blocks in rank order from offset 0: ``arr`` itself when they lie so already,
    else a scratch buffer of ``comm`` holding the blocks of ``ranks`` (default: every rank)."""
    at = displacements(counts)
    if displs == at:
        return arr[:sum(counts)]
    packed = buffer(comm, "pack", sum(counts) * arr.itemsize).view(arr.dtype)
    _move(packed, at, arr, displs, counts, range(len(counts)) if ranks is None else ranks)
    return packed


def unpack(packed, arr, counts, displs):
    """Put the blocks of ``packed`` (from ``pack``) at their displacements in ``arr``."""
    at = displacements(counts)
    if displs != at:
        _move(arr, displs, packed, at, counts, range(len(counts)))


__all__ = ["pack", "root_blocks", "unpack"]
