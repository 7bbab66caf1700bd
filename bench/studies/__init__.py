"""Studies: one-off measurements behind docs/results/, run from the repository
(``mpiexec -n 4 python -m bench.studies.<name>``, or the make target named), not installed.

* alltoallv: what Alltoallv's cross-rank check and its plans cost, counts fixed and changing.
* dataservers: training throughput with data servers against partitioned reading (make bench-stragglers).
* kernels: the native kernels' throughput against the best NumPy expression (make bench-kernels).
* osu_demos: mpi4py's own OSU demos on a Comm beside COMM_WORLD (make bench-osu).
* pipeline: the pipeline bubble against theory; seconds per epoch of data, tensor, hybrid and
  pipeline layouts of one MLP (make bench-pipeline).
* reproducible: seconds per epoch of reproducible training against the default mode.
* startup: end-to-end time of a short training job against an empty launch (make bench-startup).
* stragglers: time to accuracy with and without a straggler, by synchronisation model (make bench-stragglers).
* train: time to the optimum per optimizer and synchronisation (make bench-train).
* watchdog: all-reduce latency with the stall watchdog armed against without it.
"""
