"""Communicators made from a Comm (Dup, Split, Create_cart, ...), returned as Comms that own them."""
import functools

from mpi4py import MPI


def derived(method, view=MPI.Intracomm, request=False):
    """A Comm method running mpi4py's ``method`` on a plain ``view`` of the Comm's handle and
    returning what it made as a Comm of its kind (``Comm._adopt``) with this Comm's algorithm
    choices, check and watchdog settings.  ``request``: ``method`` returns (communicator,
    request), as Idup does; the request is completed first, since a Comm starts with
    collectives on the new communicator, and MPI.REQUEST_NULL takes its place."""
    @functools.wraps(method)
    def derive(self, *args, **kwargs):
        made = method(view(self), *args, **kwargs)
        if request:
            made, req = made
            req.Wait()
            return self._adopt(made), MPI.REQUEST_NULL
        return self._adopt(made)
    derive.__doc__ = (f"mpi4py's {method.__name__}, as a collectives.Comm that owns the new communicator, with "
                      "this one's algorithm choices, check and watchdog settings (COMM_NULL stays COMM_NULL).")
    return derive


__all__ = ["derived"]
