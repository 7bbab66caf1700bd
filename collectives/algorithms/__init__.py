"""One module per algorithm, named ``<collective>_<algorithm>``; each defines a builder of that name.

A builder appends one rank's steps to a ``collectives.schedule.Schedule``; see the table in
``collectives.registry`` for which exist and when each is used.  Buffer conventions
(ACC, TMP, IN, OUT from collectives.schedule), by collective:

* allreduce(s, count): this rank's input is in IN for an algorithm marked ``reads_in`` in
  collectives.registry (IN may be ACC itself, in place), else in ACC; ACC ends holding the
  result.
* bcast(s, nbytes, root): ACC everywhere; the root's holds the data.
* reduce(s, count, root): IN is this rank's input; ACC is the result, at the root only
  (None elsewhere: non-roots never touch ACC).  IN and ACC may be the same memory at the root.
* allgather(s, counts): ACC holds every block in rank order; this rank's is already in place.
* reduce_scatter(s, counts, out=False): this rank's full input, blocks in rank order, is in
  IN for an algorithm marked ``reads_in`` in collectives.registry (which never writes IN),
  else in ACC; ACC ends with the reduced block of this rank at that block's place, or with
  ``out`` OUT holds it (ACC is then scratch).  Every reduce-scatter takes ``out``: the
  executors ask for it unless in place, where OUT would be IN.
* gather(s, counts, root): IN is this rank's block; ACC, at the root only, gets every block.
  A non-root may see -1 for counts it cannot know (Gatherv).
* scatter(s, counts, root): IN, at the root only, holds every block; ACC gets this rank's.
* barrier(s): no buffers.
* scan(s, count, apart) and exscan(s, count, apart): IN is this rank's input, ACC's memory
  itself in place (``apart`` False); ACC ends holding this rank's prefix, which for exscan
  rank 0 has none: its ACC is never touched.
* alltoall(s, sends, recvs): IN holds the blocks to send, ``sends[j]`` (offset, count) the one
  for rank j; ACC gets the block from rank j at ``recvs[j]``.  IN is never ACC's memory: in
  place, the executors stage the input first.

* neighbor_allgather(s, sends, recvs) and neighbor_alltoall(s, sends, recvs): IN holds the
  blocks to send, ``sends`` the (destination, offset, count) of each in message order; ACC
  gets ``recvs``' (source, offset, count) blocks.  MPI.PROC_NULL neighbours are left out.

Counts of the non-reducing collectives are in bytes.  TMP is scratch of any size needed.
"""
