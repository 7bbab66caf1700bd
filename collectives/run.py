"""``python -m collectives.run prog.py [args]``: run a program so one failing rank ends the job.

Also ``-m module [args]`` and ``-c command [args]``, as with ``python``.  An uncaught exception
on any rank, or ``sys.exit`` with a non-zero status, prints the rank, host and traceback and
calls ``MPI_Abort`` (see ``collectives.abort``) instead of leaving the other ranks waiting.
"""
import runpy
import sys

from . import abort

USAGE = "usage: python -m collectives.run (prog.py | -m module | -c command) [args ...]"


def main(argv=None):
    """Run the program named by ``argv`` under the abort-on-error hooks."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or (argv[0] in ("-m", "-c") and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    abort.install()
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c"] + argv[2:]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            abort.abort(type(exc), exc, _user_frames(exc.__traceback__))
        raise
    except BaseException as exc:
        abort.abort(type(exc), exc, _user_frames(exc.__traceback__))
    return 0


def _user_frames(tb):
    """``tb`` without the frames of this runner and of runpy, which say nothing about the program."""
    while tb is not None and tb.tb_next is not None and (
            tb.tb_frame.f_code.co_filename == __file__
            or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    sys.exit(main())
