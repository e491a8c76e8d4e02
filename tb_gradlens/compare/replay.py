"""A non-finite training step replayed: the step as configured and a more
precise reference (float32, or float64 on request), from the same weights,
batch and random draws it had before its update was applied.

Where does the first non-finite value appear, in forward order (each
layer's output, the loss, then each gradient), in each setting?  When the
step as configured is non-finite and the reference is not, the NaN is
16-bit precision; when the reference is non-finite too, it is not (the
data, the learning rate, the loss).  ``Replay`` holds the counts; the
verdict is the TensorFlow-free ``analysis.replays.verdict`` of them, so
the tab, ``report`` and the alert say one thing.
"""

import tensorflow as tf

from tb_gradlens import records
from tb_gradlens.compare import dtype_maps
from tb_gradlens.compare.keras_passes import KerasPass
from tb_gradlens.compare.keras_step import pass_runner
from tb_gradlens.compare.comparison_passes import precision_options
from tb_gradlens.compare.variants import Variant
from tb_gradlens.compare.variants import as_variant
from tb_gradlens.writing import summary_ops

REFERENCES = ("float32", "float64")


def census(tensor):
    """float32 ``[2]``: the non-finite elements of ``tensor`` and its largest
    finite magnitude (0 when none); ``[0, NaN]`` for None."""
    if tensor is None:
        return tf.constant([0.0, float("nan")], tf.float32)
    if isinstance(tensor, tf.IndexedSlices):
        tensor = tensor.values
    wide = tf.cast(tensor, tf.float32) if tensor.dtype != tf.float64 else tensor
    finite = tf.math.is_finite(wide)
    bad = tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.float32))
    top = tf.reduce_max(tf.concat([tf.reshape(tf.abs(tf.where(finite, wide, tf.zeros_like(wide))), [-1]),
                                   tf.zeros([1], wide.dtype)], 0))
    return tf.stack([bad, tf.cast(top, tf.float32)])


class Replay:
    """What a replay found.  ``rows``: layer outputs (forward order), "loss",
    variable paths; ``row_kinds`` (``records.ROW_KINDS``); ``values``
    float32 ``[rows, NONFINITE_REPLAY_COLUMNS]``; ``extras`` of the record."""

    def __init__(self, rows, row_kinds, values, extras):
        self.rows, self.row_kinds, self.values, self.extras = rows, row_kinds, values, extras

    def record(self):
        return records.nonfinite_replay_record(self.rows, self.extras)


class ReplayPasses:
    """The two passes of a replay (traced once, reused).  The candidate
    scales the loss as ``optimizer`` does (a float16 step overflows in its
    scaled backward pass); the reference computes the plain loss, so it is
    the float32 pass of a comparison and can be that pass
    (``reference_pass``: a ``KerasPass`` of ``Variant(reference)`` with
    activations, a comparison's, traced once and reused).  A float32
    reference is IEEE float32 or better where float32 is degraded, as a
    comparison's (``comparison_passes.precision_options``; ``ieee_reference``,
    ``jit_compile``: the replay's passes run under XLA)."""

    def __init__(self, model, reference="float32", optimizer=None, reference_pass=None, ieee_reference=True,
                 jit_compile=None):
        if reference not in REFERENCES:
            raise ValueError("tb_gradlens: a non-finite step is replayed in %s, not %r" % (
                " or ".join(REFERENCES), reference))
        self.model = model
        self.candidate = KerasPass(model, Variant(None, jit_compile=jit_compile), activations=True,
                                   optimizer=optimizer)
        variant = Variant(reference, jit_compile=jit_compile)
        self.reference = reference_pass or KerasPass(model, variant, activations=True,
                                                     **precision_options(variant, False, ieee_reference))


def replay_step(model, x, y=None, sample_weight=None, state_values=None, reference="float32",
                optimizer=None, passes=None, eager=None):
    """Replay one training step of ``model`` as configured and in
    ``reference`` ("float32" or "float64"): same weights, batch, seed states
    (``state_values``, read before the step) and random draws; with
    ``optimizer`` the candidate scales the loss and unscales the gradients
    as it does.  Nothing in the model changes.  Runs eagerly when the
    caller does (``eager``), else traced.  Returns a ``Replay`` (its
    gradients unscaled in both settings)."""
    passes = passes or ReplayPasses(model, reference, optimizer)
    eager = tf.executing_eagerly() if eager is None else bool(eager)
    run_cand, run_ref = pass_runner(passes.candidate, eager), pass_runner(passes.reference, eager)
    cand_loss, cand_grads, cand_acts, draws = run_cand(x, y, sample_weight, state_values)
    # (a comparison's reference pass shared here also returns its half batch's loss and gradients)
    ref_loss, ref_grads, ref_acts = run_ref(x, y, sample_weight, state_values, draws)[:3]
    ref_index = {name: i for i, name in enumerate(passes.reference.activation_rows)}
    rows, kinds, values = [], [], []
    for i, name in enumerate(passes.candidate.activation_rows):
        j = ref_index.get(name)
        rows.append(name)
        kinds.append(records.replays.OUTPUT)
        values.append((census(cand_acts[i]), census(None if j is None else ref_acts[j])))
    rows.append("loss")
    kinds.append(records.replays.LOSS)
    values.append((census(cand_loss), census(ref_loss)))
    for path, c, r in zip(summary_ops.variable_paths(model.trainable_variables), cand_grads, ref_grads):
        rows.append(path)
        kinds.append(records.replays.GRADIENT)
        values.append((census(c), census(r)))
    table = tf.stack([tf.stack([c[0], r[0], c[1], r[1]]) for c, r in values])
    model_policy = dtype_maps.dominant_policy(model)
    dtypes = dtype_maps.model_dtypes(model)
    def side(pass_):
        variant = as_variant(pass_.variant)
        execution = "xla" if variant.jit_compile else ("eager" if eager else "graph")
        stated = {} if pass_.precision is None else {"precision": pass_.precision}
        return dict(variant.describe(model_policy, False, dtypes), execution=execution, **stated)

    extras = records.replay_extras(kinds, side(passes.candidate), side(passes.reference))
    return Replay(rows, kinds, table, extras)
