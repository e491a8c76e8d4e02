"""The plugin's memory of what it read: a byte-bounded, versioned LRU.

TensorFlow-free.  ``reading.Source`` keys entries by (what, data location,
run, tag) and versions them by the tag's ``(max_step, max_wall_time)``, so
a tag that grows is read again and experiment ids that name the same
logdir share one entry.
"""

import collections
import logging
import os
import threading

logger = logging.getLogger(__name__)

# Default memory budgets of a Cache: series read from the provider (a
# grad_stats tag of 10,000 steps x 200 variables is 112 MB), and analysis
# results.
DEFAULT_CACHE_BYTES = 2 * 1024 * 1024 * 1024
DEFAULT_DERIVED_BYTES = 64 * 1024 * 1024
# Encoded answers of the routes on one tag (the series, health and
# histograms of a run that many clients watch).
DEFAULT_ANSWER_BYTES = 64 * 1024 * 1024


def key_bytes(key):
    """About what a cache key holds in memory: its strings' bytes and 64 per part.  Counted in
    its pool's size, so keys from requests (a 1,000-character row pattern) cannot outgrow it."""
    if isinstance(key, (tuple, list, frozenset)):
        return 64 + sum(key_bytes(k) for k in key)
    if isinstance(key, (str, bytes)):
        return 64 + len(key)
    return 64


class _LRU:
    """A thread-safe LRU of (version, value, size), bounded in bytes (the value's and its key's)."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self._entries = collections.OrderedDict()  # key -> (version, value, size)
        self._bytes = 0
        self._lock = threading.Lock()

    def lookup(self, key, version):
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == version:
                self._entries.move_to_end(key)
                return True, hit[1]
        return False, None

    def latest(self, key):
        """The value stored under ``key`` for whichever version (None: none)."""
        with self._lock:
            hit = self._entries.get(key)
            return None if hit is None else hit[1]

    def holds(self, key, version):
        """Whether ``key`` is stored for ``version`` (None: for any version)."""
        with self._lock:
            hit = self._entries.get(key)
            return hit is not None and (version is None or hit[0] == version)

    def __len__(self):
        return len(self._entries)

    @property
    def nbytes(self):
        """The bytes counted for what is stored (values and keys)."""
        return self._bytes

    def store(self, key, version, value):
        size = int(getattr(value, "nbytes", 1024)) + key_bytes(key) + key_bytes(version)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            if size <= self.max_bytes:
                self._entries[key] = (version, value, size)
                self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, (_, _, s) = self._entries.popitem(last=False)
                self._bytes -= s

    def forget(self, keep):
        """Drop every entry whose key ``keep(key)`` refuses."""
        with self._lock:
            for key in [k for k in self._entries if not keep(k)]:
                self._bytes -= self._entries.pop(key)[2]

    def clear(self):
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class Cache:
    """What a Source has read or computed, kept between requests.

    ``get(key, version, compute, pool)`` returns the value stored under
    ``key`` if it was computed for the same ``version`` (a tag's
    ``(max_step, max_wall_time)``); else it calls ``compute()`` and stores
    the result.  Two LRU pools bounded in bytes (``nbytes`` of the value,
    else 1 KiB): ``data`` for series read from the provider, ``derived``
    for small analysis results, so large reads never evict the alerts, and
    ``answers`` for the encoded answers of a route on one tag.
    The data budget defaults to $TB_GRADLENS_CACHE_MB or 2 GiB.

    Concurrent requests that miss the same key compute it once: the
    others wait for that result (the tab asks for the overview and the
    alerts at once, and both read every record of a cold logdir).
    """

    def __init__(self, max_bytes=None, derived_max_bytes=DEFAULT_DERIVED_BYTES,
                 answer_max_bytes=DEFAULT_ANSWER_BYTES):
        if max_bytes is None:
            max_bytes = env_cache_bytes()
        self._pools = {"data": _LRU(max_bytes), "derived": _LRU(derived_max_bytes),
                       "answers": _LRU(answer_max_bytes)}
        self._computing = {}  # (pool, key) -> Lock held while one request computes it
        self._computing_lock = threading.Lock()

    def get(self, key, version, compute, pool="derived"):
        lru = self._pools[pool]
        found, value = lru.lookup(key, version)
        if found:
            return value
        with self._computing_lock:
            lock = self._computing.setdefault((pool, key), threading.Lock())
        try:
            with lock:
                found, value = lru.lookup(key, version)  # computed meanwhile by another request
                if not found:
                    value = compute()
                    lru.store(key, version, value)
        finally:  # also when compute() raised (a refused request): nothing left behind per key
            with self._computing_lock:
                if self._computing.get((pool, key)) is lock and not lock.locked():
                    del self._computing[(pool, key)]
        return value

    def holds(self, key, version, pool="derived"):
        """Whether ``key`` is stored for ``version`` (None: any; without touching its recency)."""
        return self._pools[pool].holds(key, version)

    def latest(self, key, pool="derived"):
        """The value stored under ``key`` for whichever version (None: none),
        for what is extended as a tag grows instead of computed again."""
        return self._pools[pool].latest(key)

    def put(self, key, version, value, pool="derived"):
        """Store ``value`` under ``key`` for ``version`` (a read made for several keys at once)."""
        self._pools[pool].store(key, version, value)

    def forget_run(self, run):
        """Drop everything read or computed from ``run`` (keys are (what, location, run, tag)):
        its event files changed, so what was read of them is not what they hold."""
        for lru in self._pools.values():
            lru.forget(lambda key: not (isinstance(key, tuple) and len(key) > 2 and key[2] == run))

    def sizes(self):
        """{pool: (entries, bytes counted, max bytes)}."""
        return {name: (len(lru), lru.nbytes, lru.max_bytes) for name, lru in self._pools.items()}

    def clear(self):
        for lru in self._pools.values():
            lru.clear()


def env_cache_bytes():
    value = os.environ.get("TB_GRADLENS_CACHE_MB")
    try:
        return int(float(value) * 1024 * 1024) if value else DEFAULT_CACHE_BYTES
    except ValueError:
        logger.warning("gradlens: ignoring TB_GRADLENS_CACHE_MB=%r (not a number)", value)
        return DEFAULT_CACHE_BYTES
