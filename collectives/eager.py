"""MPI's point-to-point protocols on one node, and how a Comm's messages fit them.

MPI moves a message between two ranks of a node in one of a few ways.  Up to its eager limit
the sender copies the message into a shared-memory cell and is done; the receiver copies it
out when it finds it.  Above the limit a handshake comes first: the sender announces the
message, the receiver answers when its receive is posted, and only then does the data move,
in one copy through the kernel (CMA's process_vm_readv) or in a pipeline through the cells.

The switch points, from the libraries' sources and variables, measured at np=2 with
``collectives-bench eager`` (docs/results/eager.md):

* MPICH ch4 (5.0.2): a message that fits one cell of the POSIX shared-memory queue,
  MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE (8192 bytes) less the cell's header (80 bytes
  measured), goes eagerly.  From MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD (8192) on, with CMA on
  (MPIR_CVAR_CH4_CMA_ENABLE), it goes by a handshake and one CMA copy; between the two, and for
  every larger message with CMA off, by the cell pipeline.  A message written just before it
  is sent, as a schedule's combine writes the next step's, crosses by CMA at 4.9-5.2 us for
  8 KiB against 3.1-3.2 us as eager pieces; the pieces win up to 16 KiB in an all-reduce.
* Open MPI (5.0.11, ob1 over btl/sm): up to btl_sm_eager_limit (4096 bytes) including the
  match and fragment headers (80 bytes measured); above it a rendezvous with one copy
  (smsc/cma).  Just above the limit (a 4 KiB message) the rendezvous costs 4.0-4.6 us in an
  all-reduce step against 3.5-3.8 us as pieces; from 6 KiB on the rendezvous wins.
* Between nodes the network decides, and none of these apply: MPICH's OFI netmod sends eagerly
  up to MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD (-1: the provider's largest message), Open MPI's
  btl/tcp up to btl_tcp_eager_limit (65536).  A Comm's lanes across nodes cut nothing.

What a Comm does with them (``agreed``):

* ``eager``: the limit, read from the library's control variables through MPI_T
  (collectives._mpit) once per process, less ``HEADER``, more than the headers measured, so a
  version whose header grows a little still fits; COLLECTIVES_EAGER_BYTES overrides it (0:
  nothing is cut).
* ``most``: a schedule's message of more than ``eager`` bytes, up to ``most``, is cut into
  eager pieces (``plans.split_messages``): CUT_MOST's measured size for the library, or with
  MPICH's CMA off the range its cell pipeline would carry.  COLLECTIVES_SPLIT_BYTES overrides it.
* ``fused``: the most a fused collective carries, its checked exchange's messages cut into
  eager pieces (collectives.exchange): on MPICH, whose handshake and CMA copy cost more than
  the pieces' extra copy up to exchange.FUSED_BYTES, that much; elsewhere
  exchange.FUSED_DEFAULT, where the rendezvous wins from about 6 KiB (Open MPI).

Every rank of a communicator must cut a message alike, so a Comm takes the smallest value of
each over its ranks when it is made.  Setting the library's own variable instead (a larger
cell, OMPI_MCA_btl_sm_eager_limit) moves the limit for the whole process, native MPI's
collectives included; the variables are read as they are set, so the cut follows.
"""
import numpy as np
from mpi4py import MPI

from .exchange import FUSED_BYTES, FUSED_DEFAULT

# Bytes of a cell or fragment that are not payload, with a margin (80 measured in both).
HEADER = 128

# The control variables that give the limit, per library.
MPICH_CELL = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"
MPICH_CMA = "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"
MPICH_CMA_ON = "MPIR_CVAR_CH4_CMA_ENABLE"
OPEN_MPI_SM = "btl_sm_eager_limit"

# The largest message cut into eager pieces, per library: where a message written just before
# it is sent (as every combine writes the next step's message) crosses faster as pieces than by
# the library's handshake and single copy (docs/results/eager.md); with MPICH's CMA off, its cell
# pipeline, which pieces beat up to PIPELINE_MOST.
CUT_MOST = {"MPICH": 16 << 10, "Open MPI": 4 << 10}
PIPELINE_MOST = 48 << 10

_LEARNED = []


def learned():
    """{"eager": bytes, "most": bytes, "fused": bytes, "where": text}: what the MPI library's
    control variables say of its protocols on one node (``eager`` 0 when they do not say)."""
    if not _LEARNED:
        _LEARNED.append(_read())
    return _LEARNED[0]


def _read():
    from ._mpit import integers

    library = MPI.Get_library_version()
    none = {"eager": 0, "most": 0, "fused": FUSED_DEFAULT}
    if library.startswith("MPICH"):
        found = integers([MPICH_CELL, MPICH_CMA, MPICH_CMA_ON])
        if MPICH_CELL not in found:
            return dict(none, where=f"MPICH without {MPICH_CELL}: not the ch4 POSIX shared memory")
        eager, where = max(found[MPICH_CELL] - HEADER, 0), f"{MPICH_CELL}={found[MPICH_CELL]} - {HEADER}"
        most = PIPELINE_MOST
        if found.get(MPICH_CMA_ON, 0) and found.get(MPICH_CMA, 0) > 0:
            # Below the CMA threshold MPICH pipelines through its cells; from it on, CMA.
            most = max(CUT_MOST["MPICH"], min(found[MPICH_CMA] - 1, PIPELINE_MOST))
            if found[MPICH_CMA] - 1 < eager:
                eager, where = found[MPICH_CMA] - 1, f"{MPICH_CMA}={found[MPICH_CMA]} - 1"
        return {"eager": eager, "most": most, "fused": FUSED_BYTES, "where": where}
    if library.startswith("Open MPI"):
        found = integers([OPEN_MPI_SM])
        if OPEN_MPI_SM not in found:
            return dict(none, where=f"Open MPI without {OPEN_MPI_SM}: not btl/sm")
        return {"eager": max(found[OPEN_MPI_SM] - HEADER, 0), "most": CUT_MOST["Open MPI"], "fused": FUSED_DEFAULT,
                "where": f"{OPEN_MPI_SM}={found[OPEN_MPI_SM]} - {HEADER}"}
    return dict(none, where=f"unknown MPI library ({library.splitlines()[0][:40]}): nothing learned")


def limits(settings):
    """(eager, most, fused) of a Comm made with ``settings`` (collectives.config): the learned
    values, COLLECTIVES_EAGER_BYTES and COLLECTIVES_SPLIT_BYTES where set; ``fused`` falls to
    exchange.FUSED_DEFAULT when nothing is cut."""
    known = learned()
    eager = known["eager"] if settings.eager is None else settings.eager
    most = known["most"] if settings.split is None else settings.split
    return eager, most, known["fused"] if eager else FUSED_DEFAULT


def agreed(comm, settings):
    """(eager, most, fused) every rank of mpi4py communicator ``comm`` uses: the smallest of
    their ``limits`` (collective over ``comm``)."""
    mine = np.array(limits(settings), np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.MIN)
    return tuple(int(v) for v in mine)


__all__ = ["CUT_MOST", "HEADER", "PIPELINE_MOST", "agreed", "learned", "limits"]
