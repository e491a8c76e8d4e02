"""Writing gradlens summaries, in the style of ``tf.summary``.

Every function here writes to the default summary writer
(``with writer.as_default():``), honours ``tf.summary.record_if``, takes the
step from its argument or ``tf.summary.experimental.get_step()``, works in
eager mode and inside ``tf.function``, and returns a boolean tensor that is
True when something was written.  When nothing is to be recorded (no default
writer, or ``record_if`` false) it computes nothing: the statistics are built
inside the recording branch only.

Summary writes have no XLA kernel: inside a ``jit_compile=True`` function,
compute with ``tb_gradlens.numerics`` and write outside (as the Keras
callback does).

Logging never stops training (``tb_gradlens.safety``): when computing or
writing a record fails (a closed writer, a full disk, a gradient that
cannot be summarized) the call writes nothing, warns once per cause and
returns False; strict mode raises.  Failures inside a ``tf.function`` are
caught while it is traced; an op that fails when the traced graph runs
(e.g. a writer closed after tracing) is TensorFlow's error, raised by the
step itself.
"""

from typing import Any
from typing import Iterable
from typing import Mapping
from typing import Optional
from typing import Sequence
from typing import Union

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.writing import distribute
from tb_gradlens.writing import record_writing
from tb_gradlens.writing import summary_inputs
from tb_gradlens.writing.record_writing import resolve_step, write_record  # noqa: F401 - the documented names
from tb_gradlens.writing.step_records import gradient_indices_record  # noqa: F401 - as before
from tb_gradlens.writing.summary_inputs import as_gradient  # noqa: F401 - the documented names
from tb_gradlens.writing.summary_inputs import dtype_name
from tb_gradlens.writing.summary_inputs import unsupported_dtype_reason
from tb_gradlens.writing.summary_inputs import variable_path  # noqa: F401
from tb_gradlens.writing.summary_inputs import variable_paths


@tf.autograph.experimental.do_not_convert
def gradients(grads: Iterable[Optional[tf.Tensor]], variables: Iterable[tf.Variable],
              step: Union[int, tf.Tensor, None] = None, name: str = "gradients", histogram: bool = True,
              aggregate: bool = True) -> tf.Tensor:
    """Write per-variable gradient statistics (and log2 histograms).

    One record per call: a float32 ``[variables x GRAD_STATS_COLUMNS]``
    tensor (see ``tb_gradlens.metadata``) under tag
    ``<name>/grad_stats/<digest>``, and with ``histogram`` a
    ``[variables x HISTOGRAM_COLUMNS]`` tensor under
    ``<name>/grad_histogram/<digest>``.  None gradients are recorded
    (``is_none`` = 1), never skipped or raised.  ``tf.IndexedSlices``
    gradients are summarized without densifying them
    (``numerics.gradient_statistics``), as the gradient applied (rows of an
    index past the table dropped, never raised on), and their indices are
    counted in a ``gradient_indices`` record (same ``name``): how many, how
    many past the table (an input id out of range), how many negative.  Variables whose gradient or
    value is integer, boolean, complex or a string have no row: they are
    listed in the record's ``extras["skipped"]`` as ``{"row", "dtype",
    "reason"}``.  A failure while computing or writing is reported by
    ``tb_gradlens.safety`` (warning once; raising in strict mode) and
    returns False.

    Args:
      grads: list of gradient tensors or None, as from ``tape.gradient``.
      variables: the matching variables (same length).
      step: int64-castable step; default ``tf.summary.experimental.get_step()``.
      name: prefix of the tags.
      histogram: also write the log2-magnitude histogram.
      aggregate: inside ``strategy.run`` with several replicas, sum the
        per-replica gradients across replicas first (an all-reduce, as the
        optimizer does), so the record describes the applied gradient.
        Every replica must then make the call (``tb_gradlens.writing.distribute``).
        False: ``grads`` are already all-reduced.

    Returns:
      A boolean scalar tensor, True if the records were written.

    Raises:
      ValueError: lengths differ, or recording with no step available.
    """
    grads = list(grads)
    variables = list(variables)
    if len(grads) != len(variables):
        raise ValueError(
            "tb_gradlens.summary.gradients: %d gradients for %d variables"
            % (len(grads), len(variables))
        )
    if aggregate:
        # Before the recording check: recording is on for replica 0 only,
        # and a collective must be joined by every replica.
        grads = distribute.sum_across_replicas(grads)
    maybe, _ = record_writing.recording()
    if not maybe:
        return tf.constant(False)
    step = record_writing.resolve_step(step)
    with safety.guard("tb_gradlens.summary.gradients"):
        return _gradients(grads, variables, step, name, histogram)
    return tf.constant(False)


def _gradients(grads, variables, step, name, histogram):
    all_rows = variable_paths(variables)
    skipped, kept = [], []
    for i, (g, v) in enumerate(zip(grads, variables)):
        reason = unsupported_dtype_reason(g) or unsupported_dtype_reason(v)
        if reason:
            skipped.append({"row": all_rows[i], "dtype": reason[0], "reason": reason[1]})
        else:
            kept.append(i)
    grads = [as_gradient(grads[i]) for i in kept]
    variables = [variables[i] for i in kept]
    sizes = [summary_inputs.static_size(v) for v in variables]
    sparse_at = numerics.sparse_positions(grads)
    prepared = record_writing.gradient_records(
        name, [all_rows[i] for i in kept], [dtype_name(v) for v in variables], [dtype_name(g) for g in grads],
        skipped, histogram, [all_rows[kept[i]] for i in sparse_at], [variables[i] for i in sparse_at],
    )

    def write_step(values):
        for record, step_record in prepared:
            record.write(step_record.value(values[step_record.field]), step)
        return tf.constant(True)

    def index_counts():
        return {"indices": numerics.gradient_index_counts(grads, sizes)} if sparse_at else {}

    if tf.executing_eagerly():
        def write():
            stats, hist = numerics.gradient_statistics(grads, sizes)
            return write_step(dict(index_counts(), stats=stats, histogram=hist))

        return record_writing.if_recording(write)
    # In a graph the pass takes the recording condition itself (nothing is
    # computed when it is false): a tf.cond around it would capture every
    # gradient, which TensorFlow takes seconds to set up for 10^4 of them.
    _, condition = record_writing.recording()
    stats, hist = numerics.gradient_statistics(grads, sizes, when=condition)

    def write_computed():
        return write_step(dict(
            index_counts(),
            stats=summary_inputs.with_static_shape(stats, [len(sizes), len(metadata.GRAD_STATS_COLUMNS)]),
            histogram=summary_inputs.with_static_shape(hist, [len(sizes), len(metadata.HISTOGRAM_COLUMNS)])))

    return record_writing.if_recording(write_computed)


@tf.autograph.experimental.do_not_convert
def dtypes(dtype_map: Mapping[str, Any], step: Union[int, tf.Tensor, None] = None,
           name: str = "model") -> tf.Tensor:
    """Write a dtype map (a JSON-ready dict) as a ``dtypes`` record.

    The tensor is a scalar UTF-8 JSON string; rows list the layer paths.
    Callers write it at the start and when it changes, not every step.
    """
    return record_writing.write_json_record(records.dtypes_record(dtype_map), dtype_map, step, name)


@tf.autograph.experimental.do_not_convert
def lens_status(status: Mapping[str, Any], step: Union[int, tf.Tensor, None] = None,
                name: str = "model") -> tf.Tensor:
    """Write the lens status (``records.lens_status``) as a ``lens_status``
    record: what the writer was asked to log and what it cannot log, and why.
    Writers record it at their start and when it changes."""
    return record_writing.write_json_record(records.lens_status_record(status), status, step, name)


@tf.autograph.experimental.do_not_convert
def advice(payload: Mapping[str, Any], step: Union[int, tf.Tensor, None] = None,
           name: str = "advisor") -> tf.Tensor:
    """Write the precision advisor's advice (``records.advice``) as an
    ``advice`` record; rows name its units."""
    return record_writing.write_json_record(records.advice_record(payload), payload, step, name)


@tf.autograph.experimental.do_not_convert
def divergence(metrics: tf.Tensor, rows: Sequence[str], extras: Mapping[str, Any],
               step: Union[int, tf.Tensor, None] = None, name: str = "compare",
               kind: str = metadata.DIVERGENCE) -> tf.Tensor:
    """Write precomputed divergence metrics (``numerics.divergence_metrics``).

    Args:
      metrics: float32 ``[len(rows), len(DIVERGENCE_COLUMNS)]``, or the
        ``[len(rows), len(DIVERGENCE_METRICS)]`` of ``divergence_metrics``
        (its stable-rounding and half-batch columns are then NaN: not measured).
      rows: variable paths (kind ``divergence``) or layer output names in
        forward order (kind ``activation_divergence``).
      extras: {"reference": {...}, "candidate": {...}} variant descriptions
        ({"label", "policy", "device", "jit_compile"}), plus any other keys.
      step, name: as in ``gradients``.
      kind: metadata.DIVERGENCE or metadata.ACTIVATION_DIVERGENCE.
    """
    if kind not in records.DIVERGENCE_KINDS:
        raise ValueError("tb_gradlens.summary.divergence: kind %r is not a divergence kind" % (kind,))
    record = records.divergence_record(list(rows), extras, kind)
    metrics = tf.cast(tf.convert_to_tensor(metrics), tf.float32)
    if metrics.shape[-1] == len(metadata.DIVERGENCE_METRICS):
        metrics = numerics.comparison_values(metrics)
    return record_writing.write_float_record(name, record, metrics, step)


@tf.autograph.experimental.do_not_convert
def loss_comparison(values: tf.Tensor, extras: Mapping[str, Any], step: Union[int, tf.Tensor, None] = None,
                    name: str = "compare") -> tf.Tensor:
    """Write a ``loss_comparison`` record (``numerics.comparison_values``, [1, 6];
    the [1, 4] of ``numerics.loss_comparison`` gets NaN in the stable-rounding
    and half-batch columns)."""
    record = records.loss_comparison_record(extras)
    values = tf.cast(tf.convert_to_tensor(values), tf.float32)
    if values.shape[-1] == len(metadata.LOSS_COMPARISON_COLUMNS_V1):
        values = numerics.comparison_values(values)
    return record_writing.write_float_record(name, record, values, step)


@tf.autograph.experimental.do_not_convert
def update_stats(stats: tf.Tensor, rows: Sequence[str], step: Union[int, tf.Tensor, None] = None,
                 name: str = "updates", extras: Optional[Mapping[str, Any]] = None) -> tf.Tensor:
    """Write ``update_stats`` (``numerics.update_statistics``, [V, 3]);
    ``extras`` from ``records.update_extras`` (the weights' dtypes)."""
    record = records.update_stats_record(list(rows), extras)
    return record_writing.write_float_record(name, record, stats, step)


@tf.autograph.experimental.do_not_convert
def replica_divergence(grads: Iterable[Optional[tf.Tensor]], variables: Iterable[tf.Variable],
                       step: Union[int, tf.Tensor, None] = None, name: str = records.REPLICAS_NAME,
                       extras: Optional[Sequence[Mapping[str, Any]]] = None) -> tf.Tensor:
    """Write how far each replica's gradient is from the mean over replicas.

    Call inside ``strategy.run`` from every replica (it runs collectives),
    with the replica's own gradients, before the optimizer all-reduces
    them.  Writes one ``divergence`` record per replica i (rows: the
    variables): candidate ``{"label": "replica i", "device": ...}`` is
    replica i's gradient, reference ``{"label": "replica mean"}`` the mean
    over replicas (the applied gradient / replicas); see
    ``distribute.replica_divergence``.  Outside ``strategy.run`` or with
    one replica it does nothing and returns False.

    Args:
      grads, variables: as in ``gradients`` (per-replica gradients).
      step, name: as in ``gradients``.
      extras: one extras dict per replica (default
        ``distribute.replica_extras()``).
    """
    grads, variables = list(grads), list(variables)
    if len(grads) != len(variables):
        raise ValueError(
            "tb_gradlens.summary.replica_divergence: %d gradients for %d variables"
            % (len(grads), len(variables))
        )
    if distribute.replica_context() is None:
        return tf.constant(False)
    reduced = distribute.sum_across_replicas(grads)
    gathered = distribute.replica_divergence(grads, reduced)
    return write_replica_divergence(gathered, variable_paths(variables), step, name, extras)


@tf.autograph.experimental.do_not_convert
def write_replica_divergence(gathered, rows, step=None, name=records.REPLICAS_NAME, extras=None):
    """Write ``[R, V, len(DIVERGENCE_COLUMNS)]`` replica-vs-mean values as R ``divergence`` records."""
    extras = extras or distribute.replica_extras()
    gathered = summary_inputs.with_static_shape(gathered, [len(extras), len(rows), len(metadata.DIVERGENCE_COLUMNS)])
    written = [
        divergence(gathered[i], rows, replica_extras, step=step, name=name)
        for i, replica_extras in enumerate(extras)
    ]
    return tf.reduce_all(tf.stack(written))
