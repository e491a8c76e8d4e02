"""Hostile logdirs for the robustness tests, written without TensorFlow.

Event files are written with TensorBoard's own TF-free writer
(``EventFileWriter``), so each builder is fast and says exactly which bytes
it writes.

* ``write_records``: gradlens records (raw plugin content, any tensor).
* ``long_names_run``: 62-character variable names, the target of a
  catastrophic-backtracking pattern (``^(\\w+)+!``).
* ``MALFORMED``: one run per malformed record found by the adversarial pass
  (each beside well-formed data of the same run).
* ``flip_byte``, ``record_offsets``: damage one record's data in place
  (frame intact, data CRC wrong).
"""

import json
import os
import struct

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_gradlens import metadata

STEPS = 3
LONG_NAMES = tuple("layer_%02d_" % i + "k" * 53 for i in range(8))  # 62 word characters each
HOSTILE_PATTERN = r"^(\w+)+!"


def plugin_metadata(content):
    """SummaryMetadata of a gradlens record with ``content`` (a dict, or raw bytes)."""
    if not isinstance(content, (bytes, bytearray)):
        content = json.dumps(content).encode()
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=content),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def content(kind, rows, **extras):
    """Well-formed record content of ``kind`` (extras override)."""
    out = {"version": metadata.FORMAT_VERSION, "kind": kind, "rows": list(rows),
           "columns": list(metadata.KIND_COLUMNS[kind])}
    out.update(extras)
    return out


def json_tensor(obj):
    """A scalar string tensor holding ``obj`` as JSON (or raw bytes)."""
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return np.array(raw, dtype=object)


def stats(rows, value=0.0):
    """grad_stats of ``rows`` one-element gradients equal to ``value`` (NaN counted)."""
    out = np.zeros((rows, len(metadata.GRAD_STATS_COLUMNS)), np.float32)
    columns = metadata.GRAD_STATS_COLUMNS
    finite = np.isfinite(value)
    for name in ("l2_norm", "mean", "min", "max", "max_abs", "rms"):
        out[:, columns.index(name)] = abs(value) if name in ("l2_norm", "max_abs", "rms") else value
    out[:, columns.index("std")] = 0.0 if finite else np.nan
    out[:, columns.index("nan_count")] = float(np.isnan(value))
    out[:, columns.index("zero_fraction")] = float(value == 0)
    out[:, columns.index("count")] = 1
    return out


def write_records(run_dir, items, steps=range(STEPS), scalars=(), filename_suffix=""):
    """Write ``items`` [(tag, content, value or value_fn(step))] at each step,
    and scalar tags ``scalars`` (value 1/(step+1)); returns the file path."""
    os.makedirs(run_dir, exist_ok=True)
    before = set(os.listdir(run_dir))
    writer = EventFileWriter(run_dir, filename_suffix=filename_suffix)
    for step in steps:
        values = []
        for tag, record_content, value in items:
            value = value(step) if callable(value) else value
            values.append(summary_pb2.Summary.Value(
                tag=tag, metadata=plugin_metadata(record_content), tensor=tensor_util.make_tensor_proto(value)))
        for tag in scalars:
            values.append(summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / (step + 1)))
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0e9 + step, summary=summary_pb2.Summary(value=values)))
    writer.close()
    (name,) = set(os.listdir(run_dir)) - before
    return os.path.join(run_dir, name)


def long_names_run(run_dir):
    """A grad_stats record over LONG_NAMES; returns its tag."""
    tag = "gradients/grad_stats/long"
    write_records(run_dir, [(tag, content(metadata.GRAD_STATS, LONG_NAMES), stats(len(LONG_NAMES), 1.0))])
    return tag


_DEEP = "[" * 100_000 + "]" * 100_000
_REF = {"label": "float32", "policy": "float32"}
_CAND = {"label": "bf16", "policy": "mixed_bfloat16"}
_HIST = np.zeros((1, len(metadata.HISTOGRAM_COLUMNS)), np.float32)

# run -> (what is wrong, [(tag, content, value)]).  The tag "bad" of each run is
# the malformed one; "ok" beside it is well formed.
MALFORMED = {
    "dtypes_layers_not_list": ("a dtype map whose layers is not a list",
                               [("m/dtypes/bad", content("dtypes", []),
                                 json_tensor({"layers": {"dense": 1}, "model_output_dtype": "bfloat16"}))]),
    "dtypes_deep_json": ("a dtype map nested 100,000 levels deep",
                         [("m/dtypes/bad", content("dtypes", []), json_tensor(_DEEP.encode()))]),
    "dtypes_not_utf8": ("a dtype map that is not UTF-8",
                        [("m/dtypes/bad", content("dtypes", []), json_tensor(b"\xff\xfe{"))]),
    "update_extras_wrong_type": ("update_stats extras of the wrong type",
                                 [("u/update_stats/bad", content("update_stats", ["a"], variable_dtypes=5),
                                   np.zeros((1, 3), np.float32))]),
    "divergence_extras_wrong_type": ("divergence sides that are not objects",
                                     [("c/divergence/bad", content("divergence", ["a"], reference="x", candidate=[1]),
                                       np.zeros((1, 9), np.float32))]),
    "histogram_extras_wrong_type": ("grad_histogram extras of the wrong type",
                                    [("g/grad_histogram/bad",
                                      content("grad_histogram", ["a"], min_exponent="x", dtype_exponent_limits=5),
                                      _HIST)]),
    "metadata_deep_json": ("record metadata nested 100,000 levels deep",
                           [("g/grad_stats/bad", ('{"version": 1, "kind": "grad_stats", "rows": ["a"], "columns": %s, '
                                                  '"x": %s}' % (json.dumps(list(metadata.GRAD_STATS_COLUMNS)),
                                                                _DEEP)).encode(), stats(1))]),
    "lens_status_wrong_type": ("a lens status whose writer is not text",
                               [("m/lens_status/bad", content("lens_status", []), json_tensor({"writer": 1}))]),
    "tensor_complex": ("a complex tensor", [("g/grad_stats/bad", content("grad_stats", ["a"]),
                                             np.zeros((1, 14), np.complex64))]),
}


def write_malformed(logdir):
    """One run per MALFORMED entry (its bad tag beside a healthy grad_stats
    tag ``g/grad_stats/ok`` with a NaN at step 1), plus a healthy run ``good``."""
    healthy = ("g/grad_stats/ok", content(metadata.GRAD_STATS, ["w"]),
               lambda step: stats(1, np.nan if step == 1 else 1.0))
    for run, (_, items) in MALFORMED.items():
        write_records(os.path.join(logdir, run), items + [healthy], scalars=["loss"])
    write_records(os.path.join(logdir, "good"), [healthy], scalars=["loss"])
    return logdir


def record_offsets(path):
    """[(offset, length)] of every record of a TFRecord file (frames only)."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        out.append((offset, length))
        offset += 12 + length + 4
    return out


def flip_byte(path, record_index):
    """Flip one byte in the middle of record ``record_index``'s data (its
    frame stays intact, its data CRC no longer matches)."""
    offset, length = record_offsets(path)[record_index]
    position = offset + 12 + length // 2
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x5A]))
    return position


def stats_run(run_dir, steps, tag="gradients/grad_stats/s", suffix=""):
    """A grad_stats record (one variable "w", value = step) and a loss at ``steps``;
    returns the event file."""
    return write_records(run_dir, [(tag, content(metadata.GRAD_STATS, ["w"]), lambda s: stats(1, float(s)))],
                         steps=steps, scalars=["loss"], filename_suffix=suffix)


def flipped_run(run_dir, steps=20):
    """``steps`` steps, then one byte flipped in the middle record: (file, byte offset)."""
    path = stats_run(run_dir, range(steps))
    middle = len(record_offsets(path)) // 2
    return path, flip_byte(path, middle)


def two_writers_run(run_dir):
    """Two event files in one run, as two processes write them: steps 0-9 and 5-14."""
    first = stats_run(run_dir, range(0, 10), suffix=".writer_a")
    second = stats_run(run_dir, range(5, 15), suffix=".writer_b")
    return first, second
