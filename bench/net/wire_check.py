"""Wire check: median time of a native 16 MiB float32 Allreduce, and its bound on the link.

Through a shaped link each of 2 ranks sends and receives 16 MiB, 134 ms at 1 Gbit/s; over
shared memory it takes a few ms.  Prints hosts, Split_type sizes and the median on rank 0.
"""
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
node = comm.Split_type(MPI.COMM_TYPE_SHARED)
hosts = comm.gather((MPI.Get_processor_name(), node.size))
send = np.ones(4 << 20, np.float32)
recv = np.empty_like(send)
samples = []
for _ in range(7):
    comm.Barrier()
    start = time.perf_counter()
    comm.Allreduce(send, recv)
    samples.append(comm.allreduce(time.perf_counter() - start, MPI.MAX))
if not np.all(recv == comm.size):
    raise SystemExit("native Allreduce gave a wrong sum")
if comm.rank == 0:
    print(f"ranks on (host, Split_type size): {hosts}; 16 MiB Allreduce median "
          f"{np.median(samples[2:]) * 1e3:.1f} ms", flush=True)
