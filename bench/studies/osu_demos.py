"""mpi4py's own OSU demos, run on a collectives.Comm beside the plain COMM_WORLD.

    mpiexec -n 2 -bind-to core python -m bench.studies.osu_demos DEMO_DIR bcast,allgather,gather,scatter

DEMO_DIR is ``demo/`` of mpi4py's source distribution (make test-mpi4py fetches it into the
virtualenv: .venv/mpi4py-src/mpi4py-<version>/demo after ``tar -xzf`` of its demo files).
Each demo (``osu_<name>.py``) is run as it is written, its ``comm = MPI.COMM_WORLD`` bound
to one communicator or the other: the native launch and ours alternate for ``--rounds``
rounds in one launch.  Each demo times its loop of back-to-back calls on rank 0 (the root),
as OSU's benchmarks do; the table gives per size the median microseconds of each and the
median, lowest and highest of native / ours over the rounds (above 1: ours is faster).
"""
import argparse
import contextlib
import io
import os
import re

import numpy as np
from mpi4py import MPI

import collectives


def run_demo(source, name, comm):
    """{size: latency us} printed by demo ``name`` (its source text) with ``comm`` as its communicator."""
    code = source.replace("comm = MPI.COMM_WORLD", "comm = COMM").replace('if __name__ == "__main__":', "if False:")
    scope = {"COMM": comm, "__name__": f"osu_{name}"}
    exec(compile(code, f"osu_{name}.py", "exec"), scope)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scope[f"osu_{name}"]()
    found = {}
    for line in out.getvalue().splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+)\s*$", line)
        if m:
            found[int(m.group(1))] = float(m.group(2))
    return found


def main(argv=None):
    """Run the demos and print the table on rank 0."""
    ap = argparse.ArgumentParser(prog="python -m bench.studies.osu_demos", description=__doc__.split("\n\n")[0])
    ap.add_argument("demo_dir", help="mpi4py's demo/ directory")
    ap.add_argument("demos", help="comma-separated demo names: bcast, allgather, gather, scatter, ...")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of native then ours (default 3)")
    ap.add_argument("--unchecked", action="store_true", help="ours without the cross-rank check (check=False)")
    ap.add_argument("--sizes", default="8,4096,8192,16384,65536,131072,1048576",
                    help="the sizes to print (default 8 B, 4, 8, 16, 64, 128 KiB, 1 MiB)")
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    ours = collectives.Comm(world, check=not args.unchecked)
    wanted = [int(s) for s in args.sizes.split(",")]
    for name in args.demos.split(","):
        with open(os.path.join(args.demo_dir, f"osu_{name}.py")) as f:
            source = f.read()
        times = {"native": {}, "ours": {}}
        for _ in range(args.rounds):
            for label, comm in (("native", world), ("ours", ours)):
                for size, us in run_demo(source, name, comm).items():
                    times[label].setdefault(size, []).append(us)
        if world.rank == 0:
            print(f"# osu_{name}, np={world.size}, {args.rounds} rounds, ours {'un' if args.unchecked else ''}checked: "
                  "native us, ours us (medians), native/ours median (low-high)")
            for size in wanted:
                native, mine = times["native"].get(size), times["ours"].get(size)
                if not native or not mine:
                    continue
                ratios = [a / b for a, b in zip(native, mine)]
                print(f"{size:>9} {np.median(native):9.2f} {np.median(mine):9.2f} {np.median(ratios):6.2f} "
                      f"({min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    ours.Free()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
