"""The plugin's check of a logdir's event files, a bounded amount per request.

TensorFlow-free.  ``LogdirMonitor.problems()`` is what the ``runs`` and
``alerts`` routes list as event-file problems (``event_files``: damage,
overlapping writers, skipped directories, files changed under TensorBoard).
``refresh()`` notices files that are no longer the ones read
(``file_identity``: truncated, rewritten, replaced, removed): their checks
start again, and ``take_changed()`` names their runs, whose cached state the
plugin drops.  A logdir in object storage (``s3://``, ``gs://``) is checked
through ``file_system`` alike (damage, overlapping writers); an object's
identity there is not followed (objects are replaced whole, not changed in
place).
"""

import os
import threading
import time

from tb_gradlens import file_system
from tb_gradlens.event_files import FileScan
from tb_gradlens.event_files import overlaps
from tb_gradlens.event_files import walk
from tb_gradlens.serving import file_identity

REMOTE_BUDGET = 8 * 1024 * 1024  # bytes checked per request in object storage

# What TensorBoard's own loader does with a changed file, and what to do (the ``runs`` route says it).
CHANGED_NOTE = ("%s on disk after it was read: the GradLens tab reads it afresh, but TensorBoard's loader may "
                "still show what it read before (the Python loader keeps it); restart TensorBoard to read it anew")


class LogdirMonitor:
    """Checks the event files of a logdir, a bounded amount per call.

    ``problems()`` re-lists the logdir at most every ``interval`` seconds,
    checks at most ``budget`` new bytes for at most about ``seconds``, and returns {run: [{"file",
    "error"}]} (paths relative to the logdir): damaged files, overlapping
    writers and what the walk skipped (run "").  Thread-safe.
    """

    def __init__(self, logdir, budget=64 * 1024 * 1024, interval=1.0, seconds=0.5):
        self.logdir = logdir
        self.remote = file_system.is_remote(logdir)
        # Object storage is read by ranged requests: less per request, so that one stays short.
        self.budget = min(budget, REMOTE_BUDGET) if self.remote else budget
        self.seconds = seconds  # and at most about this long (2,000 small files took 3 s)
        self.interval = interval
        self._scans = {}
        self._identities = {}  # path -> file_identity.Identity at the last listing
        self._changed = {}  # run -> {path: what happened} since the plugin started
        self._unseen = set()  # runs changed since the last take_changed()
        self._notes = []
        self._listed_at = -float("inf")
        self._lock = threading.Lock()  # the listing
        self._checking = threading.Lock()  # one request checks at a time

    def problems(self):
        """The problems found so far, after checking at most ``budget`` new
        bytes.  The lock is held only to list and to report: while one request
        checks, another reports what is known without waiting for it."""
        scans = self.refresh()
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
            self._remember()
            return self._report()

    def refresh(self):
        """List the logdir (at most every ``interval`` seconds) and notice changed
        files; returns [(run, FileScan)]."""
        with self._lock:
            now = time.monotonic()
            if now - self._listed_at >= self.interval:
                self._listed_at = now
                files, self._notes = walk(self.logdir)
                listed = {path: run for run, path in files}
                for path, old in list(self._identities.items()):
                    what = file_identity.change(old, path)
                    if what is not None:
                        run = listed.get(path) or self._scans.get(path, (None,))[0]
                        self._changed.setdefault(run, {})[path] = what
                        self._unseen.add(run)
                        self._scans.pop(path, None)
                        self._identities.pop(path)
                self._scans = {path: (run, self._scans.get(path, (run, FileScan(path)))[1]) for run, path in files}
                self._remember()
            return list(self._scans.values())

    def _remember(self):
        """Identify each file as checked so far (its seam at the end of the whole records checked)."""
        if self.remote:
            return
        for path, (_, scan) in self._scans.items():
            known = self._identities.get(path)
            if known is None or known.seam_end != scan.offset:
                try:
                    self._identities[path] = file_identity.identify(path, scan.offset)
                except OSError:
                    self._identities.pop(path, None)

    def take_changed(self):
        """The runs with a changed file since the last call (their cached state is stale)."""
        with self._lock:
            found, self._unseen = self._unseen, set()
            return found

    def _report(self):
        out = {}
        for run, scan in self._scans.values():
            if scan.damage:
                out.setdefault(run, []).append({"file": self._relative(scan.path), "error": scan.damage})
        for run, a, _, message in overlaps(list(self._scans.values())):
            out.setdefault(run, []).append({"file": self._relative(a), "error": message})
        for run, paths in self._changed.items():
            words = sorted(set(paths.values()))
            out.setdefault(run, []).append({"file": ", ".join(self._relative(p) for p in sorted(paths)),
                                            "error": CHANGED_NOTE % " and ".join(words).capitalize()})
        for note in self._notes:
            out.setdefault("", []).append({"file": None, "error": note})
        return out

    def _relative(self, path):
        if self.remote:
            return path[len(self.logdir.rstrip("/")):].lstrip("/")
        return os.path.relpath(path, self.logdir)
