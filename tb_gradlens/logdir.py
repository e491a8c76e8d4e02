"""Opening a logdir without TensorBoard's server: for the command line.

Builds TensorBoard's own reading stack (``EventMultiplexer`` ->
``MultiplexerDataProvider``), the same data-provider interface the plugin
reads through, so the command line and the tab share one analysis.  Before
loading, every event file's TFRecord framing is checked (length, header
CRC, truncation): TensorBoard silently stops at a bad record, the command
line names the file instead.  TensorFlow-free.
"""

import os
import struct
import sys
import time

from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import io_wrapper
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

from tb_gradlens import metadata

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_FOOTER = 4  # masked crc32c of the data


class LogdirError(Exception):
    """A logdir that cannot be read at all (missing, not a directory, empty)."""


class FileProblem:
    """A damaged event file: what is wrong, and how much of it is readable."""

    __slots__ = ("path", "records_ok", "message")

    def __init__(self, path, records_ok, message):
        self.path = path
        self.records_ok = records_ok
        self.message = message

    def __str__(self):
        return "%s: %s; read the first %d record(s), skipped the rest" % (
            self.path,
            self.message,
            self.records_ok,
        )


def scan_event_file(path):
    """Check a file's TFRecord framing; returns a FileProblem or None.

    Each record is ``uint64 length, uint32 masked_crc32c(length), data,
    uint32 masked_crc32c(data)``.  The length CRC and the sizes are checked
    for every record (cheap), which catches truncated files and garbage; a
    corrupted payload with an intact frame is left to TensorBoard's reader.
    """
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as e:
        return FileProblem(path, 0, "cannot be read (%s)" % e.strerror)
    records = 0
    offset = 0
    with f:
        while offset < size:
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return FileProblem(path, records, "truncated record header at byte %d" % offset)
            length, length_crc = _HEADER.unpack(header)
            if pywrap_tensorflow.masked_crc32c(header[:8]) != length_crc:
                return FileProblem(path, records, "corrupted record at byte %d" % offset)
            end = offset + _HEADER.size + length + _FOOTER
            if end > size:
                return FileProblem(path, records, "truncated record at byte %d" % offset)
            f.seek(end)
            offset = end
            records += 1
    return None


def event_files(logdir):
    """Every event file under ``logdir``: sorted list of (run, path)."""
    found = []
    for directory in io_wrapper.GetLogdirSubdirectories(logdir):
        run = os.path.relpath(directory, logdir)
        run = "." if run == os.curdir else run
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if io_wrapper.IsSummaryEventsFile(path):
                found.append((run, path))
    return sorted(found)


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal and only
    after the work has taken longer than ``delay`` seconds."""

    def __init__(self, total, label, stream=None, delay=0.5):
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.delay = delay
        self.shown = False
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, done):
        if not self.enabled or time.monotonic() - self.start < self.delay:
            return
        width = 30
        filled = int(width * done / self.total)
        self.stream.write(
            "\r%s [%s%s] %d/%d" % (self.label, "#" * filled, "." * (width - filled), done, self.total)
        )
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


class LogdirSource:
    """A loaded logdir: ``provider``, ``ctx`` and ``experiment_id`` to read
    through (as the plugin does), and ``problems`` with damaged files."""

    def __init__(self, logdir, provider, problems, runs):
        self.logdir = logdir
        self.provider = provider
        self.ctx = tb_context.RequestContext()
        self.experiment_id = ""
        self.problems = problems
        self.runs = runs


def open_logdir(logdir, progress=True):
    """Load every run of ``logdir`` with TensorBoard's reading code.

    Keeps every gradlens sample (as the plugin's loader asks TensorBoard to).
    Raises LogdirError for a missing, non-directory or empty logdir; damaged
    files are skipped past their last good record and listed in
    ``problems``.
    """
    if not os.path.exists(logdir):
        raise LogdirError("logdir %s does not exist" % logdir)
    if not os.path.isdir(logdir):
        raise LogdirError("logdir %s is not a directory" % logdir)
    files = event_files(logdir)
    if not files:
        raise LogdirError(
            "logdir %s holds no TensorBoard event files (events.out.tfevents.*)" % logdir
        )
    bar = Progress(len(files) * 2, "reading %s" % logdir) if progress else None
    problems = []
    for i, (_, path) in enumerate(files):
        problem = scan_event_file(path)
        if problem is not None:
            problems.append(problem)
        if bar:
            bar.update(i + 1)
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={metadata.PLUGIN_NAME: 0, "scalars": 0},
    )
    multiplexer.AddRunsFromDirectory(logdir)
    runs = sorted(multiplexer.Runs())
    for i, run in enumerate(runs):
        multiplexer.GetAccumulator(run).Reload()
        if bar:
            bar.update(len(files) + (i + 1) * len(files) // max(len(runs), 1))
    if bar:
        bar.close()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    return LogdirSource(logdir, provider, problems, runs)
