"""A small logdir written by tb_gradlens' own summary API, with what it holds.

Runs:
  f32   6 steps (0..5): gradients of 3 variables (one None, a NaN at step 3),
        loss, a bf16-vs-f32 divergence record, update_stats, a dtypes map with
        a bfloat16 model output, and a record of a newer format version.
  bf16  8 steps (0..7): gradients in bfloat16 (so its grad_stats tag has
        another digest), loss.
  noise 6 steps: gradients and loss close to f32 (the noise floor).
"""

import os

import ml_dtypes
import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2

from tb_gradlens import metadata
from tb_gradlens import summary
from tb_gradlens.writing import summary_ops

VARIABLES = ("dense/kernel", "dense/bias", "frozen")
SHAPES = ((3, 2), (2,), (4,))
NAN_STEP = 3
F32_STEPS = list(range(6))
BF16_STEPS = list(range(8))
DIV_ROWS = ("dense/kernel", "dense/bias")
REFERENCE = {"label": "float32", "policy": "float32", "device": "CPU", "jit_compile": False}
CANDIDATE = {"label": "bf16", "policy": "mixed_bfloat16", "device": "CPU", "jit_compile": False}
FUTURE_TAG = "future/grad_stats/00000000"


def gradients_at(run, step):
    """The numpy gradients logged for ``run`` at ``step`` (None for 'frozen')."""
    rng = np.random.default_rng(1000 * len(run) + step)
    kernel = rng.normal(size=SHAPES[0]).astype(np.float32)
    bias = np.array([0.0, 1.5 - step], np.float32)
    if run == "f32" and step == NAN_STEP:
        bias[0] = np.nan
    if run == "noise":
        kernel = kernel * np.float32(1.001)
    if run == "bf16":
        kernel = kernel.astype(ml_dtypes.bfloat16)
        bias = bias.astype(ml_dtypes.bfloat16)
    return [kernel, bias, None]


def loss_at(run, step):
    base = 2.0 / (1 + step)
    return {"f32": base, "bf16": base * 1.05, "noise": base * 1.001}[run]


def divergence_at(step):
    """float32 [2, len(DIVERGENCE_COLUMNS_V1)] (a format version 1 record): rel_l2 grows; bias flushes from step 4.

    The record holds 2 gradient rows of a bfloat16 candidate: its limit is
    max(0.1, 96 * 2^-8 * sqrt(2)) = 0.53 (analysis.tolerances), first
    exceeded by dense/kernel at step 3; the bias's flush to zero (0.9) is
    above it from step 4."""
    t = np.zeros((len(DIV_ROWS), len(metadata.DIVERGENCE_COLUMNS_V1)), np.float32)
    cols = metadata.DIVERGENCE_COLUMNS_V1
    t[0, cols.index("rel_l2")] = 0.2 * step  # > 0.53 from step 3
    t[1, cols.index("rel_l2")] = 0.01
    t[:, cols.index("cosine")] = 1.0
    t[1, cols.index("flush_to_zero")] = 0.9 if step >= 4 else 0.0
    return t


def update_at(step):
    t = np.zeros((2, len(metadata.UPDATE_STATS_COLUMNS)), np.float32)
    t[:, 0] = 1e-3
    t[:, 1] = 1e-4 * (step + 1)
    t[0, 2] = 0.9 if step >= 2 else 0.0  # lost updates on the (bfloat16) kernel
    return t


DTYPE_MAP = {
    "layers": [
        {"path": "dense", "class": "Dense", "policy": "mixed_bfloat16",
         "compute_dtype": "bfloat16", "variable_dtype": "float32", "output_dtype": "bfloat16"},
    ],
    "variables": [{"path": "dense/kernel", "dtype": "float32"}],
    "model_output_dtype": "bfloat16",
}


class _Named:
    """A stand-in variable with a Keras-3-style path and a shape."""

    def __init__(self, path, shape):
        self.path = path
        self.shape = shape
        self.dtype = tf.float32


def write_logdir(logdir):
    """Write every run; returns logdir."""
    variables = [_Named(n, s) for n, s in zip(VARIABLES, SHAPES)]
    div_record = metadata.RecordMetadata(
        metadata.DIVERGENCE, DIV_ROWS, metadata.DIVERGENCE_COLUMNS_V1,
        {"reference": REFERENCE, "candidate": CANDIDATE}, version=1,
    )
    upd_record = metadata.RecordMetadata(
        metadata.UPDATE_STATS, DIV_ROWS, metadata.UPDATE_STATS_COLUMNS,
        {"variable_dtypes": ["bfloat16", "float32"]},
    )
    for run, steps in (("f32", F32_STEPS), ("bf16", BF16_STEPS), ("noise", F32_STEPS)):
        writer = tf.summary.create_file_writer(os.path.join(logdir, run))
        with writer.as_default():
            for step in steps:
                grads = [None if g is None else tf.constant(g) for g in gradients_at(run, step)]
                summary.gradients(grads, variables, step=step)
                tf.summary.scalar("loss", loss_at(run, step), step=step)
                if run == "f32":
                    summary_ops.write_record("grads", div_record, tf.constant(divergence_at(step)), step)
                    summary_ops.write_record("optimizer", upd_record, tf.constant(update_at(step)), step)
                    if step == 0:
                        summary.dtypes(DTYPE_MAP, step=step)
                    _write_future(step)
        writer.close()
    return logdir


def _write_future(step):
    record = metadata.RecordMetadata(
        metadata.GRAD_STATS, ["x"], metadata.GRAD_STATS_COLUMNS,
        version=metadata.FORMAT_VERSION + 1,
    )
    md = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=metadata.PLUGIN_NAME, content=metadata.serialize_content(record)
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
    tf.summary.write(
        FUTURE_TAG, tf.zeros([1, len(metadata.GRAD_STATS_COLUMNS)]), step=step,
        metadata=md.SerializeToString(),
    )


# ---------------------------------------------------------------------------
# Independent float64 NumPy statistics of a gradient (the test oracle).
# ---------------------------------------------------------------------------


def expected_stats(grad, size):
    """{column: value} in float64 for a gradient (None: disconnected)."""
    if grad is None:
        out = {c: np.nan for c in metadata.GRAD_STATS_COLUMNS}
        out.update(nan_count=0, posinf_count=0, neginf_count=0, count=size, is_none=1)
        return out
    g = np.asarray(grad, np.float64).ravel()
    fin = g[np.isfinite(g)]
    return {
        "l2_norm": np.sqrt(np.sum(fin * fin)),
        "mean": fin.mean(),
        "std": fin.std(),
        "min": fin.min(),
        "max": fin.max(),
        "max_abs": np.abs(fin).max(),
        "rms": np.sqrt(np.mean(fin * fin)),
        "zero_fraction": np.mean(g == 0),
        "subnormal_fraction": np.mean((np.abs(g) > 0) & (np.abs(g) < 2.0**-126)),
        "nan_count": np.isnan(g).sum(),
        "posinf_count": np.isposinf(g).sum(),
        "neginf_count": np.isneginf(g).sum(),
        "count": g.size,
        "is_none": 0,
    }
