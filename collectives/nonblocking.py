"""Nonblocking collectives: a progress thread per communicator and the requests it completes.

Design: each ``Comm`` owns one daemon thread that runs submitted collectives one at a time,
in submission order, so every rank starts them in the same order, as MPI requires.  The
native executor releases the GIL for the whole schedule, so the caller's NumPy work and
the communication really run at the same time (MPI_THREAD_MULTIPLE, mpi4py's default).
A blocking collective issued while nonblocking ones are pending queues behind them.
Below MPI_THREAD_MULTIPLE there is no thread: ``completed`` runs the collective at once.
"""
import collections
import threading


class Request:
    """Handle of a started collective: ``wait()`` blocks until it is done, ``test()`` polls.

    ``result`` is what ``wait()`` returns: None, or the output array of a function in
    ``collectives.functional``.
    """

    def __init__(self):
        self._done = threading.Event()
        self._error = None
        self.result = None

    def _finish(self, error):
        self._error = error
        self._done.set()

    def wait(self):
        """Block until the collective has completed and return ``result``; re-raise its error, if any."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self.result

    def test(self):
        """True when the collective has completed (re-raising its error); never blocks."""
        if not self._done.is_set():
            return False
        self.wait()
        return True

    Wait = wait
    Test = test

    @staticmethod
    def waitall(requests):
        """Wait for every request in ``requests``."""
        for req in requests:
            req.wait()

    Waitall = waitall


def completed(job):
    """Run ``job`` now, in the caller's thread, and return its Request, already complete."""
    req = Request()
    try:
        job()
    except Exception as exc:
        req._finish(exc)
    else:
        req._finish(None)
    return req


class Progress:
    """A FIFO of collectives and the daemon thread that runs them."""

    def __init__(self):
        self._queue = collections.deque()
        self._cv = threading.Condition()
        self._pending = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="collectives-progress", daemon=True)
        self._thread.start()

    def busy(self):
        """Whether any submitted collective has not finished yet."""
        return self._pending > 0

    def submit(self, job):
        """Queue ``job`` (a callable running one collective) and return its Request."""
        req = Request()
        with self._cv:
            if self._closed:
                raise RuntimeError("communicator has been freed")
            self._pending += 1
            self._queue.append((job, req))
            self._cv.notify()
        return req

    def _loop(self):
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                job, req = self._queue.popleft()
            error = None
            try:
                job()
            except BaseException as exc:
                error = exc
            with self._cv:
                self._pending -= 1
            req._finish(error)

    def close(self):
        """Finish what is queued, then stop the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join()
