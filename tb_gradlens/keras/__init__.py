"""Keras and custom-loop integration: ``GradLensCallback`` and ``GradLens``.

``GradLensCallback(log_dir)`` logs a ``model.fit`` run under any
``jit_compile`` and ``steps_per_execution``: gradient statistics of the
gradients the optimizer applies, update statistics, the dtype map, the
step's own loss, and shadow-step comparisons (a float32 reference by
default) whose reference draws the step's random numbers.  Training is
bit-identical with and without it.  ``GradLens`` offers the same to custom
``GradientTape`` loops.

Neither stops training when logging fails (``tb_gradlens.safety``): the
failing part is skipped with one warning per cause (per model), recorded
in the run's ``lens_status`` record, and training goes on; strict mode
raises.

Modules (one job each): ``callback`` (the Keras hooks), ``options`` (the
callback's arguments as one frozen value), ``session`` (set up, train
function, restore), ``traces`` (the traced train functions, kept and
reused), ``flushing`` (when records reach the event file), ``tap`` (what
the step computes, and all its state), ``live`` and ``probe`` (the lens's
step: observed as it runs without XLA; beside an XLA-compiled step),
``replicas`` (several replicas), ``slots`` (one comparison), ``rings``
(per-step buffers), ``writing`` (records after each train-function call),
``status`` (the lens status), ``schedule`` (when, which variables, which
comparisons), ``forensics`` (every step checked: loss-scale skips, the
replay of the first non-finite step), ``custom_loop`` (``GradLens``).
Every private Keras API used is in ``tb_gradlens.writing.keras_private``.
"""

from tb_gradlens.keras.callback import GradLensCallback  # noqa: F401
from tb_gradlens.keras.custom_loop import GradLens  # noqa: F401
from tb_gradlens.keras.schedule import COMPARE_EVERY  # noqa: F401
from tb_gradlens.keras.schedule import GRADIENT_EVERY  # noqa: F401
from tb_gradlens.keras.schedule import Schedule  # noqa: F401
