"""Checking event files (tb_gradlens.event_files, tb_gradlens.crc32c).

The checks must agree with TensorBoard's own reader: the CRC with its
``masked_crc32c``, the records counted as readable with what its loader
reads, and a file that grows must be checked only where it grew.
"""

import os
import struct

import numpy as np
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference_crc

from tests.support import hostile_logs
from tb_gradlens import crc32c
from tb_gradlens import event_files
from tb_gradlens.serving import logdir_monitor


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=700), min_size=1, max_size=12))
def test_crc32c_many_equals_tensorboards_crc(strings):
    buffer = b"".join(strings)
    lengths = [len(s) for s in strings]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    got = crc32c.masked(crc32c.crc32c_many(buffer, starts, lengths))
    assert [int(x) for x in got] == [reference_crc(s) for s in strings]


def test_crc32c_of_a_long_record():
    data = np.random.default_rng(0).bytes(3 * 256 * 40 + 17)
    assert crc32c.masked_crc32c(data) == reference_crc(data)


def _readable_steps(path):
    return [e.step for e in event_file_loader.EventFileLoader(path).Load() if e.summary.value]


def test_scan_of_a_sound_file_counts_records_and_steps(tmp_path):
    path = hostile_logs.stats_run(str(tmp_path / "run"), range(3, 9))
    scan = event_files.FileScan(path)
    assert scan.advance() == os.path.getsize(path)
    assert scan.damage is None and not scan.truncated
    assert scan.records == scan.readable == 7  # file_version + 6 steps
    assert (scan.step_min, scan.step_max) == (3, 8)


def test_a_flipped_byte_is_found_and_what_tensorboard_skips_is_said(tmp_path):
    path, offset = hostile_logs.flipped_run(str(tmp_path / "run"), steps=20)
    scan = event_files.FileScan(path)
    scan.advance()
    read_by_tensorboard = _readable_steps(path)
    assert read_by_tensorboard == list(range(9))
    assert scan.readable == len(read_by_tensorboard) + 1  # + file_version
    assert (scan.step_min, scan.step_max) == (0, 8)
    record_start = max(o for o, _ in hostile_logs.record_offsets(path) if o < offset)
    assert "data checksum mismatch) at byte %d" % record_start in scan.damage
    assert "not the 10 after it, steps 10-19" in scan.damage


def test_truncated_garbage_and_header_damage(tmp_path):
    path = hostile_logs.stats_run(str(tmp_path / "run"), range(5))
    data = open(path, "rb").read()
    cut = tmp_path / "cut.tfevents"
    cut.write_bytes(data[:-7])
    scan = event_files.FileScan(str(cut))
    scan.advance()
    assert scan.truncated and scan.damage is None and scan.records == 5
    garbage = tmp_path / "garbage.tfevents"
    garbage.write_bytes(np.random.default_rng(1).bytes(5000))
    scan = event_files.FileScan(str(garbage))
    scan.advance()
    assert scan.records == 0 and "corrupted record header at byte 0" in scan.damage
    offsets = hostile_logs.record_offsets(path)
    header = bytearray(data)
    header[offsets[3][0] + 2] ^= 0xFF  # the length of record 3
    bad = tmp_path / "header.tfevents"
    bad.write_bytes(bytes(header))
    scan = event_files.FileScan(str(bad))
    scan.advance()
    assert scan.readable == 3 and "corrupted record header at byte %d" % offsets[3][0] in scan.damage


def test_a_growing_file_is_checked_where_it_grew_and_a_huge_record_alone(tmp_path):
    path = hostile_logs.stats_run(str(tmp_path / "run"), range(4))
    data = open(path, "rb").read()
    growing = tmp_path / "growing.tfevents"
    growing.write_bytes(data[:50])
    scan = event_files.FileScan(str(growing))
    scan.advance()
    assert scan.records == 0 and scan.truncated and scan.offset == 0  # the first record is not whole yet
    growing.write_bytes(data[:400])
    scan.advance()
    checked = scan.offset
    assert 0 < checked < 400 and scan.records >= 1
    growing.write_bytes(data)
    assert scan.advance() == len(data) - checked  # only from where it stopped
    assert scan.records == 5 and scan.damage is None and not scan.truncated
    # One record larger than the scanner's block.
    payload = np.random.default_rng(2).bytes(event_files._BLOCK + 1000)
    record = struct.pack("<Q", len(payload))
    record += struct.pack("<I", reference_crc(record)) + payload + struct.pack("<I", reference_crc(payload))
    huge = tmp_path / "huge.tfevents"
    huge.write_bytes(data + record + data[:40])
    scan = event_files.FileScan(str(huge))
    scan.advance()
    assert scan.records == 6 and scan.damage is None and scan.truncated


def test_overlapping_writers_are_found_and_a_continuation_is_not(tmp_path):
    a, b = hostile_logs.two_writers_run(str(tmp_path / "two"))
    c = hostile_logs.stats_run(str(tmp_path / "continued"), range(0, 5), suffix=".old")
    d = hostile_logs.stats_run(str(tmp_path / "continued"), range(4, 9), suffix=".new")  # shares step 4 only
    scans = []
    for run, path in ((("two", a), ("two", b), ("continued", c), ("continued", d))):
        scan = event_files.FileScan(path)
        scan.advance()
        scans.append((run, scan))
    (found,) = event_files.overlaps(scans)
    assert found[0] == "two" and "both hold steps 5-9" in found[3]


def test_walk_skips_loops_and_keeps_real_runs(tmp_path):
    hostile_logs.stats_run(str(tmp_path / "a" / "b"), range(2))
    hostile_logs.stats_run(str(tmp_path / "c"), range(2))
    os.symlink("..", str(tmp_path / "a" / "b" / "up"))
    os.symlink(str(tmp_path / "c"), str(tmp_path / "alias_of_c"))  # not a loop: a second name
    files, notes = event_files.walk(str(tmp_path))
    assert [run for run, _ in files] == ["a/b", "alias_of_c", "c"]
    assert len(notes) == 1 and "symbolic link loop" in notes[0] and "a/b/up" in notes[0]


def test_monitor_checks_a_bounded_amount_per_call(tmp_path):
    logdir = tmp_path / "logs"
    flipped, _ = hostile_logs.flipped_run(str(logdir / "flipped"))
    hostile_logs.two_writers_run(str(logdir / "two"))
    monitor = logdir_monitor.LogdirMonitor(str(logdir), budget=1, interval=0)  # one file per call
    seen = [sorted(monitor.problems()) for _ in range(3)]
    assert seen == [["flipped"], ["flipped"], ["flipped", "two"]]
    (problem,) = monitor.problems()["flipped"]
    assert problem["file"] == os.path.relpath(flipped, str(logdir))
