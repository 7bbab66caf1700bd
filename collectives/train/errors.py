"""The errors a training job reports to its user in one line, and how ranks agree on them.

``UsageError`` (exit status 2) is an invalid option or combination of options;
``DataError`` (exit status 1) is input that cannot be read or cannot be trained on.  Both
are ValueErrors, so library callers catch them as any invalid argument.
"""
import contextlib


class UsageError(ValueError):
    """Invalid options or an invalid combination of them: exit status 2."""

    status = 2


class DataError(ValueError):
    """Input data unreadable, malformed or unfit for training, or output unwritable: exit status 1."""

    status = 1


@contextlib.contextmanager
def together(comm):
    """Run the block on every rank of mpi4py ``comm``; if it raised a UsageError or DataError on
    any rank, raise it on every rank, so none is left waiting in a later collective.

    A rank raises its own error if it has one, else the lowest failing rank's.
    """
    error = None
    try:
        yield
    except (UsageError, DataError) as exc:
        error = exc
    first = next((e for e in comm.allgather(error) if e is not None), None)
    if first is not None:
        raise error or first
