"""Preemption: a SIGTERM makes the ranks checkpoint at the next step boundary and stop.

A batch scheduler sends SIGTERM some time before it kills a job.  While training runs with
a checkpoint file, the signal only sets ``terminated`` on the rank it reached; at the next
step boundary (the parameter server: the next checkpoint boundary) the ranks agree whether
any of them saw it, and if so every rank sets ``preempted``, the checkpoint is written and
training stops, for the job to exit with checkpoint.PREEMPTED.
"""
import contextlib
import signal
import threading


class Preemption:
    """This rank's SIGTERM (``terminated``) and the ranks' agreement to stop (``preempted``)."""

    def __init__(self):
        self.terminated = False  # SIGTERM seen by this rank
        self.preempted = False   # the ranks agreed to checkpoint and stop on a SIGTERM

    @contextlib.contextmanager
    def sigterm(self, enabled):
        """While in the block, a SIGTERM only sets ``self.terminated`` (checked at step boundaries)."""
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def note(signum, frame):
            self.terminated = True
        previous = signal.signal(signal.SIGTERM, note)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)
