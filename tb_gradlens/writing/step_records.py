"""The records of one logged step: which record each is, and which value of
the step it holds.

One builder for every writer of a logged step's records:
``tb_gradlens.summary.gradients`` frames its gradient records here, and the
Keras lens frames all of its records here where a step puts its values
(``keras.writing.RecordSink.put``).  A ``StepRecord`` names its record
(``RecordMetadata``; None for the training loss, a TensorBoard scalar) and
the value it holds: ``field`` of the step's values (``{field: tensor}``,
what a ``StepRing`` buffers), its ``index``-th entry, its first ``rows``
rows.  ``record_writing.RecordWriter`` writes them.
"""

from typing import Any
from typing import NamedTuple
from typing import Optional
from typing import Sequence

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import records

LOSS = "loss"  # the training loss's tag and field


class StepRecord(NamedTuple):
    """One record of a logged step and where its value is (see the module)."""

    name: str
    record: Optional[metadata.RecordMetadata]
    field: str
    rows: Optional[int] = None
    index: Optional[int] = None

    def value(self, field_value):
        """The record's float32 value, from the step's value of ``field``."""
        value = tf.cast(field_value, tf.float32)
        if self.index is not None:
            value = value[self.index]
        return value if self.rows is None else value[:self.rows]


def gradient_records(name: str, rows: Sequence[str], extras: Any, histogram: bool = True,
                     sparse_rows: Sequence[str] = (), sparse_variables: Sequence[Any] = (),
                     replica_extras: Sequence[Any] = ()) -> list:
    """A logged step's gradient records: ``grad_stats`` (field ``stats``),
    with ``histogram`` ``grad_histogram`` (``histogram``), for sparse
    gradients ``gradient_indices`` (``indices``, their rows first), and one
    replica ``divergence`` per entry of ``replica_extras`` (``replicas``)."""
    out = [StepRecord(name, records.grad_stats_record(rows, extras), "stats")]
    if histogram:
        out.append(StepRecord(name, records.grad_histogram_record(rows), "histogram"))
    if sparse_rows:
        out.append(StepRecord(name, gradient_indices_record(sparse_rows, sparse_variables), "indices",
                              rows=len(sparse_rows)))
    out.extend(StepRecord(records.REPLICAS_NAME, records.divergence_record(rows, replica), "replicas", index=i)
               for i, replica in enumerate(replica_extras))
    return out


def gradient_indices_record(rows, variables):
    """The ``gradient_indices`` RecordMetadata of the sparse gradients of
    ``variables`` (their table rows from the variables' shapes)."""
    return records.gradient_indices_record(list(rows), table_rows(variables))


def table_rows(variables):
    """The rows of each variable's table (its first dimension; None: unknown)."""
    out = []
    for v in variables:
        shape = getattr(v, "shape", None)
        first = shape[0] if shape is not None and len(shape) else None
        out.append(None if first is None else int(first))
    return out


def update_records(name: str, rows: Sequence[str], variable_dtypes: Sequence[str]) -> list:
    """A logged step's ``update_stats`` (field ``update``)."""
    extras = records.update_extras(list(variable_dtypes))
    return [StepRecord(name, records.update_stats_record(rows, extras), "update")]


def loss_records() -> list:
    """A logged step's training loss (field ``loss``), a TensorBoard scalar."""
    return [StepRecord(LOSS, None, LOSS)]


def optimizer_records(name: str, loss_scaling: bool) -> list:
    """A checked step's ``optimizer_step`` (field ``optimizer``)."""
    return [StepRecord(name, records.optimizer_step_record(loss_scaling), "optimizer")]


def replay_records(name: str, rows: Sequence[str], extras: Any) -> list:
    """A replayed step's ``nonfinite_replay`` (field ``replay``, its first rows)."""
    return [StepRecord(name, records.nonfinite_replay_record(list(rows), extras), "replay", rows=len(rows))]


def comparison_records(name: str, variable_rows: Sequence[str], activation_rows: Sequence[str],
                       extras: Any) -> list:
    """A compared step's ``divergence`` (field ``divergence``),
    ``loss_comparison`` (``loss``) and, with activation rows,
    ``activation_divergence`` (``activation``, its first rows);
    ``extras``: ``{kind: extras}``."""
    out = [
        StepRecord(name, records.divergence_record(list(variable_rows), extras[metadata.DIVERGENCE]), "divergence"),
        StepRecord(name, records.loss_comparison_record(extras[metadata.LOSS_COMPARISON]), "loss"),
    ]
    if activation_rows:
        out.append(StepRecord(name, records.activation_divergence_record(
            list(activation_rows), extras[metadata.ACTIVATION_DIVERGENCE]), "activation", rows=len(activation_rows)))
    return out
