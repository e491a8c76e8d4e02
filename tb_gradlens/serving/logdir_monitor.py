"""The plugin's check of a local logdir's event files, a bounded amount per request.

TensorFlow-free.  ``LogdirMonitor.problems()`` is what the ``runs`` and
``alerts`` routes list as event-file problems (``event_files``: damage,
overlapping writers, skipped directories).
"""

import os
import threading
import time

from tb_gradlens.event_files import FileScan
from tb_gradlens.event_files import overlaps
from tb_gradlens.event_files import walk


class LogdirMonitor:
    """Checks the event files of a local logdir, a bounded amount per call.

    ``problems()`` re-lists the logdir at most every ``interval`` seconds,
    checks at most ``budget`` new bytes for at most about ``seconds``, and returns {run: [{"file",
    "error"}]} (paths relative to the logdir): damaged files, overlapping
    writers and what the walk skipped (run "").  Thread-safe.
    """

    def __init__(self, logdir, budget=64 * 1024 * 1024, interval=1.0, seconds=0.5):
        self.logdir = logdir
        self.budget = budget
        self.seconds = seconds  # and at most about this long (2,000 small files took 3 s)
        self.interval = interval
        self._scans = {}
        self._notes = []
        self._listed_at = -float("inf")
        self._lock = threading.Lock()  # the listing
        self._checking = threading.Lock()  # one request checks at a time

    def problems(self):
        """The problems found so far, after checking at most ``budget`` new
        bytes.  The lock is held only to list and to report: while one request
        checks, another reports what is known without waiting for it."""
        with self._lock:
            now = time.monotonic()
            if now - self._listed_at >= self.interval:
                self._listed_at = now
                files, self._notes = walk(self.logdir)
                self._scans = {path: (run, self._scans.get(path, (run, FileScan(path)))[1]) for run, path in files}
            scans = list(self._scans.values())
        if self._checking.acquire(blocking=False):
            try:
                left, until = self.budget, time.monotonic() + self.seconds
                for _, scan in scans:
                    if left <= 0 or time.monotonic() > until:
                        break
                    left -= scan.advance(left)
            finally:
                self._checking.release()
        with self._lock:
            return self._report()

    def _report(self):
        out = {}
        for run, scan in self._scans.values():
            if scan.damage:
                out.setdefault(run, []).append({"file": self._relative(scan.path), "error": scan.damage})
        for run, a, _, message in overlaps(list(self._scans.values())):
            out.setdefault(run, []).append({"file": self._relative(a), "error": message})
        for note in self._notes:
            out.setdefault("", []).append({"file": None, "error": note})
        return out

    def _relative(self, path):
        return os.path.relpath(path, self.logdir)
