"""The sparse wire format: one message of (index, value) pairs whose size tells their count.

A message is a 16-byte head (the first index and the width of the gaps, int64 each), the
values, then the gaps between consecutive indices: uint16 when they all fit (at 1% kept
they are about 100 apart: 6 bytes a float32 pair instead of 8), else the index type.
No pairs is an empty message.
"""
import numpy as np

HEAD = 16   # bytes before a message's pairs: the first index and the width of the gaps, int64


def encode(idx, vals, buf, index, work):
    """Pack pairs (``idx`` in increasing order) into the bytes ``buf``; the bytes used, none
    for no pairs.  ``index`` is the gaps' type when uint16 cannot hold them; ``work``: int64
    scratch of len(idx) (a fresh array would pay its page faults on every call)."""
    c = len(idx)
    if not c:
        return 0
    gaps = work[:c]
    gaps[0] = 0
    np.subtract(idx[1:], idx[:-1], out=gaps[1:])
    width = np.dtype(np.uint16 if gaps.max() < 2**16 else index)
    buf[:HEAD].view(np.int64)[...] = idx[0], width.itemsize
    buf[HEAD:HEAD + vals.nbytes].view(vals.dtype)[...] = vals
    end = HEAD + vals.nbytes + c * width.itemsize
    buf[HEAD + vals.nbytes:end].view(width)[...] = gaps
    return end


def decode(buf, dtype, work):
    """(int64 indices in ``work``, values) of the pairs ``encode`` packed into ``buf``."""
    if not len(buf):
        return work[:0], buf.view(dtype)
    first, width = (int(v) for v in buf[:HEAD].view(np.int64))
    split = HEAD + (len(buf) - HEAD) // (dtype.itemsize + width) * dtype.itemsize
    idx = work[:(split - HEAD) // dtype.itemsize]
    np.cumsum(buf[split:].view(f"u{width}" if width < 8 else np.int64), dtype=np.int64, out=idx)
    idx += first
    return idx, buf[HEAD:split].view(dtype)
