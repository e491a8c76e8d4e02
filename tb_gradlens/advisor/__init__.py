"""The precision advisor: which layers to keep in float32, found and verified.

For a Keras model with 16-bit layers (mixed_bfloat16, mixed_float16) the
advisor attributes the divergence of one training step from its float32
reference to the model's layers, by switching dtype policies on the same
weights, batch and random draws (dropout masks, noise;
``tb_gradlens.compare``).  Every pass is judged by the alerts' own rule
(``judging``): each variable's gradient, each layer output and the loss
against the limit stable 16-bit rounding gives it on this batch; the
largest value / limit is the pass's harm index (at most 1: within the
limits).

* **leave-one-out**: a unit alone in float32; **one-at-a-time**: a unit
  alone in 16 bits (``measure``); at each unit's output the divergence is
  split into the error **born** there and the error **inherited** from the
  layers before it;
* a **recommendation**: the fewest units to keep in float32 so that the
  predicted harm index falls to the tolerance (default 1), chosen greedily
  on every row's prediction (``recommend``), **verified** by one pass with
  exactly that policy map, a group of layers **narrowed** to the layers
  that matter (``narrowing``), before -> after, with the share of
  parameters left in 16 bits (``rounds``);
* what it cannot attribute it says (``limits``): several replicas, layers
  computing in 16 bits whatever their policy (raw TensorFlow ops), a switch
  that changes the structure of the step.

Units (``units``) are top-level layers with the layers inside them,
grouped into at most ``max_units`` consecutive blocks for deep models, so a
round costs about ``2 * max_units + 7 * calls + verifications`` passes (and
the narrowing's, ``2 log2`` of a group's size at most per group).

Entry points: ``advise(model, data)`` (once, outside training; ``api``)
and ``Advisor`` (in the Keras callback, ``GradLensCallback(advisor=...)``,
spread over its comparison steps; ``tb_gradlens.keras.advising``).  The
result is an ``advice`` record (``records.advice``), read TensorFlow-free
by ``tb_gradlens.analysis.advice`` for the tab, the ``advice`` route and
``tb-gradlens advise`` / ``report``.
"""

from tb_gradlens.advisor.api import AdviceResult  # noqa: F401
from tb_gradlens.advisor.api import advise  # noqa: F401
from tb_gradlens.advisor.api import keep_in_float32  # noqa: F401
from tb_gradlens.advisor.settings import Advisor  # noqa: F401
