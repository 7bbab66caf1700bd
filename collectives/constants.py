"""What every layer of the package names alike, declared once.

* The collectives with an algorithm table, in the order of their indices: the argument
  agreement compares a call's collective by its index, the engine keeps one tag and one
  plan slot per index, and the tuning table and COLLECTIVES_<COLLECTIVE> name them.
* The kinds of a schedule's steps, the width of a step's row and the buffers a row names
  (collectives.schedule documents them; the native executor and its NumPy twin run them).
* The forms of the shared-memory algorithms (collectives.shm), which the engine runs in the
  node's segment instead of a schedule.
* The tags of the messages on a Comm's private communicator: each user of that communicator
  has its own, so no two kinds of message can ever meet.

This module imports nothing, so every module of the package, the configuration included,
may import it.
"""
COLLECTIVES = ("allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "gather", "scatter", "barrier", "scan",
               "exscan", "alltoall", "neighbor_allgather", "neighbor_alltoall")
INDEX = {name: i for i, name in enumerate(COLLECTIVES)}
# What the agreement also compares, beyond the collectives: the compressed all-reduce
# (collectives.compression), whose fields name its compressor, and the exchange in which
# Reduce_scatter without counts learns every rank's count.
COMPRESSED = "compressed allreduce"
COUNTS = "reduce_scatter counts"
AGREED = (*COLLECTIVES, COMPRESSED, COUNTS)

# A schedule's steps: each row is [kind, buf_a, off_a, cnt_a, peer_a, buf_b, off_b, cnt_b, peer_b].
SENDRECV, REDUCE, COPY, ISEND, IRECV, WAITALL = range(6)
NONE = -1  # no peer (MPI_PROC_NULL) or no buffer
NCOLS = 9
# The buffers a row names.
ACC, TMP, IN, OUT = range(4)
NBUFS = 4

# Shared-memory forms: every rank combines every rank's data at once; or the data goes in
# rounds of phases, each rank combining its block.
SHM_DIRECT, SHM_PIPELINED = 0, 1
SHM_FORMS = {"direct": SHM_DIRECT, "pipelined": SHM_PIPELINED}
# Bytes per round of the pipelined forms: a round's data for two ranks stays in a core's L2.
SHM_CHUNK = 256 << 10

# Tags on a Comm's private communicator.
TAG_PUSH, TAG_PULL, TAG_REPLY = 50, 51, 52  # collectives.transport
# collectives.compression.pipeline: the sums in the node, the scatter and gather between nodes,
# the node's share of the result, and the pairs of the sparse compressors.
TAG_SUM, TAG_SCATTER, TAG_GATHER, TAG_SHARE, TAG_PAIRS = 60, 61, 62, 63, 64
TAG_ALIGN = 70  # collectives.timeline's clock alignment
TAG_EXCHANGE = 99  # the checked exchange (collectives.exchange)
TAG_SCHEDULE = 100  # a collective's schedules: TAG_SCHEDULE + its index
TAGS = {name: TAG_SCHEDULE + i for i, name in enumerate(COLLECTIVES)}
