"""The star shared by the linear rooted algorithms: the root talks to every rank directly.

Gather and scatter are mirror images here.  Each non-root rank moves its own block, kept at
offset 0 of its buffer, in one blocking message to or from the root; the root starts all
p - 1 transfers at once over its buffer of every block in rank order, copies its own block
locally, and waits for them all.  Ranks with an empty block send no message.
"""
from ..schedule import displacements


def star(s, counts, root, whole, own, to_root):
    """One rank's steps of a linear rooted collective over blocks of ``counts`` elements.

    ``whole`` is the root's buffer of every block in rank order, ``own`` every rank's buffer
    of its own block; ``to_root`` is True when the blocks flow to the root (gather), False
    when they flow from it (scatter).  Only ``counts[s.rank]`` is read on a non-root.
    """
    r = s.rank
    if r != root:
        if counts[r]:
            (s.send if to_root else s.recv)(root, own, 0, counts[r])
        return
    displs = displacements(counts)
    start = s.irecv if to_root else s.isend
    for i, c in enumerate(counts):
        if i != root and c:
            start(i, whole, displs[i], c)
    mine, placed = (own, 0, counts[r]), (whole, displs[r], counts[r])
    s.copy(*((placed, mine) if to_root else (mine, placed)))
    s.waitall()
