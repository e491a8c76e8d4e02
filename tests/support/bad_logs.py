"""A logdir of bad input beside good runs (tests of the reading side).

Runs:
  good       gradients of 2 variables at steps 0..4 and a loss (the oracle:
             GOOD_GRADS), written by tb_gradlens.summary.
  bad        one tag of each kind of bad record (BAD_TAGS) and a healthy tag.
  nonfinite  NaN / +Inf / -Inf everywhere: gradients, a divergence record, the loss.
  garbage    only a file of random bytes named like an event file.
  truncated  like good, but its event file ends in the middle of a record,
             as a file being written does.
"""

import os

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2

from tb_gradlens import metadata
from tb_gradlens import summary
from tb_gradlens.writing import summary_ops

STEPS = 5
VARIABLES = ("dense/kernel", "dense/bias")
REFERENCE = {"label": "float32", "policy": "float32", "device": "CPU", "jit_compile": False}
CANDIDATE = {"label": "bf16", "policy": "mixed_bfloat16", "device": "CPU", "jit_compile": False}

# tag -> what is wrong with it (the error must say so).
BAD_TAGS = {
    "bad/malformed_json/0": "not UTF-8 JSON",
    "bad/newer_version/0": "upgrade tb_gradlens",
    "bad/unknown_kind/0": "unknown kind",
    "bad/shape_mismatch/0": "does not match its metadata",
    "bad/string_tensor/0": "not numbers",
}


def good_grads(step):
    rng = np.random.default_rng(step)
    return [rng.normal(size=(3, 2)).astype(np.float32), np.array([0.5, -step], np.float32)]


class _Named:
    def __init__(self, path, shape):
        self.path, self.shape, self.dtype = path, shape, tf.float32


def _raw_metadata(content):
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=metadata.PLUGIN_NAME, content=content
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    ).SerializeToString()


def _content(**fields):
    record = metadata.RecordMetadata(metadata.GRAD_STATS, ["x"], metadata.GRAD_STATS_COLUMNS)
    obj = record.to_json()
    obj.update(fields)
    import json

    return json.dumps(obj).encode()


def write_good(path):
    variables = [_Named(VARIABLES[0], (3, 2)), _Named(VARIABLES[1], (2,))]
    writer = tf.summary.create_file_writer(path)
    with writer.as_default():
        for step in range(STEPS):
            summary.gradients([tf.constant(g) for g in good_grads(step)], variables, step=step)
            tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
    writer.close()


def write_bad(path):
    n_cols = len(metadata.GRAD_STATS_COLUMNS)
    writer = tf.summary.create_file_writer(path)
    with writer.as_default():
        for step in range(STEPS):
            row = tf.zeros([1, n_cols])
            tf.summary.write("bad/malformed_json/0", row, step=step, metadata=_raw_metadata(b'{"version": 1, "kind": '))
            tf.summary.write("bad/newer_version/0", row, step=step, metadata=_raw_metadata(_content(version=99)))
            tf.summary.write("bad/unknown_kind/0", row, step=step, metadata=_raw_metadata(_content(kind="weird")))
            tf.summary.write("bad/shape_mismatch/0", tf.zeros([3, n_cols]), step=step, metadata=_raw_metadata(_content()))
            tf.summary.write(
                "bad/string_tensor/0", tf.fill([1, n_cols], "x"), step=step, metadata=_raw_metadata(_content())
            )
            summary.gradients([tf.constant([1.0, -1.0])], [_Named("healthy", (2,))], step=step)
            # A dtype map that is not JSON at step 1 (the others are fine).
            payload = "{not json" if step == 1 else '{"layers": [], "model_output_dtype": "float32"}'
            record = metadata.RecordMetadata(metadata.DTYPES, [], ())
            summary_ops.write_record("model", record, tf.constant(payload), step)
    writer.close()


def write_nonfinite(path):
    variables = [_Named(VARIABLES[0], (3, 2)), _Named(VARIABLES[1], (2,))]
    div = metadata.RecordMetadata(
        metadata.DIVERGENCE, VARIABLES, metadata.DIVERGENCE_COLUMNS,
        {"reference": REFERENCE, "candidate": CANDIDATE},
    )
    specials = np.array([np.nan, np.inf, -np.inf], np.float32)
    writer = tf.summary.create_file_writer(path)
    with writer.as_default():
        for step in range(STEPS):
            fill = specials[step % 3]
            grads = [np.full((3, 2), fill, np.float32), np.full(2, specials[(step + 1) % 3], np.float32)]
            summary.gradients([tf.constant(g) for g in grads], variables, step=step)
            summary_ops.write_record(
                "precision", div, tf.fill([2, len(metadata.DIVERGENCE_COLUMNS)], fill), step
            )
            tf.summary.scalar("loss", float(fill), step=step)
    writer.close()


def write_logdir(logdir):
    write_good(os.path.join(logdir, "good"))
    write_bad(os.path.join(logdir, "bad"))
    write_nonfinite(os.path.join(logdir, "nonfinite"))
    garbage = os.path.join(logdir, "garbage", "events.out.tfevents.1.garbage")
    os.makedirs(os.path.dirname(garbage))
    with open(garbage, "wb") as f:
        f.write(np.random.default_rng(0).bytes(8192))
    write_good(os.path.join(logdir, "truncated"))
    (name,) = os.listdir(os.path.join(logdir, "truncated"))
    path = os.path.join(logdir, "truncated", name)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - 37])  # the last record cut in the middle
    return logdir, path, data
