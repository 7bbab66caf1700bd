"""``collectives-bench forms``: every call form of a collective at one cost.

    mpiexec -n 2 collectives-bench forms [--reps 30]

One call can be written many ways: arrays or mpi4py's buffer specs, counts as lists, tuples
or NumPy arrays of any integer dtype, ``algorithm="auto"`` or the name auto picks, the
``Comm`` method or the functional ``collectives.allreduce``.  Every form goes through the same
description of the call, so every form should cost what the fastest does.  Each group times
its forms and native MPI's call interleaved in one launch (as ``default_path`` does: random
order per repetition, median per call on rank 0) at 8 bytes per rank, where the cost of a
call's form shows most.  Columns: median microseconds per call, the form over the group's
fastest form (1.00: as fast), and native / the form (above 1: ours is faster).
"""
import argparse
import array

import numpy as np
from mpi4py import MPI

import collectives

from .common import environment, table
from .default_path import measure


def groups(world, comm, unchecked):
    """(group, [(form, call())]) for every group; ``comm`` and ``unchecked`` are Comms over
    ``world``, with the check and without."""
    p = world.size
    # Names bound once, as a program's loop has them: each lambda then times building its
    # form and our handling of it, not four module attribute lookups per call.
    F, IN_PLACE, allreduce = MPI.FLOAT, MPI.IN_PLACE, collectives.allreduce
    x, y = np.ones(2, np.float32), np.empty(2, np.float32)
    xa, ya = array.array("f", [1.0, 1.0]), array.array("f", [0.0, 0.0])
    comm.Allreduce(x, y)
    chosen = comm.last_algorithm
    unchecked.Allreduce(x, y)
    unchosen = unchecked.last_algorithm
    allreduce_rows = [
        ("native Allreduce", lambda: world.Allreduce(x, y)),
        ("Allreduce(x, y)", lambda: comm.Allreduce(x, y)),
        ("Allreduce(IN_PLACE, y)", lambda: comm.Allreduce(IN_PLACE, y)),
        ("[x, MPI.FLOAT]", lambda: comm.Allreduce([x, F], [y, F])),
        ("[x, 2, MPI.FLOAT]", lambda: comm.Allreduce([x, 2, F], [y, 2, F])),
        ("[x, (2, 0), MPI.FLOAT]", lambda: comm.Allreduce([x, (2, 0), F], [y, (2, 0), F])),
        ("[x, 'f']", lambda: comm.Allreduce([x, "f"], [y, "f"])),
        ("array.array", lambda: comm.Allreduce(xa, ya)),
        ("op='sum'", lambda: comm.Allreduce(x, y, op="sum")),
        ("algorithm='auto'", lambda: comm.Allreduce(x, y, algorithm="auto")),
        (f"algorithm='{chosen}' (auto's)", lambda: comm.Allreduce(x, y, algorithm=chosen)),
        ("collectives.allreduce(Comm)", lambda: allreduce(comm, x, out=y)),
        ("collectives.allreduce(MPI comm)", lambda: allreduce(world, x, out=y)),
    ]
    unchecked_rows = [
        ("native Allreduce", lambda: world.Allreduce(x, y)),
        ("check=False auto", lambda: unchecked.Allreduce(x, y)),
        (f"check=False '{unchosen}' (auto's)", lambda: unchecked.Allreduce(x, y, algorithm=unchosen)),
    ]
    rs_send, rs_recv = np.ones(2 * p, np.float32), np.empty(2, np.float32)
    counts = [2] * p
    reduce_scatter = [
        ("native Reduce_scatter", lambda: world.Reduce_scatter(rs_send, rs_recv, counts)),
        ("recvcounts list", lambda: comm.Reduce_scatter(rs_send, rs_recv, counts)),
        ("recvcounts tuple", lambda: comm.Reduce_scatter(rs_send, rs_recv, tuple(counts))),
        ("recvcounts int64 array", lambda c=np.array(counts, np.int64): comm.Reduce_scatter(rs_send, rs_recv, c)),
        ("recvcounts int32 array", lambda c=np.array(counts, np.int32): comm.Reduce_scatter(rs_send, rs_recv, c)),
        ("[buf, MPI.FLOAT] specs", lambda: comm.Reduce_scatter([rs_send, F], [rs_recv, F], counts)),
        ("Reduce_scatter_block", lambda: comm.Reduce_scatter_block(rs_send, rs_recv)),
    ]
    ag_send, ag_recv = np.ones(2, np.float32), np.empty(2 * p, np.float32)
    displs = list(range(0, 2 * p, 2))
    allgatherv = [
        ("native Allgatherv", lambda: world.Allgatherv(ag_send, [ag_recv, (counts, displs), F])),
        ("[buf, counts]", lambda: comm.Allgatherv(ag_send, [ag_recv, counts])),
        ("[buf, (counts, displs), MPI.FLOAT]",
         lambda: comm.Allgatherv(ag_send, [ag_recv, (counts, displs), F])),
        ("[buf, counts, displs, MPI.FLOAT]", lambda: comm.Allgatherv(ag_send, [ag_recv, counts, displs, F])),
        ("int64 arrays", lambda c=np.array(counts), d=np.array(displs):
         comm.Allgatherv(ag_send, [ag_recv, (c, d), F])),
        ("int32 arrays", lambda c=np.array(counts, np.int32), d=np.array(displs, np.int32):
         comm.Allgatherv(ag_send, [ag_recv, (c, d), F])),
    ]
    return [("allreduce 8 B", allreduce_rows), ("allreduce 8 B, check=False", unchecked_rows),
            ("reduce_scatter 8 B per rank", reduce_scatter), ("allgatherv 8 B per rank", allgatherv)]


def main(argv=None):
    """``collectives-bench forms``: the table on rank 0."""
    ap = argparse.ArgumentParser(prog="collectives-bench forms", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30, help="interleaved repetitions per group (default 30)")
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    comm, unchecked = collectives.Comm(world), collectives.Comm(world, check=False)
    rows = []
    for group, forms in groups(world, comm, unchecked):
        t = measure(world, dict(forms), lambda call: call(), 8, args.reps)
        native = next(v for k, v in t.items() if k.startswith("native"))
        fastest = min(v for k, v in t.items() if not k.startswith("native"))
        for form, _ in forms:
            ours = not form.startswith("native")
            rows.append({"group": group, "form": form, "us": t[form] * 1e6,
                         "x_fastest": t[form] / fastest if ours else float("nan"),
                         "native_x": native / t[form] if ours else float("nan")})
    if world.rank == 0:
        env = environment()
        print(f"# collectives-bench forms: np={world.size}, {env['mpi_library']}, median of {args.reps} "
              "interleaved repetitions; x_fastest = form / the group's fastest form, native_x = native / form")
        columns = [("group", 28, "s"), ("form", 40, "s"), ("us", 8, ".2f"), ("x_fastest", 9, ".2f"),
                   ("native_x", 8, ".2f")]
        print("\n".join(table(columns, rows)))
    comm.Free()
    unchecked.Free()
    return 0


if __name__ == "__main__":
    main()
