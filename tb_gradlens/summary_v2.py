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

import json

import tensorflow as tf

from tb_gradlens import distribute
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety


def variable_path(variable):
    """A variable's display path: Keras 3 ``path``, else ``name`` minus ':0'."""
    path = getattr(variable, "path", None)
    if not isinstance(path, str) or not path:
        path = getattr(variable, "name", None) or "variable"
    if path.endswith(":0"):
        path = path[:-2]
    return path


def variable_paths(variables):
    """Unique display paths of ``variables`` (a repeated one gets ' (2)')."""
    seen = {}
    paths = []
    for v in variables:
        p = variable_path(v)
        if p in seen:
            seen[p] += 1
            p = "%s (%d)" % (p, seen[p])
        else:
            seen[p] = 1
        paths.append(p)
    return paths


def dtype_name(value):
    """Name of a tensor's or variable's dtype ('none' for None)."""
    if value is None:
        return "none"
    dtype = getattr(value, "dtype", None)
    return tf.as_dtype(dtype).name if dtype is not None else "unknown"


def resolve_step(step):
    """The step to write at: ``step``, else the default step; else ValueError."""
    if step is None:
        step = tf.summary.experimental.get_step()
    if step is None:
        raise ValueError(
            "tb_gradlens: no step given. Pass step=..., or set a default with "
            "tf.summary.experimental.set_step(step) (e.g. optimizer.iterations)."
        )
    return step


def _recording():
    """(maybe, condition): maybe is False when nothing can be recorded."""
    condition = tf.summary.should_record_summaries()
    static = tf.get_static_value(condition)
    return static is None or bool(static), condition


def _if_recording(write_fn):
    """Run ``write_fn`` (which returns a bool tensor) only when recording."""
    maybe, condition = _recording()
    if not maybe:
        return tf.constant(False)
    if tf.executing_eagerly():
        return write_fn() if bool(condition) else tf.constant(False)
    return tf.cond(condition, write_fn, lambda: tf.constant(False))


def write_record(name, record, tensor, step):
    """Write one gradlens record (tensor float32 [rows, columns]) at ``step``.

    Returns the tag written to.  Must be called where recording is known to
    be on (inside ``_if_recording`` or eagerly after checking).
    """
    tag = metadata.tag_for(name, record)
    serialized = metadata.create_summary_metadata(record).SerializeToString()
    tf.summary.write(tag, tensor, step=step, metadata=serialized)
    return tag


class RecordWriter:
    """Writes a fixed set of records to one summary writer, all in one graph
    call per step (the Keras callback's writes, outside the train step).

    ``records`` is a list of ``(name, RecordMetadata, value_fn)``;
    ``value_fn()`` returns the record's float32 ``[rows, columns]`` tensor
    (e.g. reads a buffer variable).  TensorBoard keeps the metadata of a
    tag's first event, so only the first call writes it: every later
    event holds the step and the tensor alone (for 200 variables the
    metadata, rows and extras, is as large as the statistics).  Calling
    eagerly, ``tf.summary.write`` per record costs ~1 ms of Python and op
    dispatch; traced, the whole set is one function call.
    """

    def __init__(self, writer, records):
        self._writer = writer
        self._records = []
        for name, record, value_fn in records:
            metadata.validate(record)
            serialized = metadata.create_summary_metadata(record).SerializeToString()
            self._records.append((metadata.tag_for(name, record), serialized, record, value_fn))
        self._with_metadata = tf.function(lambda step: self._write(step, True), autograph=False)
        self._without_metadata = tf.function(lambda step: self._write(step, False), autograph=False)
        self._metadata_written = False

    @property
    def tags(self):
        return [tag for tag, _, _, _ in self._records]

    def _write(self, step, with_metadata):
        for tag, serialized, record, value_fn in self._records:
            values = tf.cast(value_fn(), tf.float32)
            metadata.check_tensor_shape(record, values.shape)
            tf.summary.write(tag, values, step=step, metadata=serialized if with_metadata else None)
        return tf.constant(True)

    def __call__(self, step):
        """Write every record at ``step`` (an int)."""
        write = self._without_metadata if self._metadata_written else self._with_metadata
        with self._writer.as_default():
            write(tf.constant(step, tf.int64))
        self._metadata_written = True


def gradients(grads, variables, step=None, name="gradients", histogram=True, aggregate=True):
    """Write per-variable gradient statistics (and log2 histograms).

    One record per call: a float32 ``[variables x GRAD_STATS_COLUMNS]``
    tensor (see ``tb_gradlens.metadata``) under tag
    ``<name>/grad_stats/<digest>``, and with ``histogram`` a
    ``[variables x HISTOGRAM_COLUMNS]`` tensor under
    ``<name>/grad_histogram/<digest>``.  None gradients are recorded
    (``is_none`` = 1), never skipped or raised.  ``tf.IndexedSlices``
    gradients are summarized without densifying them
    (``numerics.gradient_statistics``).  Variables whose gradient or
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
        Every replica must then make the call (``tb_gradlens.distribute``).
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
    maybe, _ = _recording()
    if not maybe:
        return tf.constant(False)
    step = resolve_step(step)
    with safety.guard("tb_gradlens.summary.gradients"):
        return _gradients(grads, variables, step, name, histogram)
    return tf.constant(False)


def _gradients(grads, variables, step, name, histogram):
    all_rows = variable_paths(variables)
    skipped = []
    kept = []
    for i, (g, v) in enumerate(zip(grads, variables)):
        reason = unsupported_dtype_reason(g) or unsupported_dtype_reason(v)
        if reason:
            skipped.append({"row": all_rows[i], "dtype": reason[0], "reason": reason[1]})
        else:
            kept.append(i)
    grads = [as_gradient(grads[i]) for i in kept]
    variables = [variables[i] for i in kept]
    rows = [all_rows[i] for i in kept]
    extras = records.gradient_extras(
        [dtype_name(v) for v in variables], [dtype_name(g) for g in grads], skipped
    )
    stats_record = metadata.RecordMetadata(
        metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS, extras
    )
    hist_record = metadata.RecordMetadata(
        metadata.GRAD_HISTOGRAM,
        rows,
        metadata.HISTOGRAM_COLUMNS,
        records.histogram_extras(),
    )
    sizes = [_static_size(v) for v in variables]

    def write():
        stats, hist = numerics.gradient_statistics(grads, sizes)
        write_record(name, stats_record, stats, step)
        if histogram:
            write_record(name, hist_record, hist, step)
        return tf.constant(True)

    return _if_recording(write)


def _json_record(kind, rows, payload, step, name):
    """Write ``payload`` (a JSON-ready dict) as a record of a JSON kind
    (``metadata.JSON_KINDS``): a scalar UTF-8 JSON string; ``rows`` name
    what it describes."""
    maybe, _ = _recording()
    if not maybe:
        return tf.constant(False)
    step = resolve_step(step)
    record = metadata.RecordMetadata(kind, rows, ())
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)

    def write():
        write_record(name, record, tf.constant(text), step)
        return tf.constant(True)

    with safety.guard("tb_gradlens.summary." + kind):
        return _if_recording(write)
    return tf.constant(False)


def dtypes(dtype_map, step=None, name="model"):
    """Write a dtype map (a JSON-ready dict) as a ``dtypes`` record.

    The tensor is a scalar UTF-8 JSON string; rows list the layer paths.
    Callers write it at the start and when it changes, not every step.
    """
    layers = [layer.get("path", "") for layer in dtype_map.get("layers", [])]
    return _json_record(metadata.DTYPES, layers, dtype_map, step, name)


def lens_status(status, step=None, name="model"):
    """Write the lens status (``records.lens_status``) as a ``lens_status``
    record: what the writer was asked to log and what it cannot log, and why.
    Writers record it at their start and when it changes."""
    what = [e["kind"] + ":" + e["name"] for e in status.get("expected", [])]
    return _json_record(metadata.LENS_STATUS, what, status, step, name)


def advice(payload, step=None, name="advisor"):
    """Write the precision advisor's advice (``records.advice``) as an
    ``advice`` record; rows name its units."""
    return _json_record(metadata.ADVICE, [u["name"] for u in payload.get("units", [])], payload, step, name)


def _static_size(variable):
    shape = getattr(variable, "shape", None)
    try:
        n = 1
        for d in shape:
            n *= int(d)
        return n
    except (TypeError, ValueError):
        return 0


def as_gradient(gradient):
    """A gradient as ``numerics.gradient_statistics`` takes it: None,
    ``tf.IndexedSlices`` (kept sparse) or a tensor."""
    if gradient is None or isinstance(gradient, (tf.IndexedSlices, tf.Tensor)):
        return gradient
    return tf.convert_to_tensor(gradient)


# Kept for callers of the former name; no longer densifies IndexedSlices.
_dense = as_gradient


def unsupported_dtype_reason(value):
    """None if ``value`` (a tensor, variable or None) has a real float dtype;
    else (dtype name, why it has no gradient statistics)."""
    if value is None:
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError:
        return (str(dtype), "not a TensorFlow dtype")
    if dtype.is_floating:
        return None
    if dtype.is_complex:
        why = "complex: statistics are defined for real floating-point gradients"
    elif dtype.is_integer or dtype.is_bool:
        why = "integer or boolean: not differentiable, no floating-point statistics"
    else:
        why = "not a floating-point dtype"
    return (dtype.name, why)


def divergence(metrics, rows, extras, step=None, name="compare", kind=metadata.DIVERGENCE):
    """Write precomputed divergence metrics (``numerics.divergence_metrics``).

    Args:
      metrics: float32 ``[len(rows), len(DIVERGENCE_COLUMNS)]``.
      rows: variable paths (kind ``divergence``) or layer output names in
        forward order (kind ``activation_divergence``).
      extras: {"reference": {...}, "candidate": {...}} variant descriptions
        ({"label", "policy", "device", "jit_compile"}), plus any other keys.
      step, name: as in ``gradients``.
      kind: metadata.DIVERGENCE or metadata.ACTIVATION_DIVERGENCE.
    """
    if kind not in (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE):
        raise ValueError("tb_gradlens.summary.divergence: kind %r is not a divergence kind" % (kind,))
    record = metadata.RecordMetadata(kind, list(rows), metadata.DIVERGENCE_COLUMNS, extras)
    return _write_float_record(name, record, metrics, step)


def loss_comparison(values, extras, step=None, name="compare"):
    """Write a ``loss_comparison`` record (``numerics.loss_comparison``, [1, 4])."""
    record = metadata.RecordMetadata(
        metadata.LOSS_COMPARISON, ["loss"], metadata.LOSS_COMPARISON_COLUMNS, extras
    )
    return _write_float_record(name, record, values, step)


def update_stats(stats, rows, step=None, name="updates", extras=None):
    """Write ``update_stats`` (``numerics.update_statistics``, [V, 3]);
    ``extras`` from ``records.update_extras`` (the weights' dtypes)."""
    record = metadata.RecordMetadata(
        metadata.UPDATE_STATS, list(rows), metadata.UPDATE_STATS_COLUMNS, extras
    )
    return _write_float_record(name, record, stats, step)


def _write_float_record(name, record, values, step):
    """Write a float32 [rows, columns] record when recording; checks the shape."""
    metadata.validate(record)
    maybe, _ = _recording()
    if not maybe:
        return tf.constant(False)
    step = resolve_step(step)
    values = tf.convert_to_tensor(values)
    if values.shape.rank is not None and values.shape.is_fully_defined():
        metadata.check_tensor_shape(record, values.shape)

    def write():
        write_record(name, record, tf.cast(values, tf.float32), step)
        return tf.constant(True)

    with safety.guard("tb_gradlens.summary.%s" % record.kind):
        return _if_recording(write)
    return tf.constant(False)


def replica_divergence(grads, variables, step=None, name="replicas", extras=None):
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


def write_replica_divergence(gathered, rows, step=None, name="replicas", extras=None):
    """Write ``[R, V, 9]`` replica-vs-mean metrics as R ``divergence`` records."""
    extras = extras or distribute.replica_extras()
    gathered = tf.ensure_shape(gathered, [len(extras), len(rows), len(metadata.DIVERGENCE_COLUMNS)])
    written = [
        divergence(gathered[i], rows, replica_extras, step=step, name=name)
        for i, replica_extras in enumerate(extras)
    ]
    return tf.reduce_all(tf.stack(written))
