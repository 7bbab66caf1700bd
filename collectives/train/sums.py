"""Sums over the ranks as the strategies make them: timed all-reduces (MPI's own or
collectives'), the wait for the slowest peer before an exchange, and compressed sums with
their error-feedback state (``Compression``, which a checkpoint holds)."""
import numpy as np
from mpi4py import MPI

from .. import compression, p2p
from . import checkpoint as ckpt


class Compression:
    """The run's compressor (None for ``compress="none"``) and its error-feedback state per
    compressed vector (``states``: key -> ErrorFeedback; ddp has one per bucket)."""

    def __init__(self, comm, o, n):
        self.comm, self.n = comm, n   # n: the model's parameters
        # "none" is the plain all-reduce (no compression pass at all)
        self.compressor = (None if o["compress"] == "none"
                           else compression.COMPRESSORS[o["compress"]](error_feedback=o["error_feedback"]))
        self.states = {}

    def sum(self, v, key=None):
        """Sum ``v`` over the ranks through the compressor, with the error-feedback state of ``key``."""
        out, self.states[key] = compression.allreduce(self.comm, v, self.compressor, self.states.get(key))
        return out

    def state_dict(self):
        """What ``--compress`` carries from step to step (collective): the compressor's step
        counter (its seeds) and, on rank 0, every rank's error-feedback residuals, stacked: the
        one of its gradient, and the one of its re-compression of the chunk it sums (placed
        in a whole-length vector, with the chunk's bounds)."""
        if self.compressor is None:
            return {}
        state = {"compress_step": self.compressor.step}
        ef = self.states.get(None)
        residual = ef.residual if ef is not None else None
        if ckpt.anyone(self.comm.comm, ef is not None and (residual is not None or ef.server is not None)):
            n = self.n
            mine = {"r": residual if residual is not None else np.zeros(n), "s": np.zeros(n), "span": np.zeros(2)}
            if ef.server is not None:
                lo, hi = ef.server_span
                mine["s"][lo:hi] = ef.server
                mine["span"][:] = lo, hi
            rows = ckpt.gather(self.comm.comm, mine, lambda r: {"r": (n,), "s": (n,), "span": (2,)})
            if rows is not None:
                state["residuals"] = np.stack([row["r"] for row in rows])
                state["owner_residuals"] = np.stack([row["s"] for row in rows])
                state["owner_spans"] = np.stack([row["span"] for row in rows])
        return state

    def load_state_dict(self, state, nranks):
        """Restore what ``state_dict`` saved (taking it out of ``state``), written by ``nranks``
        ranks.  At another rank count the chunks differ: every rank gets an equal share of all
        the residuals summed, so what compression had not yet sent is still sent, once."""
        step, rows = state.pop("compress_step", None), state.pop("residuals", None)
        owners, spans = state.pop("owner_residuals", None), state.pop("owner_spans", None)
        if self.compressor is None:
            return
        self.compressor.step = step or 0
        if rows is None:
            return
        ef = self.states[None] = compression.ErrorFeedback()
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        if nranks != size:
            ef.residual = (rows.sum(axis=0) + owners.sum(axis=0)) / size
            return
        ef.residual = np.array(rows[rank], np.float64)
        lo, hi = (int(v) for v in spans[rank])
        if hi > lo:
            ef.server, ef.server_span = np.array(owners[rank][lo:hi], np.float64), (lo, hi)


class Sums:
    """The all-reduces of a run over collectives.Comm ``comm``, timed on ``clock``; ``n`` is the
    number of parameters (the length of the error-feedback residuals a checkpoint holds)."""

    def __init__(self, comm, o, clock, n):
        self.comm, self.o, self.clock = comm, o, clock
        self.compression = Compression(comm, o, n)

    def synchronise(self, comm=None, peers=None):
        """With ``measure_wait``, wait for the peers before an exchange, timed as wait.

        A barrier over ``comm`` (default: the run's), or zero-byte messages to and from
        ``peers``: the time there is spent waiting for the slowest of them (plus one small
        exchange's latency), so the exchange after it times communication alone.
        """
        if not self.o["measure_wait"]:
            return
        comm = comm or self.comm
        with self.clock("wait"):
            if peers is None:
                comm.Barrier()
            else:
                empty = np.empty(0)
                p2p.wait([p2p.receive(comm, empty, q) for q in peers] + [p2p.push(comm, empty, q) for q in peers])

    def allreduce(self, buf, comm=None):
        """Sum ``buf`` over the ranks of ``comm`` (default: the run's) in place, timed as communication."""
        comm = comm or self.comm
        self.synchronise(comm)
        with self.clock("comm"):
            self.reducer(comm, "Allreduce")(buf)
        return buf

    def reducer(self, comm, method):
        """``comm``'s in-place ``method`` (Allreduce or Iallreduce) as f(buf): MPI's own call for
        ``allreduce="native"``, else ours with the chosen algorithm."""
        if self.o["allreduce"] == "native":
            return lambda buf: getattr(getattr(comm, "comm", comm), method)(MPI.IN_PLACE, buf)
        return lambda buf: getattr(comm, method)(MPI.IN_PLACE, buf, algorithm=self.o["allreduce"])

    def gradient(self, g):
        """Sum a gradient over ranks, through the compressor when one is chosen."""
        if self.compression.compressor is None:
            return self.allreduce(g)
        self.synchronise()
        with self.clock("comm"):
            return self.compression.sum(g)

    def average(self, w):
        """Mean of ``w`` over the ranks (a new array)."""
        return self.allreduce(w.copy()) / self.comm.Get_size()

    def compressed_average(self, w, anchor):
        """``anchor`` (the last average, the same on every rank) plus the compressed mean of the
        ranks' changes since it; becomes the new ``anchor`` and is returned."""
        self.synchronise()
        with self.clock("comm"):
            anchor += self.compression.sum(w - anchor) / self.comm.Get_size()
        return anchor
