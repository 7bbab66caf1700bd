"""``collectives-bench eager``: where MPI's point-to-point protocol switches, and what cutting pays.

    mpiexec -n 2 -bind-to core collectives-bench eager [--reps 9] [--sizes 8000,8192,...]

Ranks 0 and 1 run one step of a schedule: write the message (a copy, as a combine writes what
the next step sends), then send it and receive the other rank's at once, through the native
executor, so no Python sits between the two.  At sizes around the eager
limit the library reports (``collectives.eager.learned``) and up to 64 KiB: whole, and cut
into eager pieces all in flight (``plans.split_messages``, what a Comm's plans do between the
eager limit and COLLECTIVES_SPLIT_BYTES).  Both forms run interleaved in one launch; each row
gives the median microseconds per exchange over ``--reps`` rounds and whole / cut (above 1:
cutting pays).  A jump in the whole column past the limit is the switch; the last size where
cutting still pays is where COLLECTIVES_SPLIT_BYTES belongs.
"""
import argparse

import numpy as np
from mpi4py import MPI

from collectives import eager
from collectives.plans import split_messages
from collectives.schedule import ACC, IN, TMP, Schedule

from .common import environment, table

COLUMNS = [("bytes", 9, "d"), ("pieces", 7, "d"), ("whole(us)", 10, ".2f"), ("cut(us)", 9, ".2f"),
           ("whole/cut", 10, ".2f")]


def default_sizes(limit):
    """Sizes around ``limit`` (the learned eager limit; 8064 when none is known), MPICH's CMA
    threshold, and up to 64 KiB."""
    limit = limit or 8064
    near = {limit - 64, limit, limit + 16, limit + 64, limit + 128}
    return sorted({n for n in near | {4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536} if n > 0})


def steps_for(rank, nbytes, limit):
    """(whole steps, cut steps, nreq of each) of one step of ``nbytes`` with the other rank: the
    message written (copied from IN), as a combine writes it, then exchanged."""
    s = Schedule(rank, 2)
    peer = 1 - rank
    s.copy((ACC, 0, nbytes), (IN, 0, nbytes))
    s.sendrecv(peer, (ACC, 0, nbytes), peer, (TMP, 0, nbytes))
    whole = s.finish()
    cut, nreq = split_messages(whole, 1, limit, nbytes)
    return (whole, s.nreq), (cut, nreq)


def measure(comm, sizes, limit, reps, calls=2000):
    """Rows of median microseconds per exchange, whole and cut, on ranks 0 and 1 of ``comm``."""
    from collectives._executor import execute

    rows = []
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    for nbytes in sizes:
        times = {"whole": [], "cut": []}
        if pair != MPI.COMM_NULL:
            (whole, wn), (cut, cn) = steps_for(pair.rank, nbytes, limit)
            send, recv, data = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8), np.full(nbytes, 3, np.uint8)
            forms = {"whole": (whole, wn), "cut": (cut, cn)}
            for steps, nreq in forms.values():
                for _ in range(50):
                    execute(pair, steps, send, recv, data, 5, 0, 1, nreq)
            for _ in range(reps):
                for name, (steps, nreq) in forms.items():
                    pair.Barrier()
                    t0 = MPI.Wtime()
                    for _ in range(calls):
                        execute(pair, steps, send, recv, data, 5, 0, 1, nreq)
                    times[name].append((MPI.Wtime() - t0) / calls * 1e6)
            pieces = int(np.sum(cut[:, 0] == 3))  # ISEND rows
        else:
            pieces = 0
        comm.Barrier()
        if comm.rank == 0:
            w, c = np.median(times["whole"]), np.median(times["cut"])
            rows.append({"bytes": nbytes, "pieces": max(pieces, 1), "whole(us)": w, "cut(us)": c, "whole/cut": w / c})
    if pair != MPI.COMM_NULL:
        pair.Free()
    return rows


def main(argv=None):
    """Measure and print on rank 0; exit status 2 with fewer than 2 ranks."""
    ap = argparse.ArgumentParser(prog="collectives-bench eager", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9, help="rounds of each form per size (median)")
    ap.add_argument("--sizes", help="comma-separated message sizes in bytes (default: around the learned limit)")
    ap.add_argument("--limit", type=int, help="cut into pieces of at most this many bytes (default: the learned limit)")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.size < 2:
        print("collectives-bench eager: needs 2 ranks (mpiexec -n 2 collectives-bench eager)")
        return 2
    known = eager.learned()
    learned, where = known["eager"], known["where"]
    limit = args.limit or learned
    if not limit:
        print(f"collectives-bench eager: the library gives no eager limit ({where}); give --limit")
        return 2
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else default_sizes(learned)
    rows = measure(comm, sizes, limit, args.reps)
    if comm.rank == 0:
        env = environment()
        print(f"# collectives-bench eager: {env['mpi_library']}, np={comm.size} on {env['cores']} cores, "
              f"{env['date_utc']}, git {env['git']}")
        print(f"# the library's eager limit on one node: {learned} bytes ({where}); a Comm cuts messages up to "
              f"{known['most']} bytes; here cut into pieces of at most {limit}")
        print("# one step between ranks 0 and 1 (the message written, then a send and a receive at once, the native "
              "executor): median us over rounds; whole/cut > 1: cutting pays")
        print("\n".join(table(COLUMNS, rows)))
    return 0
