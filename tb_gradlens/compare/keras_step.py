"""``compare_keras``: one training step of a Keras model in two numeric settings.

The reference and candidate passes are ``KerasPass``es (``keras_passes``);
what a caller's own training step hands over (its outcome, the gradients it
applied, its seed states) is one ``OwnStep``.
When the candidate rounds to a less precise dtype than the reference, two
more measurements are written beside the candidate's divergence, which the
analysis judges it by (``analysis.harm``):

* the stable-rounding pass (``stable``): what rounding alone does to every
  compared row (``stable_rel_l2``; the loss: ``stable_rel_error``);
* the half batch (the reference pass's ``sampling_noise``): how far the
  reference gradient of half the batch is from the batch's, the sampling
  noise the training already lives with (``half_batch_rel_l2``,
  ``half_batch_rel_error``).
"""

import dataclasses
import warnings
from typing import Optional, Sequence, Union

import keras
import tensorflow as tf

from tb_gradlens import numerics
from tb_gradlens import safety
from tb_gradlens.compare import dtype_maps
from tb_gradlens.compare import graph_dtypes
from tb_gradlens.compare.comparison_passes import candidate_pass_for
from tb_gradlens.compare.comparison_passes import reference_pass_for
from tb_gradlens.compare.comparison_passes import stable_pass_for
from tb_gradlens.compare.keras_passes import owner_compute_dtypes
from tb_gradlens.compare.variants import Comparison
from tb_gradlens.compare.variants import Variant
from tb_gradlens.compare.variants import as_variant
from tb_gradlens.writing import summary_ops


VariantLike = Union[Variant, str, None]  # a Variant, a policy name, or None (the model as configured)


def built_on(model, x):
    """Build an unbuilt ``model`` on the batch ``x`` as its first training
    step would (Keras' initializers drawing as Keras draws them), before any
    pass: a pass that builds it differentiates no variable."""
    if not model.built and tf.executing_eagerly():
        model(x)


@dataclasses.dataclass(frozen=True)
class OwnStep:
    """What the caller's own training step hands ``compare_keras``
    (``outcome`` and ``gradients``: only where the candidate is the model as
    configured, the step itself).

    Attributes:
      outcome: ``(loss, gradients, [(layer name, output)])`` of the training
        step itself, when the caller has them (the Keras callback): then no
        candidate pass runs.  The weights must be those the step
        differentiated, and the reference must run as the step runs (its
        ``jit_compile`` None or ``surrounding_jit``): it draws the step's
        random numbers again.  A fourth element, the candidate's random
        draws (a ``KerasPass``'s fourth output), is replayed instead.
      gradients: the gradients the training step applies (one per
        trainable variable): they replace the candidate pass's, whose loss
        (unless ``loss``), layer outputs and random draws are kept.  A step
        that draws random numbers needs ``seeds`` for them to pair with the
        reference (else they are not used: the record says "recomputed").
      loss: the training step's loss, with ``gradients``.
      seeds: values of the model's seed-generator states before the step
        (``seed_states``), so the passes draw that step's masks.
    """

    outcome: Optional[tuple] = None
    gradients: Optional[Sequence[tf.Tensor]] = None
    loss: Optional[tf.Tensor] = None
    seeds: Optional[Sequence[tf.Tensor]] = None


@dataclasses.dataclass
class _Sides:
    """What the reference and candidate passes computed on one batch."""

    reference_loss: tf.Tensor
    reference_gradients: list
    reference_outputs: list  # layer outputs, in the order of reference_rows
    reference_rows: list
    half_batch: tuple  # (loss, gradients) of the reference on half the batch; (None, None): not measured
    candidate_loss: tf.Tensor
    candidate_gradients: list
    candidate_outputs: list
    candidate_rows: list
    draws: Optional[list]  # the random draws both sides shared
    applied: bool  # the candidate's gradients are the step's own


def compare_keras(model: keras.Model, x, y=None, sample_weight=None, reference: VariantLike = "float32",
                  candidate: VariantLike = None, activations: bool = True, passes: Optional[tuple] = None,
                  surrounding_jit: bool = False, *, own_step: Optional[OwnStep] = None,
                  eager: Optional[bool] = None, stable: bool = True, ieee_reference: bool = True) -> Comparison:
    """Compare one training step of a Keras model between two variants.

    Same batch, same weights, same random draws (dropout masks, noise);
    nothing in the model changes (policies are restored, the passes are
    stateless).

    Args:
      model: a compiled Keras 3 model (``compute_loss`` gives its loss).
      x, y, sample_weight: one batch.
      reference, candidate: Variants or policy names; None = the model as
        configured (the default candidate).
      activations: also compare every layer's output.
      passes: optional ``(reference_pass, candidate_pass[, stable_pass])``
        to reuse (their tf.functions keep their traces; ``reference_pass_for``
        and ``stable_pass_for`` make the first and the third).
      surrounding_jit: whether the caller runs under XLA (recorded for
        variants with ``jit_compile=None``).
      own_step: what the caller's training step hands over (``OwnStep``:
        its outcome, or the gradients it applies and its loss, and the seed
        states read before it).
      eager: run the passes eagerly (default: when the caller runs
        eagerly), as an eager training step computes; else as traced
        functions.  A variant with ``jit_compile=True`` always runs under XLA.
      stable: also run the stable-rounding pass (``stable_pass_for``): where
        the candidate rounds more than the reference, the reference rounded
        between layers; elsewhere the reference computed again (its repeat).
      ieee_reference: a float32 reference (and its stable-rounding pass)
        computes in float64 where float32 measured degraded on the device
        and compilation it runs with (TF32 on Ampere GPUs, oneDNN's fpmath
        mode; ``float32_probe``), so it is IEEE float32 or better; False:
        it computes as float32 is there.  The records state what float32
        measured to be and what the reference computed in either way.

    Returns:
      A Comparison.  Its sides' extras state ``execution`` ("eager",
      "graph" or "xla") and, for the candidate, ``gradients``: "applied"
      (the step's own) or "recomputed".
    """
    reference, candidate = as_variant(reference), as_variant(candidate)
    own_step = OwnStep() if own_step is None else own_step
    built_on(model, x)
    variables = model.trainable_variables
    eager = tf.executing_eagerly() if eager is None else bool(eager)
    if own_step.gradients is not None and not candidate.is_model_as_configured(surrounding_jit):
        raise ValueError("tb_gradlens.compare_keras: OwnStep.gradients are the training step's own: give "
                         "them only with a candidate that is the model as configured (candidate=None)")
    ref_pass, cand_pass, stable_pass = _passes_of(model, reference, candidate, activations, passes,
                                                  own_step.outcome is not None, stable, ieee_reference,
                                                  surrounding_jit)
    batch = (x, y, sample_weight)
    sides = _run_sides(model, batch, reference, candidate, ref_pass, cand_pass, own_step, eager, surrounding_jit)
    reference_16_bit, stable_outcome = {}, None
    if stable_pass is not None:
        repeats = getattr(stable_pass, "repeats", False)  # (the reference again: nothing to round)
        if not repeats:
            reference_16_bit = _reference_16_bit(model, ref_pass, batch + (own_step.seeds, sides.draws))
        with tf.control_dependencies(tf.nest.flatten(sides.reference_loss) if repeats and not eager else []):
            stable_outcome = pass_runner(stable_pass, eager)(*batch, own_step.seeds, sides.draws)
    grad_dtypes = _gradient_dtypes(model, variables, candidate, cand_pass, len(sides.candidate_gradients))
    activation_parts = _activation_divergence(sides, stable_pass, stable_outcome) if activations \
        else ([], None, [], None)
    baselines = _gradient_and_loss_baselines(sides, stable_outcome, grad_dtypes)
    precisions = (ref_pass.precision, None if cand_pass is None else cand_pass.precision)
    return _comparison(model, variables, reference, candidate, surrounding_jit, eager, reference_16_bit, sides,
                       grad_dtypes, activation_parts, baselines, precisions)


def _passes_of(model, reference, candidate, activations, passes, outcome_given, stable, ieee_reference=True,
               surrounding_jit=False):
    """``(reference pass, candidate pass or None, stable pass or None)``:
    ``passes`` given, else made (no candidate pass where the step's own
    outcome is the candidate)."""
    if passes is None:
        passes = (reference_pass_for(model, reference, candidate, activations, ieee_reference=ieee_reference,
                                     surrounding_jit=surrounding_jit),
                  None if outcome_given else candidate_pass_for(model, candidate, activations, surrounding_jit))
    stable_pass = passes[2] if len(passes) > 2 else (
        stable_pass_for(model, reference, candidate, activations, ieee_reference=ieee_reference,
                        surrounding_jit=surrounding_jit) if stable else None)
    return passes[0], passes[1], stable_pass


def _run_sides(model, batch, reference, candidate, ref_pass, cand_pass, own_step, eager, surrounding_jit):
    """Run the reference and candidate passes on ``batch`` with shared
    random draws: the side that runs as the step does draws them, the other
    replays them; the step's own outcome, where given, is the candidate."""
    run_ref, run_cand = pass_runner(ref_pass, eager), pass_runner(cand_pass, eager)
    seeds, applied = own_step.seeds, own_step.outcome is not None
    if own_step.outcome is not None:
        cand_loss, cand_grads, named = own_step.outcome[:3]
        draws = own_step.outcome[3] if len(own_step.outcome) > 3 else None
        if draws is None and not reference.runs_as_surrounding(surrounding_jit):
            raise ValueError("tb_gradlens.compare_keras: with an OwnStep.outcome without its random draws "
                             "the reference must run as the step runs (jit_compile None or %s)"
                             % bool(surrounding_jit))
        cand_rows, cand_acts = [n for n, _ in named], [t for _, t in named]
        ref_out = run_ref(*batch, seeds, draws)
    elif candidate.runs_as_surrounding(surrounding_jit) or not reference.runs_as_surrounding(surrounding_jit):
        cand_loss, cand_grads, cand_acts, draws = run_cand(*batch, seeds)
        if own_step.gradients is not None and (seeds is not None or not draws):
            applied = True
            cand_grads = list(own_step.gradients)
            cand_loss = cand_loss if own_step.loss is None else own_step.loss
        elif own_step.gradients is not None:
            warnings.warn("tb_gradlens: the step of model %s draws random numbers (Dropout, noise): its gradients "
                          "cannot be compared without the seed states read before it (GradLens.seed_states(model), "
                          "then compare_keras(..., seeds=...)); the candidate is recomputed from the current states"
                          % model.name, safety.GradLensWarning, stacklevel=3)
        ref_out = run_ref(*batch, seeds, draws)
    else:  # the reference runs as the step does: it draws, the candidate replays
        ref_out = run_ref(*batch, seeds)
        draws = ref_out[3]
        cand_loss, cand_grads, cand_acts, _ = run_cand(*batch, seeds, draws)
    # The rows of the run above: a later trace of the pass (the 16-bit scan)
    # sets others (a recurrent layer's cell is one row traced, one per time
    # step eagerly).
    ref_rows = list(ref_pass.activation_rows)
    if cand_pass is not None:
        cand_rows = cand_pass.activation_rows
    half_batch = tuple(ref_out[4:6]) if len(ref_out) > 4 else (None, None)
    return _Sides(ref_out[0], ref_out[1], ref_out[2], ref_rows, half_batch,
                  cand_loss, cand_grads, cand_acts, cand_rows, draws, applied)


def _gradient_dtypes(model, variables, candidate, cand_pass, count):
    """The dtype each of the ``count`` candidate gradients was computed in."""
    if candidate.policy is not None:
        return [candidate.compute_dtype] * count
    if cand_pass is not None:
        return cand_pass.compute_dtypes
    return owner_compute_dtypes(model, variables)


def _activation_divergence(sides, stable_pass, stable_outcome):
    """``(rows, divergence or None, dtypes, stable rel_l2 or None)`` of the
    layer outputs both sides recorded."""
    ref_index = {n: i for i, n in enumerate(sides.reference_rows)}
    pairs = [(n, i) for i, n in enumerate(sides.candidate_rows) if n in ref_index]
    rows = [n for n, _ in pairs]
    dtypes = [tf.as_dtype(sides.candidate_outputs[i].dtype).name for _, i in pairs]
    if not pairs:
        return rows, None, dtypes, None
    divergence = numerics.divergence_metrics(
        [sides.candidate_outputs[i] for _, i in pairs], [sides.reference_outputs[ref_index[n]] for n, _ in pairs],
        dtypes)
    stable = _stable_activations(stable_pass, stable_outcome, rows, dtypes,
                                 [sides.reference_outputs[ref_index[n]] for n in rows])
    return rows, divergence, dtypes, stable


def _gradient_and_loss_baselines(sides, stable_outcome, grad_dtypes):
    """``(gradients' stable rel_l2, loss's stable rel error, gradients' half
    batch rel_l2, loss's half batch rel error)``, None where not measured."""
    grad_stable = loss_stable = grad_half = loss_half = None
    if stable_outcome is not None:
        stable_loss, stable_grads = stable_outcome[:2]
        grad_stable = numerics.divergence_metrics(stable_grads, sides.reference_gradients, grad_dtypes)[:, 0]
        loss_stable = numerics.loss_comparison(sides.reference_loss, stable_loss)[:, 3]
    half_loss, half_grads = sides.half_batch
    if half_loss is not None:
        grad_half = numerics.divergence_metrics(half_grads, sides.reference_gradients, grad_dtypes)[:, 0]
        loss_half = numerics.loss_comparison(sides.reference_loss, half_loss)[:, 3]
    return grad_stable, loss_stable, grad_half, loss_half


def _comparison(model, variables, reference, candidate, surrounding_jit, eager, reference_16_bit, sides,
                grad_dtypes, activation_parts, baselines, precisions=(None, None)):
    """The ``Comparison`` of what was measured (``precisions``: the
    reference's and the candidate's ``KerasPass.precision``)."""
    act_rows, act_div, act_dtypes, act_stable = activation_parts
    grad_stable, loss_stable, grad_half, loss_half = baselines
    model_policy = dtype_maps.dominant_policy(model)
    dtypes = dtype_maps.model_dtypes(model)
    stated = [{} if p is None else {"precision": p} for p in precisions]
    return Comparison(
        gradient_dtypes=[tf.as_dtype(d).name for d in grad_dtypes],
        activation_dtypes=act_dtypes,
        reference=reference,
        candidate=candidate,
        reference_extras=dict(reference.describe(model_policy, surrounding_jit, dtypes),
                              execution=_execution(reference, surrounding_jit, eager), **stated[0]),
        reference_16_bit=reference_16_bit,
        candidate_extras=dict(candidate.describe(model_policy, surrounding_jit, dtypes),
                              execution=_execution(candidate, surrounding_jit, eager),
                              gradients="applied" if sides.applied else "recomputed", **stated[1]),
        variable_rows=summary_ops.variable_paths(variables),
        gradient_divergence=numerics.comparison_values(
            numerics.divergence_metrics(sides.candidate_gradients, sides.reference_gradients, grad_dtypes),
            grad_stable, grad_half),
        loss=numerics.comparison_values(numerics.loss_comparison(sides.reference_loss, sides.candidate_loss),
                                        loss_stable, loss_half),
        activation_rows=act_rows,
        activation_divergence=None if act_div is None else numerics.comparison_values(act_div, act_stable),
        reference_gradients=sides.reference_gradients,
        candidate_gradients=sides.candidate_gradients,
    )


def _reference_16_bit(model, ref_pass, args):
    """``{layer path: dtype}`` of the layers the reference pass computes in 16
    bits whatever their policy (``graph_dtypes``), found once per pass."""
    found = getattr(ref_pass, "sixteen_bit_layers", None)
    if found is None:
        graph = ref_pass.concrete_function(*args).graph
        found = ref_pass.sixteen_bit_layers = graph_dtypes.sixteen_bit_layers(graph, model)
    return found


def _stable_activations(stable_pass, stable_outcome, rows, dtypes, references):
    """[L] rel_l2 of the stable pass's layer outputs against the reference's
    (NaN for a row the stable pass did not record)."""
    if stable_outcome is None:
        return None
    index = {n: i for i, n in enumerate(stable_pass.activation_rows)}
    outputs = stable_outcome[2]
    found = [k for k, n in enumerate(rows) if n in index]
    if not found:
        return None
    measured = numerics.divergence_metrics(
        [outputs[index[rows[k]]] for k in found], [references[k] for k in found], [dtypes[k] for k in found]
    )[:, 0]
    if len(found) == len(rows):
        return measured
    nan = tf.fill([len(rows)], float("nan"))
    return tf.tensor_scatter_nd_update(nan, [[k] for k in found], measured)


def pass_runner(pass_, eager):
    """How a pass runs: its ``tf.function``, or eagerly (``eager``, unless
    it compiles with XLA)."""
    if pass_ is None:
        return None
    return pass_.run_eagerly if eager and not pass_.variant.jit_compile else pass_


def _execution(variant, surrounding_jit, eager):
    """"xla", "eager" or "graph": how a side of the comparison computed."""
    if variant.jit_compile or (variant.jit_compile is None and surrounding_jit):
        return "xla"
    return "eager" if eager else "graph"
