"""How gradlens records reach a summary writer: metadata once, prepared records.

TensorBoard keeps the metadata (rows, columns, extras) of a tag's first
event in a run; every later copy is bytes per step that grow with the
variable count.  ``MetadataOnce`` writes it with each tag's first event to
each writer only; ``PreparedRecord`` makes a record's tag and serialized
metadata once; ``RecordWriter`` writes a fixed set of records in one graph
call per step (the Keras lens, outside its train step).
"""

import collections
import itertools
import weakref

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.numerics import tf_internals

validate_record = records.validate  # the readers' check (``record_entries`` takes a parameter named records)


class MetadataOnce:
    """Writes a tag's metadata with its first event to each writer only.

    TensorBoard keeps the metadata of a tag's first event in a run; every
    later copy is dead weight (for 10^4 variables the rows and dtypes of a
    record are ~0.5 MB, as large as the statistics).  Eagerly, a Python set
    per writer remembers the tags written.  In a traced function, a boolean
    ``tf.Variable`` per (writer, tag), created outside the function, picks
    the metadata or nothing when the graph runs and is set by the write.
    Where such a variable cannot be made (e.g. inside a distribution
    strategy's replica function), every event carries the metadata, as
    TensorBoard's own summaries do.  A write that fails raises as before.
    """

    def __init__(self):
        self._seen = weakref.WeakKeyDictionary()  # writer -> {tag: True or tf.Variable}

    def _state(self, writer):
        try:
            return self._seen.setdefault(writer, {})
        except TypeError:  # not weak-referenceable: no memory, metadata always
            return None

    def write(self, tag, tensor, step, serialized):
        writer = tf_internals.default_summary_writer()
        seen = self._state(writer) if writer is not None else None
        if seen is None:
            return tf.summary.write(tag, tensor, step=step, metadata=serialized)
        if tf.executing_eagerly():
            entry = seen.get(tag)
            done = entry is True or (isinstance(entry, _Flag) and bool(entry.read()))
            written = tf.summary.write(tag, tensor, step=step, metadata=None if done else serialized)
            if bool(written) and not done:
                if isinstance(entry, _Flag):
                    entry.assign(True)
                else:
                    seen[tag] = True
            return written
        flag = seen.get(tag)
        if flag is None or flag is True:
            flag = seen[tag] = self._flag(flag is True)
        if flag is None:
            del seen[tag]
            return tf.summary.write(tag, tensor, step=step, metadata=serialized)
        done = flag.read()
        chosen = tf.where(done, tf.constant(b""), tf.constant(serialized))
        written = tf.summary.write(tag, tensor, step=step, metadata=chosen)
        flag.assign(tf.logical_or(done, written))
        return written

    @staticmethod
    def _flag(value):
        """A boolean flag living outside the traced function, or None."""
        if tf.distribute.has_strategy():
            return None
        try:
            return _Flag(value)
        except Exception:  # noqa: BLE001 - no resource here: metadata on every event
            return None


class _Flag:
    """A boolean resource variable made eagerly, read and set in graphs.

    Raw resource ops, not ``tf.Variable``: a ``tf.function`` refuses new
    variables after its first trace, and a new tag can first appear in any
    trace."""

    _count = itertools.count()

    def __init__(self, value):
        with tf.init_scope():
            self._handle = tf.raw_ops.VarHandleOp(
                dtype=tf.bool, shape=[], shared_name="gradlens_metadata_written_%d" % next(self._count)
            )
            tf.raw_ops.AssignVariableOp(resource=self._handle, value=tf.constant(bool(value)))

    def read(self):
        return tf.raw_ops.ReadVariableOp(resource=self._handle, dtype=tf.bool)

    def assign(self, value):
        return tf.raw_ops.AssignVariableOp(resource=self._handle, value=value)


METADATA_ONCE = MetadataOnce()


class PreparedRecord:
    """A record's tag and serialized metadata, made once (for 10^5 rows the
    JSON and its digest take a large part of a second)."""

    __slots__ = ("record", "tag", "serialized")

    def __init__(self, name, record):
        self.record = record
        self.tag = metadata.tag_for(name, record)
        self.serialized = metadata.create_summary_metadata(record).SerializeToString()

    def write(self, tensor, step):
        """Write ``tensor`` at ``step`` (metadata with the tag's first event)."""
        METADATA_ONCE.write(self.tag, tensor, step, self.serialized)
        return self.tag


_PREPARED = collections.OrderedDict()  # the last few gradient record pairs
_PREPARED_KEEP = 16


def gradient_records(name, rows, variable_dtypes, gradient_dtypes, skipped):
    """(grad_stats, grad_histogram) PreparedRecords, cached by their content."""
    key = (name, tuple(rows), tuple(variable_dtypes), tuple(gradient_dtypes),
           tuple((d["row"], d["dtype"], d["reason"]) for d in skipped))
    prepared = _PREPARED.get(key)
    if prepared is None:
        extras = records.gradient_extras(variable_dtypes, gradient_dtypes, skipped)
        prepared = (PreparedRecord(name, records.grad_stats_record(rows, extras)),
                    PreparedRecord(name, records.grad_histogram_record(rows)))
        _PREPARED[key] = prepared
        while len(_PREPARED) > _PREPARED_KEEP:
            _PREPARED.popitem(last=False)
    else:
        _PREPARED.move_to_end(key)
    return prepared


def record_entries(records):
    """``[(tag, serialized metadata, RecordMetadata, value_fn)]`` of
    ``(name, RecordMetadata, value_fn)`` records, each validated."""
    entries = []
    for name, record, value_fn in records:
        validate_record(record)
        serialized = metadata.create_summary_metadata(record).SerializeToString()
        entries.append((metadata.tag_for(name, record), serialized, record, value_fn))
    return entries


class RecordWriter:
    """Writes a fixed set of records to one summary writer, all in one graph
    call per step (the Keras callback's writes, outside the train step).

    ``records`` is a list of ``(name, RecordMetadata, value_fn)``;
    ``value_fn()`` returns the record's float32 ``[rows, columns]`` tensor
    (e.g. reads a buffer variable).  TensorBoard keeps the metadata of a
    tag's first event, so only the first call writes it: every later
    event holds the step and the tensor alone (for 200 variables the
    metadata, rows and extras, is as large as the statistics).  Calling
    eagerly costs Python and op dispatch per record; traced, the whole set
    is one function call.
    """

    def __init__(self, writer, records):
        self._writer = writer
        self._records = record_entries(records)
        from tb_gradlens.writing import keras_private  # TensorFlow's own flag for once-per-object functions

        self._with_metadata = keras_private.function_per_instance(lambda step: self._write(step, True),
                                                                  autograph=False)
        self._without_metadata = keras_private.function_per_instance(lambda step: self._write(step, False),
                                                                     autograph=False)
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
        if tf_internals.default_summary_writer() is self._writer:
            # Inside the caller's as_default() block, which flushes once for
            # all of a step's records: a block of its own would flush (and
            # check the event file) once per record set.
            write(tf.constant(step, tf.int64))
        else:
            with self._writer.as_default():
                write(tf.constant(step, tf.int64))
        self._metadata_written = True


class InStepRecordWriter:
    """Writes a fixed set of records from inside a traced train step, to a
    writer's resource handle (the Keras callback's writes without XLA
    around them: no buffer, no host read, no graph call of their own).

    ``records`` is a list of ``(name, RecordMetadata, value_fn)`` as for
    ``RecordWriter``, ``value_fn()`` returning the value being written;
    ``scalars`` a list of ``(tag, value_fn)`` written as
    ``tf.summary.scalar`` writes them.  The metadata goes with each tag's
    first event only: a flag variable (``metadata_written``, made before the
    trace where it can be: a first trace that makes a variable is traced
    again; else made here, outside the trace) selects the
    serialized metadata or ``""``, which ``WriteSummary`` leaves out of the
    event.  Nothing is flushed here: the caller flushes after the
    train-function call.
    """

    def __init__(self, handle, records=(), scalars=(), metadata_written=None):
        from tensorboard.plugins.scalar import metadata as scalar_metadata  # noqa: PLC0415

        self._handle = handle
        self._entries = record_entries(records)
        scalar = scalar_metadata.create_summary_metadata(display_name=None, description=None)
        for tag, value_fn in scalars:
            self._entries.append((tag, scalar.SerializeToString(), None, value_fn))
        if metadata_written is None:
            with tf.init_scope():
                metadata_written = tf.Variable(False, trainable=False)
        self._metadata_written = metadata_written

    @property
    def tags(self):
        return [tag for tag, _, _, _ in self._entries]

    def __call__(self, step):
        """Inside the step: write every record at ``step`` (an int64 tensor)."""
        written = self._metadata_written.read_value()
        for tag, serialized, record, value_fn in self._entries:
            values = tf.cast(value_fn(), tf.float32)
            if record is not None:
                metadata.check_tensor_shape(record, values.shape)
            tf.raw_ops.WriteSummary(writer=self._handle, step=step, tensor=values, tag=tag,
                                    summary_metadata=tf.where(written, "", serialized))
        self._metadata_written.assign(True)
        return tf.constant(True)


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


def recording():
    """(maybe, condition): maybe is False when nothing can be recorded."""
    condition = tf.summary.should_record_summaries()
    static = tf.get_static_value(condition)
    return static is None or bool(static), condition


def if_recording(write_fn):
    """Run ``write_fn`` (which returns a bool tensor) only when recording.

    ``write_fn`` only writes (what it writes is computed before, under the
    recording condition: ``numerics.gradient_statistics(when=...)``).  In a
    graph it is called as it is, with no ``tf.cond`` around it: each
    ``tf.summary.write`` in it already writes only when recording, and a
    conditional of ours around those writes, inside a user's own
    conditional (``if step % 10 == 0:`` in a ``tf.function``), made
    Grappler print "Skipping loop optimization for Merge node with control
    input" for its lowered branches on every trace."""
    maybe, condition = recording()
    if not maybe:
        return tf.constant(False)
    if tf.executing_eagerly():
        return write_fn() if bool(condition) else tf.constant(False)
    return tf.logical_and(condition, write_fn())


def write_record(name, record, tensor, step):
    """Write one gradlens record (tensor float32 [rows, columns]) at ``step``.

    The tag's metadata goes with its first event to each writer only
    (``MetadataOnce``).  Returns the tag written to.  Must be called where
    recording is known to be on (inside ``if_recording`` or eagerly after
    checking).
    """
    tag = metadata.tag_for(name, record)
    serialized = metadata.create_summary_metadata(record).SerializeToString()
    METADATA_ONCE.write(tag, tensor, step, serialized)
    return tag


def write_json_record(record, payload, step, name):
    """Write ``payload`` (a JSON-ready dict) as ``record``, of a JSON kind
    (``metadata.JSON_KINDS``): a scalar UTF-8 JSON string."""
    maybe, _ = recording()
    if not maybe:
        return tf.constant(False)
    step = resolve_step(step)
    text = records.json_text(payload)

    def write():
        write_record(name, record, tf.constant(text), step)
        return tf.constant(True)

    with safety.guard("tb_gradlens.summary." + record.kind):
        return if_recording(write)
    return tf.constant(False)


def write_float_record(name, record, values, step):
    """Write a float32 [rows, columns] record when recording; checks the shape."""
    validate_record(record)
    maybe, _ = recording()
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
        return if_recording(write)
    return tf.constant(False)
