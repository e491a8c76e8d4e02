"""What every command shares: exit codes, safe printing, opening a logdir
without TensorFlow, choosing runs, tables and JSON."""

import argparse
import re
import sys
import types
from typing import TYPE_CHECKING
from typing import Any
from typing import Dict
from typing import Iterable
from typing import List
from typing import Optional
from typing import Sequence
from typing import TextIO
from typing import Tuple

if TYPE_CHECKING:
    from tb_gradlens import patterns
    from tb_gradlens.serving.logdir import LoadedLogdir
    from tb_gradlens.serving.logdir import Problem
    from tb_gradlens.serving.reading import Source

EXIT_OK = 0
EXIT_ALERTS = 1
EXIT_USAGE = 2
EXIT_READ_ERROR = 3
EXIT_INTERNAL = 4
EXIT_OUTPUT = 5
ENV_DEBUG = "TB_GRADLENS_DEBUG"

# Control characters, and the bidirectional controls that reorder what a
# terminal shows after them (a right-to-left override reverses a label).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code


def printable(text: object) -> str:
    """``text`` safe for a terminal: control characters as \\xNN escapes,
    bidirectional controls (U+202E ...) as \\uNNNN."""
    return _CONTROL.sub(_escape, str(text))


def no_tensorflow_for_reading() -> None:
    """Make TensorBoard's compat layer use its TensorFlow stub.

    The read commands need only TensorBoard's event reading; without this,
    TensorBoard imports TensorFlow when it is installed (seconds of start-up).
    """
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


class CommandError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message: str, status: int = EXIT_READ_ERROR) -> None:
        super().__init__(message)
        self.status = status


def plain_int(text: str) -> int:
    """An argparse type: a plain ASCII integer ("12", "-3"), nothing else
    (``int`` also takes "1_000", " 5", full-width and other scripts' digits)."""
    if not _PLAIN_INT.fullmatch(text):
        raise argparse.ArgumentTypeError("%r is not a plain integer (ASCII digits only)" % text)
    return int(text)


_PLAIN_INT = re.compile(r"-?[0-9]+", re.ASCII)


# The arguments several commands share; each command module adds its own
# subparser with ``add_parser(subparsers)``.
FORMATTER = argparse.RawDescriptionHelpFormatter


def add_logdir_arguments(parser: argparse.ArgumentParser) -> None:
    """LOGDIR and ``-q/--quiet`` (no progress bar)."""
    parser.add_argument("logdir", help="TensorBoard log directory (runs are its sub-directories)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def add_run_filter(parser: argparse.ArgumentParser) -> None:
    """``--run REGEX``."""
    parser.add_argument("--run", help="only runs whose name matches this regex")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run_matcher(pattern: Optional[str]) -> "Optional[patterns.Matcher]":
    """The compiled ``--run`` pattern (None for none); a refused pattern is a
    usage error, said before the logdir is read."""
    if not pattern:
        return None
    from tb_gradlens import patterns

    try:
        return patterns.compile(pattern)
    except patterns.PatternError as e:
        raise CommandError("--run %r: %s" % (pattern, e), EXIT_USAGE) from None


def open_source(args: argparse.Namespace) -> "Tuple[Source, LoadedLogdir]":
    """(Source, LoadedLogdir) of ``args.logdir``; warnings printed to stderr.

    With ``args.run`` (a pattern), the pattern is checked first and only the
    runs it matches are read."""
    matcher = run_matcher(getattr(args, "run", None))
    no_tensorflow_for_reading()
    from tb_gradlens.serving import logdir as logdir_lib
    from tb_gradlens import patterns
    from tb_gradlens.serving import reading

    wanted = None
    if matcher is not None:
        def wanted(runs):
            try:
                return matcher.filter(runs)
            except patterns.PatternError as e:
                raise CommandError("--run %r: %s" % (args.run, e), EXIT_USAGE) from None
    try:
        loaded = logdir_lib.open_logdir(args.logdir, progress=not args.quiet, select_runs=wanted)
    except logdir_lib.LogdirError as e:
        raise CommandError(str(e)) from None
    for problem in loaded.problems:
        print("warning: %s" % printable(problem), file=sys.stderr)
    return reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id), loaded


def read_problems(loaded: "LoadedLogdir", runs: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """The logdir's problems (of ``runs`` and of no run, if given) as JSON error entries."""
    return [p.to_json() for p in loaded.problems if runs is None or p.run is None or p.run in runs]


def select_runs(source: "Source", pattern: Optional[str]) -> List[str]:
    """The runs whose name matches ``pattern`` (Python regex syntax, matched in
    bounded time by ``tb_gradlens.patterns``); a refused pattern is a usage error."""
    matcher = run_matcher(pattern)
    runs = source.runs()
    if matcher is not None:
        from tb_gradlens import patterns

        try:
            runs = [runs[i] for i in matcher.filter(runs)]
        except patterns.PatternError as e:
            raise CommandError("--run %r: %s" % (pattern, e), EXIT_USAGE) from None
    return runs


def open_output(path: Optional[str]) -> TextIO:
    """The text file to write (``-`` or None: standard output); a file that
    cannot be opened is an output error (EXIT_OUTPUT), not a read error."""
    if not path or path == "-":
        return sys.stdout
    try:
        return open(path, "w", newline="", encoding="utf-8")
    except OSError as e:
        raise CommandError("cannot write %s: %s" % (path, e.strerror or e), EXIT_OUTPUT) from None


def known_runs_text(runs: Sequence[str], limit: int = 20) -> str:
    """"a, b, c" (the first ``limit`` and how many more) of run names, printable."""
    shown = ", ".join(printable(r) for r in runs[:limit])
    return (shown + (" and %d more" % (len(runs) - limit) if len(runs) > limit else "")) or "none"


def require_runs(loaded: "LoadedLogdir", names: Iterable[Optional[str]]) -> None:
    """CommandError (exit 3) "no such run" for the first of ``names`` that is
    no run of the logdir (a run directory holding event files), with the
    runs it has: a mistyped run is said as such, not as a missing quantity."""
    for name in names:
        if name is not None and name not in loaded.runs:
            raise CommandError("no such run %r in %s; its runs: %s"
                               % (printable(name), printable(loaded.logdir), known_runs_text(loaded.runs)))


def unread_files(loaded: "LoadedLogdir", runs: Sequence[str]) -> "List[Problem]":
    """The logdir's problems that leave steps of ``runs`` unread (a damaged
    or truncated event file, two writers, a run read only up to an error)."""
    return [p for p in loaded.problems if (p.run in runs or p.run is None)
            and (p.kind in ("damaged", "overlap") or (p.kind == "skipped" and p.run is not None))]


def dumps(obj: Any) -> str:
    """JSON with NaN/Infinity as the strings the HTTP routes use."""
    from tb_gradlens.serving.json_encoding import encode_json

    return encode_json(obj)


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.*g" % (digits, value)
    return printable(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table with columns padded to their widest cell."""
    rows = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
