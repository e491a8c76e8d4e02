"""The passes of one comparison: the reference (IEEE float32 or better where
float32 is degraded), the candidate and the stable-rounding pass.

Where float32 measured degraded on the device and compilation a float32
side runs with (``float32_probe``: TF32 on Ampere and newer GPUs, oneDNN's
fpmath mode on AMX/Graviton CPUs), a float32 reference and its
stable-rounding pass compute in float64, which TF32 and fpmath leave alone,
inside the same function as the training step: the step keeps its own
setting bit for bit (the TF32 switch is process-wide, and TensorFlow's GPU
kernels read it when they run, so a reference traced with it off would not
run with it off).  Every float32 side states what float32 measured to be
there (``KerasPass.precision``), and the records carry it.
"""

import keras

from tb_gradlens.compare import float32_probe
from tb_gradlens.compare.keras_passes import KerasPass
from tb_gradlens.compare.keras_passes import model_layers
from tb_gradlens.compare.stable import StableRoundingPass
from tb_gradlens.compare.stable import rounding_dtypes
from tb_gradlens.compare.variants import as_variant


def rounds_more(model, reference, candidate):
    """Whether some layer of the candidate rounds to a less precise dtype than
    the reference computes in (a precision comparison, not another device
    or XLA); a reference that is the model as configured never does."""
    reference, candidate = as_variant(reference), as_variant(candidate)
    if reference.compute_dtype is None:
        return False
    configured = {id(layer): layer.compute_dtype for layer in model_layers(model)}
    return bool(rounding_dtypes(model, candidate, reference.compute_dtype, configured))


def precision_options(variant, surrounding_jit=False, ieee_reference=True):
    """``{"computed_in", "precision"}`` of a ``KerasPass`` of ``variant``:
    what float32 measured to be where it runs (a float32 side only:
    ``float32_probe.side_precision``) and, with ``ieee_reference``, float64
    where that is degraded (TF32, oneDNN's fpmath mode), so the side is IEEE
    float32 or better."""
    precision = float32_probe.side_precision(as_variant(variant), surrounding_jit)
    computed_in = float32_probe.ieee_dtype(precision, ieee_reference)
    if precision is not None:
        precision["computed_in"] = computed_in or "float32"
    return {"computed_in": computed_in, "precision": precision}


def reference_pass_for(model, reference, candidate, activations=True, optimizer=None, ieee_reference=True,
                       surrounding_jit=False):
    """The reference ``KerasPass`` of a comparison (with the half batch's
    gradients where the candidate rounds more; IEEE float32 or better where
    float32 is degraded, unless ``ieee_reference`` is False:
    ``precision_options``; ``surrounding_jit``: the caller runs under XLA)."""
    return KerasPass(model, reference, activations, optimizer,
                     sampling_noise=rounds_more(model, reference, candidate),
                     **precision_options(reference, surrounding_jit, ieee_reference))


def stable_pass_for(model, reference, candidate, activations=True, optimizer=None, ieee_reference=True,
                    surrounding_jit=False):
    """The stable-rounding pass of a comparison: where the candidate rounds
    more than the reference, the reference rounded to the candidate's dtype
    between layers; where both sides round alike (another device, XLA; the
    analysis judges them by its depth formula) there is nothing to round and
    it is the reference computed a second time (``RepeatPass``), whose
    divergence is how far float32 repeats itself there (0 on this CPU; not
    on a GPU whose kernels are not deterministic).  It computes as the
    reference pass does (``precision_options``)."""
    options = precision_options(reference, surrounding_jit, ieee_reference)
    if not rounds_more(model, reference, candidate):
        return RepeatPass(model, reference, activations, **options)
    if optimizer is None and isinstance(getattr(model, "optimizer", None), keras.optimizers.LossScaleOptimizer):
        # float16 gradients underflow unless the loss is scaled as the training step scales it
        optimizer = model.optimizer
    return StableRoundingPass(model, reference, candidate, activations, optimizer, **options)


class RepeatPass(KerasPass):
    """The reference pass of a comparison whose sides round alike, computed
    again: its own function, run after the reference pass (so no graph
    optimization merges the two), on the same batch, weights and draws."""

    repeats = True


def candidate_pass_for(model, candidate, activations=True, surrounding_jit=False):
    """The candidate ``KerasPass`` of a comparison (a float32 candidate
    computes as float32 is here, and says what that measured to be)."""
    return KerasPass(model, candidate, activations,
                     precision=precision_options(candidate, surrounding_jit, False)["precision"])
