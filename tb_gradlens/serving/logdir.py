"""Opening a logdir without TensorBoard's server: for the command line.

Builds TensorBoard's own reading stack (``EventMultiplexer`` ->
``MultiplexerDataProvider``), the same data-provider interface the plugin
reads through, so the command line and the tab share one analysis.  Runs
are found by ``event_files.walk`` (symlink loops and unreadable
directories are skipped with a note, where TensorBoard's own walk loops
forever or raises) and added one by one.  Before loading, every event
file is checked (``event_files.FileScan``: framing, both CRCs): TensorBoard
silently stops at a bad record, the command line names the file, what it
skipped, and runs whose event files overlap in steps (two writers).
TensorBoard then reads the records the check found good without checking
them again (``checked_reader``: TensorBoard's TF-free reader checks CRCs
one byte at a time in Python).
TensorFlow-free.
"""

import os
import sys
import time

from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tb_gradlens import event_files
from tb_gradlens import file_system
from tb_gradlens import metadata
from tb_gradlens.serving import checked_reader


class LogdirError(Exception):
    """A logdir that cannot be read at all (missing, not a directory, empty)."""


class Problem:
    """Something in a logdir that is not read as written: a damaged file
    (``kind`` "damaged"), overlapping writers ("overlap"), a skipped
    directory or a run that could not be loaded in full ("skipped")."""

    __slots__ = ("run", "path", "message", "kind")

    def __init__(self, run, path, message, kind="skipped"):
        self.run = run
        self.path = path
        self.message = message
        self.kind = kind

    def __str__(self):
        if self.kind == "damaged":
            return "skipped damaged event file %s: %s" % (self.path, self.message)
        if self.kind == "overlap":
            return "run %s: %s" % (self.run, self.message)
        return self.message

    def to_json(self):
        return {"run": self.run, "tag": None, "file": self.path, "error": self.message}


_PROGRESS_BLOCK = 8 * 1024 * 1024  # bytes checked between two updates of the progress bar
PROGRESS_DELAY = 0.5  # seconds of reading before the progress bar appears


def _size(path):
    try:
        return file_system.size(path)
    except OSError:
        return 0


def file_problems(scans):
    """Problems of [(run, FileScan)]: damage, a truncated end, overlapping writers."""
    problems = []
    for run, scan in scans:
        if scan.damage:
            problems.append(Problem(run, scan.path, scan.damage, "damaged"))
        elif scan.truncated:
            problems.append(Problem(run, scan.path, "truncated: it ends inside a record at byte %d (being "
                                    "written, or cut); read the %d whole record(s) before it"
                                    % (scan.offset, scan.records), "damaged"))
    for run, path, _, message in event_files.overlaps(scans):
        problems.append(Problem(run, path, message, "overlap"))
    return problems


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal and only
    after the work has taken longer than ``delay`` seconds; ``unit`` "MB"
    counts bytes.  ``phase`` starts the next pass over the same total (a
    logdir is checked, then loaded: each pass counts its size once)."""

    def __init__(self, total, label, stream=None, delay=None, unit=""):
        self.total = max(int(total), 1)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.delay = PROGRESS_DELAY if delay is None else delay
        self.shown = False
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, done):
        if not self.enabled or time.monotonic() - self.start < self.delay:
            return
        width = 30
        filled = int(width * min(done, self.total) / self.total)
        digits = 1 if self.total < 10e6 else 0  # a small logdir in tenths of a MB
        count = ("%.*f/%.*f %s" % (digits, min(done, self.total) / 1e6, digits, self.total / 1e6, self.unit)
                 if self.unit == "MB" else "%d/%d" % (done, self.total))
        self.stream.write("\r%s [%s%s] %s" % (self.label, "#" * filled, "." * (width - filled), count))
        self.stream.flush()
        self.shown = True

    def phase(self, label):
        """The next pass: a new label, the count from 0 again (the delay runs on)."""
        self.label = label
        if self.shown:
            self.stream.write("\n")
            self.shown = False

    def close(self):
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


class LoadedLogdir:
    """A loaded logdir, what ``open_logdir`` returns (not a ``reading.Source``:
    one is built over it, ``reading.Source(provider, ctx, experiment_id)``):
    ``provider``, ``ctx`` and ``experiment_id`` to read through (as the
    plugin does), and ``problems`` (``Problem``) of what is not read as
    written; ``runs``: the runs read, ``all_runs``: every run of the logdir
    (those a ``select_runs`` left out too)."""

    def __init__(self, logdir, provider, problems, runs, all_runs=None):
        self.logdir = logdir
        self.all_runs = list(runs if all_runs is None else all_runs)
        self.provider = provider
        self.ctx = tb_context.RequestContext()
        self.experiment_id = ""
        self.problems = problems
        self.runs = runs


def open_logdir(logdir, progress=True, select_runs=None):
    """Load every run of ``logdir`` with TensorBoard's reading code.

    Keeps every gradlens sample (as the plugin's loader asks TensorBoard to).
    ``select_runs``: None, or a function of the sorted run names returning
    the indices of the runs to read (the others are neither checked nor
    loaded); it is called before any event file is read.
    Raises LogdirError for a missing, non-directory, unreadable or empty
    logdir; damaged files are skipped past their last good record, and
    every such thing is listed in ``problems``.
    """
    if file_system.is_remote(logdir):
        try:  # a missing bucket, no credentials, no endpoint: "cannot read ...: why", in seconds
            files, notes = event_files.walk(logdir)
        except file_system.CannotRead as e:
            raise LogdirError(str(e)) from None
    else:
        if not os.path.exists(logdir):
            raise LogdirError("logdir %s does not exist" % logdir)
        if not os.path.isdir(logdir):
            raise LogdirError("logdir %s is not a directory" % logdir)
        if not os.access(logdir, os.R_OK | os.X_OK):
            raise LogdirError("logdir %s cannot be read (permission denied)" % logdir)
        files, notes = event_files.walk(logdir)
    problems = [Problem(None, None, note) for note in notes]
    if not files:
        raise LogdirError(
            "logdir %s holds no TensorBoard event files (events.out.tfevents.*)%s"
            % (logdir, "".join("; " + note for note in notes))
        )
    names = sorted({run for run, _ in files})
    if select_runs is not None:
        keep = {names[i] for i in select_runs(names)}
        files = [(run, path) for run, path in files if run in keep]
    sizes = {path: _size(path) for _, path in files}
    # Each byte is checked once (FileScan), then loaded once (TensorBoard): two passes over the logdir's size.
    bar = Progress(sum(sizes.values()), "checking %s" % logdir, unit="MB") if progress else None
    scans = []
    done = 0
    for run, path in files:
        scan = event_files.FileScan(path)
        while True:  # a block at a time (a long record's blocks too), while the check moves on
            before = scan.checked_to
            done += scan.advance(_PROGRESS_BLOCK)
            if bar:
                bar.update(done)
            if scan.checked_to == before:  # the end, damage, or a record cut short
                break
        scans.append((run, scan))
    problems += file_problems(scans)
    checked_reader.remember(scan for _, scan in scans)
    checked_reader.install()
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={metadata.PLUGIN_NAME: 0, "scalars": 0},
    )
    run_dirs = sorted({run: os.path.dirname(path) for run, path in files}.items())
    for run, directory in run_dirs:
        multiplexer.AddRun(directory, run)
    run_bytes = {}
    for run, path in files:
        run_bytes[run] = run_bytes.get(run, 0) + sizes[path]
    if bar:
        bar.phase("loading %s" % logdir)
    done = 0
    for run, _ in run_dirs:
        try:
            multiplexer.GetAccumulator(run).Reload()
        except Exception as e:  # noqa: BLE001 - one unreadable run never stops the others
            problems.append(Problem(run, None, "run %s was read only up to an error (%s: %s)"
                                    % (run, type(e).__name__, e)))
        done += run_bytes[run]
        if bar:
            bar.update(done)
    if bar:
        bar.close()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    return LoadedLogdir(logdir, provider, problems, [run for run, _ in run_dirs], names)
