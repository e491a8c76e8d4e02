"""A generated logdir of every record kind the GradLens tab draws, at any size.

Written with TensorBoard's own EventFileWriter in the gradlens format
(tb_gradlens.metadata, tb_gradlens.records): no TensorFlow needed, so 128
variables x 3,000 steps (about 470 MB) take about a minute.

Runs:
  mixed_bfloat16   grad_stats every step, a log2 histogram every
                   ``hist_every`` steps, divergence / activation divergence /
                   loss comparison every ``div_every`` steps (bf16 vs float32),
                   update statistics, a dtype map, the ``loss`` scalar;
                   a NaN appears at 90% of the steps in one variable.
  float32          grad_stats every step and the ``loss`` scalar.
  float32_seed1    the ``loss`` scalar only (the noise floor of Compare).

    python -m benchmarks.frontend_logdir DIR [--variables 128 --steps 3000]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.proto import summary_pb2  # noqa: E402
from tensorboard.summary.writer import event_file_writer  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from tb_gradlens import metadata  # noqa: E402
from tb_gradlens import records  # noqa: E402

BF16 = "mixed_bfloat16"
F32 = "float32"
NOISE = "float32_seed1"


def _event(step, tag, array, md=None):
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(array))
    if md is not None:
        value.metadata.CopyFrom(md)
    return event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=[value]))


def _scalar_event(step, tag, value, first):
    md = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )
    return _event(step, tag, np.float32(value), md if first else None)


def _json_event(step, tag, record, payload):
    value = summary_pb2.Summary.Value(
        tag=tag, tensor=tensor_util.make_tensor_proto(np.array(json.dumps(payload).encode(), dtype=object)))
    value.metadata.CopyFrom(metadata.create_summary_metadata(record))
    return event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=[value]))


class _Tag:
    """A record's tag and metadata; the metadata goes with the first event only."""

    def __init__(self, name, record):
        self.tag = metadata.tag_for(name, record)
        self.md = metadata.create_summary_metadata(record)
        self.first = True

    def event(self, step, array):
        event = _event(step, self.tag, np.asarray(array, np.float32), self.md if self.first else None)
        self.first = False
        return event


def variable_names(n):
    return ["model/block_%03d/%s" % (i // 2, "kernel" if i % 2 == 0 else "bias") for i in range(n)]


def _grad_stats(rng, base, step, nan_row, nan_step):
    """[rows, 14] gradient statistics around ``base`` magnitudes."""
    cols = metadata.GRAD_STATS_COLUMNS
    n = len(base)
    v = np.zeros((n, len(cols)), np.float32)
    l2 = base * (1 + 0.2 * rng.standard_normal(n)) * (1 + step / 3000.0)
    v[:, cols.index("l2_norm")] = np.abs(l2)
    v[:, cols.index("max_abs")] = np.abs(l2) * 0.3
    v[:, cols.index("rms")] = np.abs(l2) * 0.05
    v[:, cols.index("std")] = np.abs(l2) * 0.05
    v[:, cols.index("zero_fraction")] = 0.01
    v[:, cols.index("count")] = 4096
    if step >= nan_step:
        v[nan_row, cols.index("nan_count")] = 1 if step == nan_step else 4096
    return v


def _histogram(rng, base, n_count=4096):
    """[rows, 281] log2 |g| counts: a spread of about 12 binades around each base."""
    n = len(base)
    h = np.zeros((n, len(metadata.HISTOGRAM_COLUMNS)), np.float32)
    centre = np.floor(np.log2(np.maximum(base, 1e-30))).astype(int) - 6 - metadata.MIN_EXPONENT
    for r in range(n):
        bins = np.clip(centre[r] + rng.integers(-6, 7, size=64), 0, metadata.N_EXP_BINS - 1)
        np.add.at(h[r], bins, n_count / 64)
    return h


def write_logdir(logdir, variables=128, steps=3000, hist_every=1, div_every=10, seed=0):
    """Write the three runs; returns a dict of what is where (JSON-ready)."""
    rng = np.random.default_rng(seed)
    rows = variable_names(variables)
    layers = sorted({r.rsplit("/", 1)[0] for r in rows})
    f32 = records.variant("float32", "float32", "float32", "float32")
    bf16 = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
    extras = records.comparison_extras(f32, bf16)
    stats = _Tag("gradients", metadata.RecordMetadata(
        metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS,
        records.gradient_extras(["float32"] * variables, ["float32"] * variables)))
    hist = _Tag("gradients", metadata.RecordMetadata(
        metadata.GRAD_HISTOGRAM, rows, metadata.HISTOGRAM_COLUMNS, records.histogram_extras()))
    div = _Tag("compare", metadata.RecordMetadata(
        metadata.DIVERGENCE, rows, metadata.DIVERGENCE_COLUMNS, extras))
    act = _Tag("compare", metadata.RecordMetadata(
        metadata.ACTIVATION_DIVERGENCE, layers, metadata.DIVERGENCE_COLUMNS, extras))
    loss_cmp = _Tag("compare", metadata.RecordMetadata(
        metadata.LOSS_COMPARISON, ["loss"], metadata.LOSS_COMPARISON_COLUMNS, extras))
    upd = _Tag("updates", metadata.RecordMetadata(
        metadata.UPDATE_STATS, rows, metadata.UPDATE_STATS_COLUMNS,
        records.update_extras(["float32"] * variables)))
    base = np.exp(rng.normal(-4, 1.5, variables))
    nan_row, nan_step = variables // 3, int(steps * 0.9)
    dcols = metadata.DIVERGENCE_COLUMNS
    os.makedirs(logdir, exist_ok=True)

    writer = event_file_writer.EventFileWriter(os.path.join(logdir, BF16), max_queue_size=1000, flush_secs=30)
    dtype_record = metadata.RecordMetadata(metadata.DTYPES, [], [])
    writer.add_event(_json_event(0, metadata.tag_for("model", dtype_record), dtype_record, records.dtype_map(
        [{"path": layer, "class": "Dense", "policy": "mixed_bfloat16", "compute_dtype": "bfloat16",
          "variable_dtype": "float32", "output_dtype": "bfloat16"} for layer in layers],
        [{"path": r, "dtype": "float32"} for r in rows], "float32")))
    for step in range(steps):
        loss = 2.3 * np.exp(-step / 800.0) + 0.05 * rng.random()
        writer.add_event(stats.event(step, _grad_stats(rng, base, step, nan_row, nan_step)))
        writer.add_event(_scalar_event(step, "loss", loss * 1.01, step == 0))
        if step % hist_every == 0:
            writer.add_event(hist.event(step, _histogram(rng, base)))
        if step % div_every == 0:
            d = np.zeros((variables, len(dcols)), np.float32)
            d[:, dcols.index("rel_l2")] = np.abs(rng.normal(0.02, 0.01, variables)) * (1 + step / steps)
            d[:, dcols.index("cosine")] = 1 - d[:, 0] ** 2 / 2
            d[:, dcols.index("norm_ratio")] = 1.0
            # Record format 2: the stable-rounding pass measured (about a third of the candidate's divergence,
            # as on healthy models), the half batch not.
            d[:, dcols.index(metadata.STABLE_REL_L2)] = d[:, 0] * np.abs(rng.normal(0.35, 0.05, variables))
            d[:, dcols.index(metadata.HALF_BATCH_REL_L2)] = np.nan
            a = np.zeros((len(layers), len(dcols)), np.float32)
            a[:, 0] = 0.004 * (1 + np.arange(len(layers)) / len(layers))
            a[:, dcols.index(metadata.STABLE_REL_L2)] = a[:, 0] / 3
            a[:, dcols.index(metadata.HALF_BATCH_REL_L2)] = np.nan
            writer.add_event(div.event(step, d))
            writer.add_event(act.event(step, a))
            writer.add_event(loss_cmp.event(step, [[loss, loss * 1.01, loss * 0.01, 0.01, 0.004, np.nan]]))
            u = np.zeros((variables, 3), np.float32)
            u[:, 0], u[:, 1], u[:, 2] = 1e-4, 1e-3, 0.05
            writer.add_event(upd.event(step, u))
    writer.close()

    writer = event_file_writer.EventFileWriter(os.path.join(logdir, F32), max_queue_size=1000, flush_secs=30)
    stats.first = True
    for step in range(steps):
        loss = 2.3 * np.exp(-step / 800.0) + 0.05 * rng.random()
        writer.add_event(stats.event(step, _grad_stats(rng, base, step, 0, steps + 1)))
        writer.add_event(_scalar_event(step, "loss", loss, step == 0))
    writer.close()
    writer = event_file_writer.EventFileWriter(os.path.join(logdir, NOISE), max_queue_size=1000, flush_secs=30)
    # The noise floor needs gradlens data to be listed as a run of the tab.
    stats.first = True
    for step in range(steps):
        loss = 2.3 * np.exp(-step / 800.0) + 0.05 * rng.random()
        writer.add_event(_scalar_event(step, "loss", loss, step == 0))
        if step % div_every == 0:
            writer.add_event(stats.event(step, _grad_stats(rng, base, step, 0, steps + 1)))
    writer.close()
    return {"rows": rows, "layers": layers, "nan_row": rows[nan_row], "nan_step": nan_step,
            "tags": {"grad_stats": stats.tag, "grad_histogram": hist.tag, "divergence": div.tag}}


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def ensure_logdir(logdir, variables, steps, hist_every, div_every):
    """Write the logdir unless it already holds these sizes; returns its description."""
    params = {"variables": variables, "steps": steps, "hist_every": hist_every, "div_every": div_every,
              "format": metadata.FORMAT_VERSION, "generator": 2}
    marker = os.path.join(logdir, "views_params.json")
    if os.path.exists(marker):
        with open(marker) as f:
            saved = json.load(f)
        if saved.get("params") == params:
            return saved["info"]
    t = time.perf_counter()
    info = write_logdir(logdir, variables, steps, hist_every, div_every)
    info["bytes"] = dir_bytes(logdir)
    info["write_s"] = time.perf_counter() - t
    with open(marker, "w") as f:
        json.dump({"params": params, "info": info}, f)
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir")
    parser.add_argument("--variables", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--hist-every", type=int, default=1)
    parser.add_argument("--div-every", type=int, default=10)
    args = parser.parse_args(argv)
    info = ensure_logdir(args.logdir, args.variables, args.steps, args.hist_every, args.div_every)
    print("%s: %.0f MB" % (args.logdir, info["bytes"] / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
