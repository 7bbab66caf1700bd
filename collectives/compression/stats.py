"""What one compressed all-reduce did on a rank: its shape, bytes sent, and time per phase."""
import contextlib
import time


class Stats:
    """What one compressed all-reduce did on this rank: its shape, the bytes it sent (to other
    ranks; to other nodes only in the "/node" shapes, whose intra-node traffic goes through
    shared memory), and seconds spent compressing, communicating and decompressing."""

    __slots__ = ("shape", "wire_bytes", "compress_s", "communicate_s", "decompress_s")

    def __init__(self, shape):
        self.shape, self.wire_bytes = shape, 0
        self.compress_s = self.communicate_s = self.decompress_s = 0.0

    def __repr__(self):
        return (f"<Stats {self.shape}: {self.wire_bytes} B sent, compress {self.compress_s * 1e3:.3f} ms, "
                f"communicate {self.communicate_s * 1e3:.3f} ms, decompress {self.decompress_s * 1e3:.3f} ms>")

    @contextlib.contextmanager
    def timing(self, phase):
        """Add the block's wall time to ``<phase>_s``."""
        t = time.perf_counter()
        yield
        setattr(self, f"{phase}_s", getattr(self, f"{phase}_s") + time.perf_counter() - t)
