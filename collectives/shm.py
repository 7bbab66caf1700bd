"""A shared-memory segment for the ranks of a Comm that share a node: when, how big, and making it.

A Comm whose ranks all sit on one node (collectives.node finds no other: a flat Comm, or the
node communicator of a node-aware one) maps one segment when it is made, and its collectives
run there (the ``*_shm*`` rows of collectives.registry; csrc/shm.c runs them), without MPI on
their path.  The segment is ``COLLECTIVES_SHM_BYTES`` per rank (two regions of half that);
larger messages go through it in rounds of constants.SHM_CHUNK bytes.

No segment is made, and the Comm runs its collectives point-to-point through MPI, when

* the Comm has one rank, or spans nodes (a lane between nodes, emulated nodes included);
* COLLECTIVES_SHM=0, or the NumPy fallback runs (COLLECTIVES_PUREPYTHON=1: its twins have no
  atomics to wait on shared memory with);
* COLLECTIVES_SHM=auto (the default) and the node holds more ranks than cores, as the launcher
  says (collectives._runtime.local_ranks): a rank that waits spins, then yields, and a rank
  that is not running cannot arrive; COLLECTIVES_SHM=1 makes the segment all the same;
* the segment cannot be made: no POSIX shared memory, /dev/shm too small for it.  One rank
  logs the reason once ("collectives" logger, INFO).

Every rank must decide alike, so making a Comm agrees on the decision (one ``allgather``) and
on the segment's name and size (one ``bcast``), and checks that every rank mapped it (one
``allgather``): three small collectives, plus ``Split_type`` to see that the ranks share
memory.  The cost is in docs/shm.md.
"""
import itertools
import logging
import os
import secrets

from mpi4py import MPI

from . import _runtime
from .constants import SHM_CHUNK

log = logging.getLogger("collectives")
_made = itertools.count()


def refusal(settings, size, pure, environ=None, cores=None):
    """Why this rank makes no segment for a Comm of ``size`` ranks on one node, or None."""
    if size < 2:
        return "one rank"
    if pure:
        return "the NumPy fallback runs (COLLECTIVES_PUREPYTHON=1)"
    if settings.shm == "0":
        return "COLLECTIVES_SHM=0"
    if settings.shm == "auto":
        ranks = _runtime.local_ranks(os.environ if environ is None else environ) or size
        cores = cores or os.cpu_count() or 1
        if ranks > cores:
            return f"the node holds {ranks} ranks on {cores} cores (COLLECTIVES_SHM=1 makes one all the same)"
    return None


def make(comm, settings, pure, chunk=SHM_CHUNK):
    """The Segment (collectives._shm) of mpi4py communicator ``comm``, whose ranks the caller
    takes to be on one node, or None; collective over ``comm``."""
    from ._shm import Segment, region_bytes

    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        return None
    why = refusal(settings, size, pure)
    if why is None:
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
        if shared.Get_size() != size:
            why = "its ranks do not all share memory"
        shared.Free()
    reasons = [r for r in comm.allgather(why) if r is not None]
    if reasons:
        if rank == 0 and not (len(reasons) == size and reasons[0] in ("COLLECTIVES_SHM=0", "one rank")):
            log.info("collectives: no shared segment for a Comm of %d ranks: %s", size, reasons[0])
        return None
    segment = failure = None
    if rank == 0:
        name = f"/collectives-{os.getpid()}-{next(_made)}-{secrets.token_hex(4)}"
        region = region_bytes(size, max(settings.shm_bytes // 2, 4096))
        try:
            segment = Segment(name, True, 2 * size * region, 0, size, region, chunk)
            segment.init_own()
        except OSError as exc:
            failure = str(exc)
        plan = (name, region, failure)
    else:
        plan = None
    name, region, failure = comm.bcast(plan, root=0)
    if failure is None and rank != 0:
        try:
            segment = Segment(name, False, 2 * size * region, rank, size, region, chunk)
            segment.init_own()
        except OSError as exc:
            failure = f"rank {rank}: {exc}"
    failures = [f for f in comm.allgather(failure) if f is not None]
    if rank == 0 and segment is not None:
        segment.unlink()
    if failures:
        if segment is not None:
            segment.close()
        if rank == 0:
            log.info("collectives: no shared segment for a Comm of %d ranks: %s", size, failures[0])
        return None
    return segment


__all__ = ["make", "refusal"]
