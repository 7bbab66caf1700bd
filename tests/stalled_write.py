"""``python tests/stalled_write.py N TRAIN-ARGS...``: ``python -m collectives train`` whose Nth
durable write (collectives.train.checkpoint.write_file, counted from 1; rank 0 writes the
checkpoints) stops for good half-way through its temporary file, so a test can kill the job
mid-write and see what a torn write leaves behind."""
import io
import sys
import time

from collectives.__main__ import main
from collectives.train import checkpoint

STOP_AT = int(sys.argv[1])
real = checkpoint.write_file
writes = 0


def stalling(path, write):
    """write_file, but the STOP_AT-th call writes half its data, then waits to be killed."""
    global writes
    writes += 1
    if writes != STOP_AT:
        return real(path, write)
    data = io.BytesIO()
    write(data)
    data = data.getbuffer()
    with open(f"{path}.tmp", "wb") as f:
        f.write(data[:len(data) // 2])
        f.flush()
        while True:
            time.sleep(1)


checkpoint.write_file = stalling
sys.exit(main(["train", *sys.argv[2:]]))
