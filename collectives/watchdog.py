"""The stall watchdog: a collective or primitive blocked longer than a limit raises or aborts.

Every Comm is watched: 30 minutes by default, ``COLLECTIVES_TIMEOUT=<seconds>`` (or
``Comm(comm, timeout=...)``) for another limit, 0 for none; set it alike on every rank.  A
CPU job may wait at a collective through long I/O on another rank, so the default is
PyTorch's for its CPU backend (Gloo), not the minutes its GPU backend allows.  Where a wait
would block (a blocking send or receive row of a schedule,
a WAITALL row, the argument check's exchange, a push/receive/pull/serve), the executors
then poll MPI_Test* instead, with a backoff and a monotonic clock, still without the GIL in
the native executor.  When one wait has made no progress for ``timeout`` seconds the
outstanding requests are cancelled (or, for a send the MPI cannot cancel, released), and:

* ``COLLECTIVES_TIMEOUT_MODE=raise`` (default; ``Comm(..., on_timeout="raise")``) raises
  ``StallError`` (a TimeoutError) on that rank, and the Comm is unusable afterwards, as
  after a failed schedule; left uncaught, it ends the job with exit status 124
  (collectives.abort);
* ``abort`` prints the same message on stderr and calls ``MPI_Abort`` on COMM_WORLD with
  status ``EXIT_STATUS``, so the whole job ends.

The message names the collective and algorithm, its call number on this communicator
(collectives run in the same order on every rank, so the call numbers line up), the step
and the ranks this rank is still waiting for, read from that step's outstanding requests.
With the argument check on, the checked exchange (``collectives.exchange``; for small calls
it is the collective itself) is watched trade by trade: the ranks that trade with a rank that
skipped the collective name it, and each other rank names the partner it is waiting for.

Not watched: calls delegated to MPI's own collective (long double, user-defined ops, ...):
MPI gives no way to give up on a blocking collective; their argument check is watched.
"""
import os
import time

from . import config

# Exit status of a job the watchdog aborts (as GNU timeout's), distinct from abort-on-error's 1.
EXIT_STATUS = 124
MODES = ("raise", "abort")
# Polling: spin this many seconds, then yield the core, then (a stall, most likely) sleep
# with a doubling pause, so that a long stall costs no CPU.
SPIN_S = 2e-6
YIELD_S = 0.1
MAX_PAUSE_S = 1e-3
# After expiry, how long cancelled requests get to complete before they are released.
GRACE_S = 1.0


def settings(timeout=None, on_timeout=None, env=None):
    """(seconds, mode) from the arguments, else from ``env`` (a config.Settings snapshot:
    COLLECTIVES_TIMEOUT and COLLECTIVES_TIMEOUT_MODE)."""
    if timeout is None:
        timeout = config.get("COLLECTIVES_TIMEOUT") if env is None else env.timeout
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}") from None
    if not timeout >= 0 or timeout == float("inf"):
        raise ValueError(f"timeout must be finite and >= 0 seconds (0: off), got {timeout!r}")
    if on_timeout is None:
        on_timeout = config.get("COLLECTIVES_TIMEOUT_MODE") if env is None else env.timeout_mode
    if on_timeout not in MODES:
        raise ValueError(f"timeout mode must be one of {', '.join(MODES)} "
                         f"(COLLECTIVES_TIMEOUT_MODE / on_timeout), got {on_timeout!r}")
    return timeout, on_timeout


class StallError(TimeoutError):
    """A wait outlived the watchdog's limit; every request it had started is cancelled or released.

    A job that dies of one ends with ``exit_status`` (collectives.abort).

    ``collective``, ``call`` (its number on the communicator, from 1), ``step``, ``rank``,
    ``peers`` (the ranks still awaited, as (rank, "send" | "receive") pairs) and ``waited``
    (seconds).
    """

    exit_status = EXIT_STATUS

    def __init__(self, collective, step, rank, peers, waited, call=None):
        super().__init__(collective, step, rank)
        self.collective, self.step, self.rank = collective, step, rank
        self.peers, self.waited, self.call = list(peers), waited, call

    def __str__(self):
        call = f", call {self.call} on this communicator" if self.call is not None else ""
        step = f" at step {self.step}" if self.step is not None else ""
        ranks = sorted({p for p, _ in self.peers})
        what = ", ".join(f"{kind} {'to' if kind == 'send' else 'from'} {p}" for p, kind in self.peers)
        who = ", ".join(map(str, ranks)) if ranks else "none"
        return (f"{self.collective}{call}: rank {self.rank} has waited {self.waited:.1f} s{step} "
                f"for rank(s) {who} ({what or 'no request pending'}); collectives watchdog "
                f"(COLLECTIVES_TIMEOUT)")


def stalled(engine, exc, call=None):
    """Record ``exc`` (a StallError of call number ``call``) on a Comm's ``engine``, making the
    Comm unusable; abort the job in abort mode."""
    exc.call = call
    engine.broken = str(exc)
    if engine.on_timeout == "abort":
        from .abort import end

        end(f"collectives: {exc}; aborting the job (MPI_Abort, exit status {EXIT_STATUS})\n", EXIT_STATUS)


def poll(test, limit):
    """Call ``test()`` until it returns True, or return False once ``limit`` seconds have
    passed: the pure-Python twin of the native executor's polling."""
    start = time.monotonic()
    pause = 1e-6
    while True:
        if test():
            return True
        waited = time.monotonic() - start
        if waited > limit:
            return False
        if waited > YIELD_S:
            time.sleep(pause)
            pause = min(2 * pause, MAX_PAUSE_S)
        elif waited > SPIN_S:
            os.sched_yield()


def watched(requests, limit, peers, what, step, rank, test=None):
    """Complete mpi4py ``requests`` (``test()`` when given, else Testall) or, after ``limit``
    seconds without that, cancel the receives (sends are not cancelled: as collectives._requests's
    give_up), release what still pends, and raise StallError naming ``what``, ``step``, ``rank``
    and the (rank, kind) in ``peers`` of each request still pending."""
    from mpi4py import MPI

    started = time.monotonic()
    if poll(test or (lambda: MPI.Request.Testall(requests)), limit):
        return
    waited = time.monotonic() - started
    late = [peer for req, peer in zip(requests, peers) if req and not req.Test()]
    for req, (_, kind) in zip(requests, peers):
        if req and kind == "receive":
            req.Cancel()
    if not poll(lambda: MPI.Request.Testall(requests), GRACE_S):
        for req in requests:
            if req:
                req.Free()
    raise StallError(what, step, rank, late, waited)


__all__ = ["EXIT_STATUS", "StallError", "poll",
           "settings", "stalled", "watched"]
