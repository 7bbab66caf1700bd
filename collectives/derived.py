"""Communicators made from a Comm (Dup, Split, Create, ...), returned as Comms."""
from mpi4py import MPI


def derived(method):
    """A Comm method calling mpi4py's ``method`` on the wrapped communicator and wrapping the result."""
    def derive(self, *args, **kwargs):
        made = getattr(self.comm, method)(*args, **kwargs)
        if made == MPI.COMM_NULL:
            return made
        comm = type(self)(made, algorithms=self.algorithms, check=self.check, timeout=self.timeout,
                          on_timeout=self.on_timeout, _env=self._env)
        comm._owned = True
        return comm
    derive.__name__ = derive.__qualname__ = method
    derive.__doc__ = (f"mpi4py's {method}, as a collectives.Comm with this one's algorithm "
                      "choices, check and watchdog settings (COMM_NULL stays COMM_NULL).")
    return derive


__all__ = ["derived"]
