"""Nonblocking collectives: a progress thread per communicator and the requests it completes.

Design: each ``Comm`` owns one daemon thread that runs submitted collectives one at a time,
in submission order, so every rank starts them in the same order, as MPI requires.  The
native executor releases the GIL for the whole schedule, so the caller's NumPy work and
the communication really run at the same time (MPI_THREAD_MULTIPLE, mpi4py's default).
A blocking collective issued while nonblocking ones are pending queues behind them.
Below MPI_THREAD_MULTIPLE there is no thread: ``completed`` runs the collective at once.

A ``wait()`` whose collective has not started runs it in the waiting thread, with every one
queued before it, in order, unless the progress thread is running one: one thread at a time
runs the queue.  Handing a collective to the thread and its end back costs two thread
switches, many times a small collective's own time, and the waiter would sit idle meanwhile.
A post never runs anything, so it stays local; only ``wait()``, which may block, does.
"""
import collections
import threading


class Request:
    """Handle of a started collective: ``wait()`` blocks until it is done, ``test()`` polls.

    ``result`` is what ``wait()`` returns: None, or the output array of a function in
    ``collectives.functional``.
    """

    def __init__(self, progress=None):
        self._done = threading.Event()
        self._error = None
        self.result = None
        self._progress = progress  # the Progress whose queue holds it, for wait() to run

    def _finish(self, error):
        self._error = error
        self._done.set()

    def wait(self):
        """Block until the collective has completed and return ``result``; re-raise its error, if any."""
        if self._progress is not None and not self._done.is_set():
            self._progress.run_until(self)
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
        self._running = False  # whether a thread, this one's or a waiter, runs a queued job
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="collectives-progress", daemon=True)
        self._thread.start()

    def busy(self):
        """Whether any submitted collective has not finished yet."""
        return self._pending > 0

    def submit(self, job):
        """Queue ``job`` (a callable running one collective) and return its Request."""
        req = Request(self)
        with self._cv:
            if self._closed:
                raise RuntimeError("communicator has been freed")
            self._pending += 1
            self._queue.append((job, req))
            self._cv.notify()
        return req

    def _take(self):
        """Under the lock: the job at the head of the queue and its Request, now running."""
        self._running = True
        return self._queue.popleft()

    def _run(self, job, req):
        """Run a job taken from the queue, then give up the turn and finish its Request; the
        job's error, if any."""
        error = None
        try:
            job()
        except BaseException as exc:
            error = exc
        with self._cv:
            self._pending -= 1
            self._running = False
            self._cv.notify_all()
        req._finish(error)
        return error

    def run_until(self, req):
        """Run the queued jobs in the calling thread, in order, until ``req`` is done; return
        early when another thread is running one (``req`` then completes there)."""
        while not req._done.is_set():
            with self._cv:
                if self._running or not self._queue:
                    return
                job, queued = self._take()
            error = self._run(job, queued)
            if error is not None and not isinstance(error, Exception):
                raise error  # KeyboardInterrupt, SystemExit: the waiting thread's own, at once

    def _loop(self):
        while True:
            with self._cv:
                while self._running or not self._queue:
                    if self._closed and not self._queue and not self._running:
                        return
                    self._cv.wait()
                job, req = self._take()
            self._run(job, req)

    def close(self):
        """Finish what is queued, then stop the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()
