"""Writing on a real disk that fills and frees (tb_gradlens.writing.event_writer).

A small tmpfs is mounted in a private mount namespace (``unshare -m``, or
``unshare -rm`` without root) and filled to the last byte by a file, twice,
while training writes to it (tests/support/disk_full_train.py).  What a user needs:
every step logged before a failure stays readable, a warning comes when
writing fails and again when it resumes (and when it fails anew), and the
steps logged after the disk frees are readable by TensorBoard.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_file_loader

from tb_gradlens import event_files

pytestmark = [pytest.mark.slow]  # trainings that fill a real disk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "support", "disk_full_train.py")
TMPFS_SIZE = "768k"


def _namespace_prefix():
    """The unshare command that may mount a tmpfs here, or None."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    for prefix in ([unshare, "-m"], [unshare, "-r", "-m"]):
        probe = subprocess.run(prefix + ["sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null "
                                         "|| mount -t tmpfs -o size=64k tmpfs \"$TMPDIR\""],
                               capture_output=True, env=dict(os.environ, TMPDIR="/tmp"))
        if probe.returncode == 0:
            return prefix
    return None


PREFIX = _namespace_prefix()
needs_tmpfs = pytest.mark.skipif(PREFIX is None, reason="cannot mount a tmpfs in a private namespace here")


def train_on_a_filling_disk(mode, tmp_path, status=0):
    mount = tmp_path / "mnt"
    out = tmp_path / "out"
    mount.mkdir()
    out.mkdir()
    # The run is copied off the private tmpfs after the process ended (also when it was killed).
    command = "mount -t tmpfs -o size=%s tmpfs %s && { %s %s %s %s %s; s=$?; [ -d %s/run ] || cp -a %s/run %s/run; exit $s; }" % (
        TMPFS_SIZE, mount, sys.executable, SCRIPT, mode, mount, out, out, mount, out)
    result = subprocess.run(PREFIX + ["sh", "-c", command], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == status, result.stderr[-3000:]
    with open(out / "result.json") as f:
        return json.load(f), str(out / "run"), result.stderr


def readable_steps(run_dir):
    """Steps of the grad_stats records TensorBoard reads, per event file (in name order)."""
    out = []
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        scan = event_files.FileScan(path)
        scan.advance()
        assert scan.damage is None and not scan.truncated, (name, scan.damage)  # whole records only
        steps = [e.step for e in event_file_loader.EventFileLoader(path).Load()
                 for v in e.summary.value if "grad_stats" in v.tag]
        out.append(steps)
    return out


def check_resilience(result, files, lost_allowed):
    from tests.support import disk_full_train as plan

    full = set(result["full_steps"])
    steps = [s for f in files for s in f]
    assert len(files) == 3, files  # the first file, and one new file per time the disk freed
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # Every step logged before the first failure is kept, and every step after each recovery.
    assert files[0][:plan.FILL[0] + 1] == list(range(plan.FILL[0] + 1))
    lost = sorted(set(range(plan.STEPS)) - set(steps))
    assert set(lost) <= full and len(lost) <= lost_allowed, (lost, full)
    assert steps[-1] == plan.STEPS - 1
    # A warning when writing failed, and again when it resumed, each time.
    messages = [w["message"] for w in result["warnings"]]
    failed = [m for m in messages if "event file writer failed" in m]
    resumed = [m for m in messages if "writing resumed in a new event file" in m]
    assert len(failed) == 2 and len(resumed) == 2, messages
    assert result["reported"]["tb_gradlens event file writer"] == 2
    assert "No space left on device" in failed[0] or "a torn record" in failed[0]
    assert "Steps up to %d are kept" % files[0][-1] in failed[0]


@needs_tmpfs
def test_keras_callback_keeps_every_step_around_a_disk_that_fills_twice(tmp_path):
    result, run_dir, _ = train_on_a_filling_disk("keras", tmp_path)
    files = readable_steps(run_dir)
    # Only the records of each flush that failed are lost (one step per episode).
    check_resilience(result, files, lost_allowed=2)
    assert result["errors"] == [] and np.all(np.isfinite(result["losses"]))


@needs_tmpfs
def test_readme_loop_with_create_file_writer_warns_and_keeps_steps(tmp_path):
    result, run_dir, _ = train_on_a_filling_disk("loop", tmp_path)
    check_resilience(result, readable_steps(run_dir), lost_allowed=2)
    assert result["errors"] == []  # no step raised


@needs_tmpfs
def test_a_disk_that_stays_full_warns_and_counts_every_kept_record_it_drops(tmp_path):
    """Issue 31: the disk fills at step 8 and never frees.  One warning when
    writing fails, none saying it resumed, and at the end a warning naming how
    many kept records are lost (counted in safety.reported()), never silence."""
    from tests.support import disk_full_train as plan

    result, run_dir, _ = train_on_a_filling_disk("keras_stays_full", tmp_path)
    messages = [w["message"] for w in result["warnings"]]
    assert len([m for m in messages if "event file writer failed" in m]) == 1, messages
    assert not [m for m in messages if "writing resumed" in m], messages
    (dropped,) = [m for m in messages if "dropped" in m and "kept record" in m]
    kept = plan.STEPS - 1 - plan.FILL[0] - 1  # steps logged after the failed flush
    assert int(re.search(r"(\d+) kept records", dropped).group(1)) >= kept, dropped
    assert result["reported"].get("tb_gradlens kept records", 0) >= 1, result["reported"]
    steps = [s for f in readable_steps(run_dir) for s in f]
    assert steps == list(range(plan.FILL[0] + 1))


@needs_tmpfs
def test_kept_steps_are_written_back_as_soon_as_the_disk_frees(tmp_path):
    """Issue 31: a run SIGKILLed one step after its full disk freed has every
    step logged since the disk filled on disk, but the one flush that failed:
    the kept records go back at the first flush that finds space, not a retry
    period later."""
    from tests.support import disk_full_train as plan

    result, run_dir, _ = train_on_a_filling_disk("keras_kill", tmp_path, status=137)
    steps = [s for f in readable_steps(run_dir) for s in f]
    lost = sorted(set(range(plan.KILL + 1)) - set(steps))
    assert len(lost) <= 1 and set(lost) <= set(result["full_steps"]), (lost, steps)
    assert steps[-1] == plan.KILL


@needs_tmpfs
def test_what_tensorflow_alone_does_on_a_full_disk(tmp_path):
    """The fault, measured: TensorFlow's own writer tears the file, nothing is
    warned, and every step after the first failure is unreadable."""
    from tests.support import disk_full_train as plan

    result, run_dir, _ = train_on_a_filling_disk("plain_loop", tmp_path)
    (name,) = os.listdir(run_dir)
    scan = event_files.FileScan(os.path.join(run_dir, name))
    scan.advance()
    assert scan.damage is not None or scan.truncated
    readable = [e.step for e in event_file_loader.EventFileLoader(os.path.join(run_dir, name)).Load()
                for v in e.summary.value if "grad_stats" in v.tag]
    assert max(readable) <= plan.FILL[0] + 1 and result["warnings"] == []


def test_writer_is_a_drop_in_summary_writer(tmp_path):
    import tensorflow as tf

    import tb_gradlens
    from tb_gradlens.writing import distribute
    from tb_gradlens.writing import event_writer

    writer = tb_gradlens.summary.create_file_writer(str(tmp_path / "run"))
    assert isinstance(writer, tf.summary.SummaryWriter)
    assert isinstance(distribute.chief_writer(str(tmp_path / "chief")), event_writer.ResilientFileWriter)

    @tf.function
    def traced(step):
        with writer.as_default():
            tf.summary.scalar("traced", tf.cast(step, tf.float32), step=step)
        return step

    for step in range(3):
        with writer.as_default(step=step):
            tf.summary.scalar("eager", float(step))
        traced(tf.constant(step, tf.int64))
    assert writer.path and os.path.getsize(writer.path) > 0  # flushed at each block's end
    writer.close()
    writer.close()  # twice is fine, as for TensorFlow's writer
    with pytest.raises(RuntimeError, match="closed"):
        writer.as_default()
    events = list(event_file_loader.EventFileLoader(writer.path).Load())
    tags = [(v.tag, e.step) for e in events for v in e.summary.value]
    assert sorted(tags) == sorted([("eager", s) for s in range(3)] + [("traced", s) for s in range(3)])
    assert writer.failures == 0


def test_memory_sink_keeps_replays_and_bounds_what_is_written_while_failing(tmp_path):
    import tensorflow as tf

    from tb_gradlens.writing import event_sink

    handle = tf.raw_ops.SummaryWriter(shared_name="sink_test", container="")
    sink = event_sink.MemorySink(".sinktest.v2", max_queue=100, max_bytes=10**9)
    for flush in range(3):  # three flushes while failing: three memory files
        sink.open(handle)
        for step in range(4):
            tf.raw_ops.WriteScalarSummary(writer=handle, step=10 * flush + step, tag="x", value=float(step))
        tf.raw_ops.CloseSummaryWriter(writer=handle)
        assert sink.collect() == 0
    assert len(sink) == 12 and sink.files() == []
    sink.max_bytes = sink.nbytes * 2 // 3  # room for the last eight
    assert sink.collect() == 4 and len(sink) == 8  # the oldest dropped, counted
    tf.raw_ops.CreateSummaryFileWriter(writer=handle, logdir=str(tmp_path), max_queue=100, flush_millis=10**9,
                                       filename_suffix=".v2")
    assert sink.replay(handle) == 8 and len(sink) == 8  # kept until the writer saw them whole on disk
    sink.forget(8)
    assert len(sink) == 0 and sink.nbytes == 0
    tf.raw_ops.CloseSummaryWriter(writer=handle)
    (name,) = os.listdir(tmp_path)
    steps = [e.step for e in event_file_loader.EventFileLoader(str(tmp_path / name)).Load() if e.summary.value]
    assert steps == [10, 11, 12, 13, 20, 21, 22, 23]  # in the order written
