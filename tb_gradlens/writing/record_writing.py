"""How gradlens records reach a summary writer: metadata once, prepared records.

TensorBoard keeps the metadata (rows, columns, extras) of a tag's first
event in a run; every later copy is bytes per step that grow with the
variable count.  ``MetadataOnce`` writes it with each tag's first event to
each writer only; ``PreparedRecord`` makes a record's tag and serialized
metadata once; ``RecordWriter`` writes a logged step's records
(``step_records``) for the Keras lens, from inside its train step or after
it.  One rule picks the metadata in a graph (``metadata_unless``).
"""

import collections
import itertools
import weakref

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.numerics import tf_internals
from tb_gradlens.writing import step_records

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
        written = tf.summary.write(tag, tensor, step=step, metadata=metadata_unless(done, serialized))
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


_PREPARED = collections.OrderedDict()  # the last few gradient record sets
_PREPARED_KEEP = 16


def gradient_records(name, rows, variable_dtypes, gradient_dtypes, skipped, histogram=True, sparse_rows=(),
                     sparse_variables=()):
    """``[(PreparedRecord, StepRecord)]`` of ``step_records.gradient_records``,
    cached by their content (``tb_gradlens.summary.gradients``)."""
    key = (name, tuple(rows), tuple(variable_dtypes), tuple(gradient_dtypes),
           tuple((d["row"], d["dtype"], d["reason"]) for d in skipped), bool(histogram), tuple(sparse_rows),
           tuple(step_records.table_rows(sparse_variables)))
    prepared = _PREPARED.get(key)
    if prepared is None:
        extras = records.gradient_extras(variable_dtypes, gradient_dtypes, skipped)
        prepared = [(PreparedRecord(r.name, r.record), r) for r in step_records.gradient_records(
            name, rows, extras, histogram, sparse_rows, sparse_variables)]
        _PREPARED[key] = prepared
        while len(_PREPARED) > _PREPARED_KEEP:
            _PREPARED.popitem(last=False)
    else:
        _PREPARED.move_to_end(key)
    return prepared


def record_entries(record_set):
    """``[(tag, serialized metadata, StepRecord)]`` of ``StepRecord``s, each
    record validated (a scalar's: TensorBoard's scalar metadata)."""
    entries = []
    for step_record in record_set:
        if step_record.record is None:
            entries.append((step_record.name, _scalar_metadata(), step_record))
            continue
        validate_record(step_record.record)
        serialized = metadata.create_summary_metadata(step_record.record).SerializeToString()
        entries.append((metadata.tag_for(step_record.name, step_record.record), serialized, step_record))
    return entries


def _scalar_metadata():
    from tensorboard.plugins.scalar import metadata as scalar_metadata  # noqa: PLC0415

    return scalar_metadata.create_summary_metadata(display_name=None, description=None).SerializeToString()


def metadata_unless(written, serialized):
    """The metadata-once rule, in a graph: ``serialized`` until ``written``
    (a boolean tensor), then ``""``, which ``WriteSummary`` leaves out of the
    event."""
    return tf.where(written, tf.constant(b""), tf.constant(serialized))


class RecordWriter:
    """Writes one logged step's records (``step_records.StepRecord``) to one
    summary writer: the Keras lens's writer of a record set.

    From inside the step (``write_in_step``: to the writer's resource
    ``handle``, no buffer, no host read, nothing flushed: the caller
    flushes after the train-function call), or after the call
    (``__call__``: every record read from the step's buffers by
    ``read(field)``, in one graph call per step, inside the caller's
    ``as_default()`` block when it has one).  The metadata goes with the
    first event of each record only (``metadata_unless``; for 200
    variables the rows and extras are as large as the statistics): a flag
    (``_Flag``, raw resource ops: a new ``tf.Variable`` in a first trace
    makes TensorFlow trace again) is set by the first write.  The loss, a
    TensorBoard scalar (``record`` None), carries its metadata on every
    event written after the call, as ``tf.summary.scalar`` writes it.
    """

    def __init__(self, record_set, writer, read):
        self._writer = writer
        self._read = read
        self._entries = record_entries(record_set)
        self._metadata_written = _Flag(False)
        from tb_gradlens.writing import keras_private  # TensorFlow's own flag for once-per-object functions

        self._write_from_buffers = keras_private.function_per_instance(self._write_buffered, autograph=False)

    @property
    def tags(self):
        return [tag for tag, _, _ in self._entries]

    def write_in_step(self, handle, step, values):
        """Inside the step: write every record of ``values`` (``{field:
        tensor}``) at ``step`` (an int64 tensor) to ``handle``."""
        written = self._metadata_written.read()
        for tag, serialized, step_record in self._entries:
            value = self._checked(step_record, values[step_record.field])
            tf.raw_ops.WriteSummary(writer=handle, step=step, tensor=value, tag=tag,
                                    summary_metadata=metadata_unless(written, serialized))
        self._metadata_written.assign(True)
        return tf.constant(True)

    def __call__(self, step):
        """After the call: write every record at ``step`` (an int) from the buffers."""
        if tf_internals.default_summary_writer() is self._writer:
            # Inside the caller's as_default() block, which flushes once for
            # all of a step's records: a block of its own would flush (and
            # check the event file) once per record set.
            self._write_from_buffers(tf.constant(step, tf.int64))
        else:
            with self._writer.as_default():
                self._write_from_buffers(tf.constant(step, tf.int64))

    def _write_buffered(self, step):
        written = self._metadata_written.read()
        for tag, serialized, step_record in self._entries:
            value = self._checked(step_record, self._read(step_record.field))
            if step_record.record is None:
                tf.summary.scalar(tag, value, step=step)
            else:
                tf.summary.write(tag, value, step=step, metadata=metadata_unless(written, serialized))
        self._metadata_written.assign(True)
        return tf.constant(True)

    @staticmethod
    def _checked(step_record, field_value):
        value = step_record.value(field_value)
        if step_record.record is not None:
            metadata.check_tensor_shape(step_record.record, value.shape)
        return value


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
