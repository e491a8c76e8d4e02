"""``tb_gradlens.advise(model, data)``: the precision advisor once, outside training."""

import os
from typing import TYPE_CHECKING
from typing import Any
from typing import Dict
from typing import Iterable
from typing import List
from typing import Mapping
from typing import Optional
from typing import Sequence
from typing import Union

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import safety
from tb_gradlens.advisor import limits
from tb_gradlens.advisor import rounds
from tb_gradlens.advisor.units import MAX_UNITS
from tb_gradlens.writing import summary_ops

if TYPE_CHECKING:
    import keras

WRITER = "tb_gradlens.advise"


def as_batch(data):
    """``(x, y, sample_weight)`` tensors from a batch tuple, a dict-free
    ``(x, y[, sample_weight])``, or the first batch of a ``tf.data.Dataset``
    or any iterable of batches."""
    import keras

    if isinstance(data, tf.data.Dataset):
        data = next(iter(data))
    elif not isinstance(data, (tuple, list)):
        data = next(iter(data))
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(tuple(data))

    def tensors(value):
        return None if value is None else tf.nest.map_structure(tf.convert_to_tensor, value)

    return tensors(x), tensors(y), tensors(sample_weight)


class AdviceResult:
    """What ``advise`` measured: ``payload`` (the ``advice`` record's JSON),
    ``float32_layers`` (the recommended layer paths), ``code()`` (the lines
    that apply it) and a readable ``str``."""

    def __init__(self, payload: Mapping[str, Any]) -> None:
        from tb_gradlens import records

        self.payload = payload
        self.advice = records.read_advice(payload)

    @property
    def float32_layers(self) -> List[str]:
        rec = self.advice.recommendation
        return [] if rec is None else list(rec["layers"])

    def code(self) -> str:
        from tb_gradlens.analysis import advice as advice_analysis

        return advice_analysis.apply_code(self.advice)

    def __str__(self) -> str:
        from tb_gradlens.analysis import advice as advice_analysis

        return "\n".join(advice_analysis.text_lines(self.advice))


def advise(model: "keras.Model", data: Iterable[Any], log_dir: Union[str, "os.PathLike[str]", None] = None,
           tolerance: Optional[float] = None, max_units: int = MAX_UNITS, traced: bool = False, step: int = 0,
           name: str = "advisor", max_verifications: int = rounds.MAX_VERIFICATIONS) -> AdviceResult:
    """Attribute the 16-bit error of one training step of ``model`` to its
    layers and recommend the fewest to keep in float32 (README "Precision
    advisor").

    Every unit (a top-level layer with the layers inside it; grouped into
    at most ``max_units`` blocks) is measured alone in float32
    (leave-one-out) and alone in 16 bits (one-at-a-time) on the same
    weights, batch and random draws.  Each pass is judged by the alerts'
    own rule on this batch: every variable's gradient, every layer output
    and the loss against the limit stable 16-bit rounding gives it (the
    harm index: the largest value / limit).  The recommendation (the units
    that bring the predicted harm index to ``tolerance``) is verified by a
    pass with exactly that policy map, and a recommended group of layers is
    narrowed to the layers that matter, each narrowing verified by a pass.
    Nothing in the model changes.

    Args:
      model: a compiled Keras 3 model with 16-bit layers (an unbuilt one
        is built on the batch first).
      data: one batch ``(x, y[, sample_weight])`` or a dataset (its first batch).
      log_dir: also write the ``advice`` record there (at ``step``).
      tolerance: the harm index to reach (None: 1, every judged row within
        the limit the alerts give it).
      max_units: units at most (consecutive layers grouped beyond it).
      traced: run each pass as a ``tf.function`` (slower once, faster when
        repeated); eager by default.
      max_verifications: verification passes at most.

    Returns:
      An ``AdviceResult``.
    """
    reason = limits.several_replicas(model)
    if reason is not None:
        payload = rounds.not_attributable_payload(model, WRITER, reason)
    else:
        batch = as_batch(data)
        compare.built_on(model, batch[0])
        measurer = rounds.new_measurer(model, max_units, traced)
        one_round = rounds.Round(measurer, WRITER, tolerance, None, max_verifications)
        payload = one_round.measure(batch, step)
    if log_dir is not None:
        _write(payload, log_dir, step, name)
    return AdviceResult(payload)


def _write(payload, log_dir, step, name):
    from tb_gradlens.writing import event_writer

    with safety.guard(WRITER + " (writing)"):
        writer = event_writer.create_file_writer(str(log_dir))
        with writer.as_default():
            summary_ops.advice(payload, step=step, name=name)
        writer.flush()
        writer.close()


def keep_in_float32(model: "keras.Model", paths: Sequence[str]) -> None:
    """Set the dtype policy of the layers at ``paths`` (``Layer.path``, as the
    advisor names them; a group's every layer) to float32, on a built model:
    the advisor's recommendation in one line.  A path the model does not
    have raises ValueError (nothing is changed then)."""
    from tb_gradlens.writing import keras_private

    by_path: Dict[str, Any] = {}
    for layer in keras_private.flatten_layers(model)[1:]:
        by_path.setdefault(getattr(layer, "path", None) or layer.name, layer)
    missing = [p for p in paths if p not in by_path]
    if missing:
        raise ValueError("tb_gradlens.keep_in_float32: the model has no layer at %s (its layers: %s)"
                         % (", ".join(repr(p) for p in missing), ", ".join(list(by_path)[:8])))
    for p in paths:
        for layer in keras_private.flatten_layers(by_path[p]):
            layer.dtype_policy = "float32"
