"""``tb-gradlens demo``: train the demo MLP and serve TensorBoard (``tb_gradlens.demo``).

The demo owns its runs in its logdir, and can be run again and again:

* the port is checked before training: the default one taken (another
  TensorBoard, an earlier demo still serving), the next free one is used and
  said; a port given with ``--port`` and taken stops the demo before it trains;
* the runs of an earlier demo are replaced (said in one line): a second
  demo never adds a writer's files to a run that holds another's;
* a second demo writing the same logdir at the same time is refused (a lock
  held while training);
* TensorFlow's note that its oneDNN kernels may round differently, printed
  twice as it starts, is said once, in words about what it means here.
"""

import argparse
import contextlib
import errno
import os
import re
import socket
import sys
import tempfile

from tb_gradlens.cli import common

DEFAULT_LOGDIR = "/tmp/gradlens_demo"
DEFAULT_PORT = 6006
DEFAULT_STEPS = 300
HOST = "127.0.0.1"
# Ports tried after a taken default one, before TensorBoard picks any free one.
PORT_TRIES = 20
LOCK_NAME = ".tb_gradlens_demo.lock"
_EVENT_FILE = re.compile(r"events\.out\.tfevents\.")
# What TensorFlow prints at import before its logging starts, whatever TF_CPP_MIN_LOG_LEVEL says.
_ONEDNN = "oneDNN custom operations are on"
_ABSL_PREAMBLE = "All log messages before absl::InitializeLog() is called are written to STDERR"
ONEDNN_NOTE = ("TensorFlow's oneDNN kernels are on. They may add numbers in another order than its other "
               "kernels, so float32 results can differ in the last digits, far less than bfloat16 changes them "
               "and less than the float32_seed1 run's noise (TF_ENABLE_ONEDNN_OPTS=0 turns them off).")


class DemoError(Exception):
    """What stops the demo before it trains: said in one line, exit status 2."""


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens demo``'s arguments, help and examples."""
    parser = subparsers.add_parser(
        "demo",
        help="train the demo MLP (float32 and mixed_bfloat16) and serve TensorBoard",
        description="Train the 784-64-64-10 MLP in float32 and mixed_bfloat16 on "
        "scikit-learn's bundled digits, log with tb_gradlens (and one precision advisor round), "
        "then serve TensorBoard with the GradLens tab on 127.0.0.1. Run again, it replaces "
        "its own runs in the logdir.",
        epilog="examples:\n"
        "  tb-gradlens demo\n"
        "  tb-gradlens demo --logdir /tmp/gradlens_demo --port 6006\n"
        "  tb-gradlens demo --steps 50 --no-serve\n\n"
        "exit status: 0 trained (and served until Ctrl-C), 2 usage, a port given with --port in use, or\n"
        "another demo writing LOGDIR (said before training), 4 internal error, 130 interrupted",
        formatter_class=common.FORMATTER,
    )
    parser.add_argument("--logdir", default=DEFAULT_LOGDIR, help="where the runs are written; the demo's own "
                        "runs from an earlier demo there are replaced (default: %(default)s)")
    parser.add_argument("--steps", type=common.plain_int, default=DEFAULT_STEPS,
                        help="training steps of each run (default: %(default)s)")
    parser.add_argument("--port", type=common.plain_int, default=None,
                        help="TensorBoard's port; 0 lets it pick a free one (default: %d, or the next free "
                        "one when %d is taken)" % (DEFAULT_PORT, DEFAULT_PORT))
    parser.add_argument(
        "--no-serve", action="store_true", help="only write the logdir, do not serve (default: serve)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the port, replace the demo's earlier runs, train (and serve unless
    ``--no-serve``); the demo's exit status."""
    # The demo's own process: TensorFlow's start-up notes and the XLA service lines of its XLA comparison
    # are INFO logs (level 0); warnings (level 1) still print.  A level the user set is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        port = None
        if not args.no_serve:
            port, note = choose_port(args.port)
            if note:
                print("tb_gradlens demo: %s" % note, flush=True)
        with writing_lock(args.logdir):
            removed = replace_own_runs(args.logdir)
            if removed:
                print("tb_gradlens demo: replacing its runs of an earlier demo in %s (%s)"
                      % (args.logdir, ", ".join(removed)), flush=True)
            if import_tensorflow_quietly():
                print("tb_gradlens demo: %s" % ONEDNN_NOTE, flush=True)
            from tb_gradlens import demo

            demo.train(args.logdir, steps=args.steps)
    except DemoError as e:
        print("tb-gradlens demo: %s" % e, file=sys.stderr, flush=True)
        return common.EXIT_USAGE
    if args.no_serve:
        print(demo.next_step_text(args.logdir), flush=True)
        return common.EXIT_OK
    from tensorboard import program

    try:
        return demo.serve_until_interrupted(args.logdir, port)
    except program.TensorBoardPortInUseError:
        print("tb-gradlens demo: port %s was taken while the demo trained; serve the logdir with "
              "tensorboard --logdir %s --port PORT, or run the demo again with --port" % (port, args.logdir),
              file=sys.stderr, flush=True)
        return common.EXIT_USAGE


# ---------------------------------------------------------------------------
# The port, the logdir, TensorFlow's start.
# ---------------------------------------------------------------------------


def port_free(port: int, host: str = HOST) -> bool:
    """True when TensorBoard could listen on (host, port) now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server binds
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def choose_port(port=None, host=HOST, default=DEFAULT_PORT):
    """(port to serve on, a note or None), decided before training.

    ``port`` None: ``default``, or when it is taken the next free one (the
    note says which); a port given and taken is a DemoError; 0 lets
    TensorBoard pick."""
    if port == 0:
        return 0, None
    if port is not None:
        if not port_free(port, host):
            raise DemoError("port %d is in use (another TensorBoard?): give --port another one, or --port 0 "
                            "for any free port" % port)
        return port, None
    for candidate in range(default, default + PORT_TRIES):
        if port_free(candidate, host):
            if candidate == default:
                return candidate, None
            return candidate, ("port %d is in use (another TensorBoard?), so this demo serves on %d "
                               "(--port picks one)" % (default, candidate))
    return 0, ("ports %d-%d are in use, so TensorBoard picks a free one (--port picks one)"
               % (default, default + PORT_TRIES - 1))


def replace_own_runs(logdir):
    """Remove the runs an earlier demo wrote in ``logdir`` (a run directory
    of the demo's holding event files only; anything else in it is a
    DemoError); returns the runs removed.  Other runs are left alone."""
    from tb_gradlens import demo

    removed = []
    for run in demo.demo_runs():
        path = os.path.join(logdir, run)
        if not os.path.isdir(path):
            continue
        names = sorted(os.listdir(path))
        foreign = [n for n in names if not (_EVENT_FILE.match(n) and os.path.isfile(os.path.join(path, n)))]
        if foreign:
            raise DemoError("%s holds files the demo did not write (%s): give the demo another --logdir"
                            % (path, ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")))
        for name in names:
            os.remove(os.path.join(path, name))
        os.rmdir(path)
        removed.append(run)
    return removed


@contextlib.contextmanager
def writing_lock(logdir):
    """Held while the demo writes ``logdir`` (a file lock the system drops
    when the process ends): a second demo there at the same time is a
    DemoError, before it trains."""
    import fcntl

    try:
        os.makedirs(logdir, exist_ok=True)
        handle = open(os.path.join(logdir, LOCK_NAME), "w")
    except OSError as e:
        raise DemoError("cannot write %s (%s): give the demo another --logdir" % (logdir, e.strerror or e)) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DemoError("another tb-gradlens demo is writing %s now: wait for it, or give this one "
                            "another --logdir" % logdir) from None
        yield


def import_tensorflow_quietly() -> bool:
    """Import TensorFlow with what it prints before its logging starts (its
    oneDNN note, twice, and absl's preamble) held back; everything else it
    prints is passed on.  True when the oneDNN note was among it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            for line in text.splitlines():
                if _ONEDNN not in line and _ABSL_PREAMBLE not in line:
                    print(line, file=sys.stderr)
    return _ONEDNN in text
