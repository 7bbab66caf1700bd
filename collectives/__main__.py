"""``python -m collectives <command>``: ``train`` runs the distributed training job, ``bench`` the
benchmark (the ``collectives-bench`` command)."""
import sys


def main(argv=None):
    """Dispatch to a command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("train", "bench"):
        print("usage: python -m collectives {train,bench} [options]   (train --help, bench --help for the options)",
              file=sys.stderr)
        return 2
    if argv[0] == "bench":
        from bench.cli import main as bench
        return bench(argv[1:])
    from .train.job import main as train
    return train(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
