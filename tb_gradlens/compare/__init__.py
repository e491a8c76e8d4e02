"""Shadow steps: one training step computed in a reference and a candidate
numeric setting (dtype policy, device, XLA), compared per variable, per
layer and on the loss.

Two entry points:

* ``compare_keras(model, x, y)``: a Keras 3 model, no copy of it.  Every
  layer's ``dtype_policy`` is switched for the shadow pass and restored in
  ``finally``; the pass runs in a ``keras.StatelessScope`` (no variable,
  BatchNormalization statistic or seed is updated); both sides see the
  same random draws (dropout masks, noise: ``randomness``), and each
  layer's output is recorded for the activation divergence.
* ``compare_fn(loss_fn, variables)``: any model of raw TF ops.
  ``loss_fn(weights, compute_dtype)`` receives the variables' values in the
  variant's storage dtype (float64 for a float64 variant, bfloat16 for a
  bfloat16 one) and the compute dtype; gradients are taken with respect to
  those weights, so a float64 reference is float64 end to end.  It may
  return ``(loss, {name: activation})`` to compare activations too.

Both run eagerly and inside ``tf.function`` (the Keras callback calls them
inside the traced train step).  Results are a ``Comparison``; its
``write(step)`` writes the ``divergence``, ``loss_comparison`` and
``activation_divergence`` records.

Keras and float64: Keras 3 keeps a float32 variable float32 in a shadow
pass, so a float64 reference computes every layer and the loss in float64
on the exactly widened weights, and its gradients are rounded once to
float32 at the variables (at most half a float32 ULP; the float32
candidate's accumulated error is what the comparison shows).  Use
``compare_fn`` for float64 gradients.

Both sides are judged against the stable-rounding pass (``stable``): the
reference computed stably but rounded to the candidate's dtype between
layers, whose divergence is what rounding alone does to each compared row.

Modules: ``variants`` (Variant, Comparison), ``functions`` (compare_fn),
``keras_passes`` (KerasPass), ``keras_step`` (compare_keras),
``comparison_passes`` (the passes of a comparison), ``stable``
(the stable-rounding pass), ``randomness`` (shared random draws),
``instruments`` (layer calls seen by a pass), ``dtype_maps``, ``replay`` (a
non-finite step replayed as configured and in float32), ``float32_probe``
(what float32 is on this hardware, measured: a float32 reference computes
in float64 where it is degraded), ``environment`` (the device and settings
a run trains with).
"""

from tb_gradlens.compare import float32_probe  # noqa: F401
from tb_gradlens.compare.dtype_maps import dominant_policy  # noqa: F401
from tb_gradlens.compare.dtype_maps import dtype_map  # noqa: F401
from tb_gradlens.compare.dtype_maps import model_dtypes  # noqa: F401
from tb_gradlens.compare.dtype_maps import observe_dtypes  # noqa: F401
from tb_gradlens.compare.environment import environment  # noqa: F401
from tb_gradlens.compare.functions import compare_fn  # noqa: F401
from tb_gradlens.compare.instruments import ActivationRecorder  # noqa: F401
from tb_gradlens.compare.keras_passes import KerasPass  # noqa: F401
from tb_gradlens.compare.keras_passes import keras_pass  # noqa: F401
from tb_gradlens.compare.keras_passes import model_layers  # noqa: F401
from tb_gradlens.compare.keras_passes import owner_compute_dtypes  # noqa: F401
from tb_gradlens.compare.keras_passes import seed_states  # noqa: F401
from tb_gradlens.compare.keras_passes import switched_policies  # noqa: F401
from tb_gradlens.compare.keras_step import OwnStep  # noqa: F401
from tb_gradlens.compare.keras_step import built_on  # noqa: F401
from tb_gradlens.compare.comparison_passes import candidate_pass_for  # noqa: F401
from tb_gradlens.compare.comparison_passes import precision_options  # noqa: F401
from tb_gradlens.compare.comparison_passes import reference_pass_for  # noqa: F401
from tb_gradlens.compare.comparison_passes import stable_pass_for  # noqa: F401
from tb_gradlens.compare.keras_step import compare_keras  # noqa: F401
from tb_gradlens.compare.randomness import SharedDraws  # noqa: F401
from tb_gradlens.compare.replay import Replay  # noqa: F401
from tb_gradlens.compare.replay import ReplayPasses  # noqa: F401
from tb_gradlens.compare.replay import replay_step  # noqa: F401
from tb_gradlens.compare.stable import DitheredPass  # noqa: F401
from tb_gradlens.compare.comparison_passes import RepeatPass  # noqa: F401
from tb_gradlens.compare.stable import StableRoundingPass  # noqa: F401
from tb_gradlens.compare.variants import Comparison  # noqa: F401
from tb_gradlens.compare.variants import POLICIES  # noqa: F401
from tb_gradlens.compare.variants import Variant  # noqa: F401
from tb_gradlens.compare.variants import as_variant  # noqa: F401
from tb_gradlens.compare.variants import default_name  # noqa: F401
