"""Caches bounded by bytes, least recently used entries evicted first.

A plan is cached per call shape, and a job whose sizes vary (sparse payloads, a benchmark
sweep) would otherwise grow its cache without limit: a 64 MiB all-reduce under the segmented
ring holds about 0.14 MiB of steps.  Each ``ByteLRU`` holds at most ``max_bytes`` of entries
(a Comm's: COLLECTIVES_CACHE_BYTES, 32 MiB when unset); an entry larger than that is returned
but not kept.  ``total_bytes()`` sums every live ByteLRU, whoever made it.  Safe to share
between threads (the progress thread plans nonblocking collectives).
"""
import collections
import threading
import weakref

_caches = weakref.WeakSet()


class ByteLRU:
    """A mapping that keeps at most ``max_bytes`` of values (each put with its size), LRU first out."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evictions = 0
        self._entries = collections.OrderedDict()  # key -> (value, nbytes), oldest first
        self._lock = threading.Lock()
        _caches.add(self)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    def get(self, key, default=None):
        """The value under ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                return default
            self._entries.move_to_end(key)
            return item[0]

    def put(self, key, value, nbytes):
        """Keep ``value`` under ``key`` as ``nbytes`` bytes, evicting the least recently used
        entries to stay within ``max_bytes``; returns ``value``."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if nbytes <= self.max_bytes:
                self._entries[key] = (value, nbytes)
                self.nbytes += nbytes
                while self.nbytes > self.max_bytes:
                    _, (_, gone) = self._entries.popitem(last=False)
                    self.nbytes -= gone
                    self.evictions += 1
        return value

    def clear(self):
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


def total_bytes():
    """Bytes held by every live ByteLRU."""
    return sum(c.nbytes for c in list(_caches))
