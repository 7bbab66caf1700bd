"""``python -m collectives <command>``: ``train`` runs the distributed training job (the
``collectives-train`` command), ``ml`` the text pipeline example (collectives.ml.job), ``bench``
the benchmark (the ``collectives-bench`` command).

Training and ml errors are one line on stderr from rank 0, ``collectives train: error: ...``, and every rank
exits with status 2 for a usage error, 1 for a data error (collectives.train.errors).  A
traceback comes too with ``--debug`` or COLLECTIVES_DEBUG=1.  Any other exception is a bug:
its rank prints that line, then its rank, host and traceback, and aborts the whole launch
(collectives.abort), since the others may be waiting on it.
"""
import sys
import traceback

from . import config

COMMANDS = ("train", "ml", "bench")


def _debug(argv):
    return "--debug" in argv or config.get("COLLECTIVES_DEBUG")


def _say(prog, message, debug):
    if debug:
        traceback.print_exc()
    # one line, whatever the message quotes (an argument or a file name may hold a line break)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


def main(argv=None, usage=None):
    """Dispatch to a command; returns the exit status.  ``usage`` names the command in its help
    (``collectives-train`` for the console script; ``python -m collectives train`` otherwise)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if not argv or argv[0] not in COMMANDS:
        if world.Get_rank() == 0:
            print(f"usage: python -m collectives {{{','.join(COMMANDS)}}} [options]   "
                  "(train --help, ml --help, bench --help for the options)", file=sys.stderr)
        return 2
    from . import abort

    abort.install()
    if argv[0] == "bench":
        from .bench.cli import main as bench
        status = bench(argv[1:])
        abort.exit_agreed()
        return status
    prog = f"collectives {argv[0]}"
    debug = _debug(argv)
    from .train.errors import DataError, UsageError

    try:
        if argv[0] == "ml":
            from .ml.job import main as run
        else:
            from .train.job import main as run
        status = run(argv[1:], usage) if usage else run(argv[1:])
        abort.exit_agreed()
        return status
    except (UsageError, DataError) as exc:
        # every rank raises the same error (see errors.together): one line is enough, and
        # every rank leaves with its status
        if world.Get_rank() == 0:
            _say(prog, exc, debug)
        abort.exit_agreed()
        return exc.status
    except Exception as exc:
        print(f"{prog}: error: internal error on rank {world.Get_rank()}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        abort.abort(type(exc), exc, exc.__traceback__)


def train():
    """The ``collectives-train`` command: ``python -m collectives train``."""
    return main(["train", *sys.argv[1:]], usage="collectives-train")


def bench():
    """The ``collectives-bench`` command: ``python -m collectives bench``."""
    return main(["bench", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
