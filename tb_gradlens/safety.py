"""Logging that never breaks training: what the lens does when it fails.

A debugging tool is used exactly when things are broken, so a failure
inside tb_gradlens' logging (a gradient it cannot summarize, a summary
writer that is closed or whose disk is full, a model it cannot trace a
comparison for) must not stop the training run that it observes.

Default: the failing logging call is abandoned (nothing is written for it,
training goes on) and the failure is reported once per *cause* as a
``GradLensWarning`` (Python ``warnings``); later failures of the same
cause are counted, not repeated (``reported()``).  Strict mode re-raises
instead: ``set_strict(True)``, ``with strict():`` or the environment
variable ``TB_GRADLENS_STRICT=1``.  Use it in tests and CI.

Usage errors (arguments of the wrong length, no step, a record of the
wrong shape) are not failures of the lens: they raise at the first call,
in both modes.

TensorFlow-free; the writers, the comparison API and the Keras callback
all call ``guard``.
"""

import contextlib
import logging
import os
import threading
import warnings

logger = logging.getLogger(__name__)

ENV_STRICT = "TB_GRADLENS_STRICT"


class GradLensWarning(RuntimeWarning):
    """A logging step tb_gradlens skipped because something failed."""


_lock = threading.Lock()
_strict = None  # None: from the environment
_counts = {}  # cause -> number of failures seen


def strict_mode():
    """Whether failures raise (``set_strict``, else $TB_GRADLENS_STRICT)."""
    if _strict is not None:
        return _strict
    return os.environ.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes", "on")


def set_strict(value):
    """True: failures raise; False: warn once and continue; None: from the environment."""
    global _strict
    _strict = None if value is None else bool(value)


@contextlib.contextmanager
def strict(value=True):
    """Strict mode (or not) inside a ``with`` block."""
    global _strict
    previous = _strict
    _strict = bool(value)
    try:
        yield
    finally:
        _strict = previous


def report(cause, error, again=False):
    """Raise ``error`` in strict mode; else warn once for ``cause`` and return.

    Args:
      cause: a short stable name of what failed, e.g. "summary.gradients".
      error: the exception.
      again: warn even if ``cause`` failed before (a failure that started
        anew after a recovery, e.g. a disk that filled a second time).
    """
    if strict_mode():
        raise error
    with _lock:
        count = _counts.get(cause, 0) + 1
        _counts[cause] = count
    logger.debug("tb_gradlens: %s failed", cause, exc_info=error)
    if count == 1 or again:
        tail = (
            "Further failures of %s are not reported; set %s=1 to raise instead." % (cause, ENV_STRICT)
            if not again else "Set %s=1 to raise instead." % ENV_STRICT
        )
        warnings.warn(
            "tb_gradlens: %s failed and was skipped; training continues (%s: %s). %s"
            % (cause, type(error).__name__, _first_line(error), tail),
            GradLensWarning,
            stacklevel=4,
        )


def notify(message):
    """Warn (GradLensWarning) about a recovery, e.g. writing that resumed.
    Not a failure: never raises, not counted by ``reported()``."""
    logger.info("tb_gradlens: %s", message)
    warnings.warn("tb_gradlens: " + message, GradLensWarning, stacklevel=4)


@contextlib.contextmanager
def guard(cause):
    """Run the block; an exception in it is ``report``-ed (raised only in strict mode).

    ``KeyboardInterrupt`` and ``SystemExit`` always pass through.
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001 - the point of the guard
        report(cause, e)


def call(cause, fn, *args, default=None, **kwargs):
    """``fn(*args, **kwargs)``, or ``default`` when it fails (see ``report``)."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        report(cause, e)
        return default


def reported():
    """{cause: number of failures} since the start (or ``reset``)."""
    with _lock:
        return dict(_counts)


def reset():
    """Forget the failures seen (the next one of each cause warns again)."""
    with _lock:
        _counts.clear()


def _first_line(error):
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 500 else line[:497] + "..."
