"""``GradLensCallback``: the lens for ``model.fit``."""

import os
from typing import TYPE_CHECKING, Optional, Sequence, Union

import keras

from tb_gradlens import safety
from tb_gradlens.keras import session as session_module
from tb_gradlens.keras.advising import AdvisorHook
from tb_gradlens.keras.options import LensOptions
from tb_gradlens.keras.options import ReadOnlyOption
from tb_gradlens.keras.schedule import FLUSH_SECONDS
from tb_gradlens.keras.schedule import GRADIENT_EVERY
from tb_gradlens.keras.session import Session
from tb_gradlens.writing import distribute

if TYPE_CHECKING:
    from tb_gradlens.advisor import Advisor


class GradLensCallback(keras.callbacks.Callback):
    """Log gradient statistics, update statistics, the dtype map, the
    training loss and shadow-step comparisons of a ``model.fit`` run to
    ``log_dir``.

    Args:
      log_dir: the TensorBoard run directory to write to.
      gradient_every: log gradient statistics every N optimizer steps
        (0: never).
      compare_every: run the comparisons every M optimizer steps (0:
        never).  Default: every ``COMPARE_EVERY`` (100) steps from step
        ``start_step + 100``, so that a short run does not pay for tracing
        the comparison's passes (a 50-step fit of a keras.applications model
        took about twice as long with a comparison at step 0); a value
        given compares from ``start_step`` on (``compare_every=100``
        includes step 0).
      variables: regex (re.search on variable paths) selecting the
        variables whose gradient and update statistics are logged.
      start_step, stop_step: only log optimizer steps in [start, stop).
      comparisons: "auto" (float32 reference vs the model as configured,
        when any layer computes in 16 bits), or a list of reference
        Variants/policy names (candidate: the model as configured) or of
        (reference, candidate) pairs, e.g. ``[("float32", None),
        (Variant(None), Variant(None, jit_compile=True))]``.
      histogram: also log the log2-magnitude gradient histogram.
      update_stats: also log update statistics (keeps a copy of the
        selected weights to diff against).
      update_every: log them every K optimizer steps, a multiple of
        ``gradient_every`` (None: the first multiple >= 20; the copy costs
        more than the gradient statistics, README "What the defaults cost").
      activations: also compare every layer's output.
      name: tag prefix of the gradient, update, dtype and status records.
      replica_divergence: under a strategy with several replicas, also log
        each replica's gradient vs the replica mean (``divergence``
        records named ``replicas``; one small all-gather every step).
      nonfinite_replay: check every step for a non-finite loss or gradient
        (one reduction over the gradients, no host read) and
        replay the first one in trouble right after its call, from what
        it kept before its update, as configured and in
        float32 ("float64": in float64), from the same weights, batch and
        random draws: a ``nonfinite_replay`` record whose verdict the
        ``nonfinite`` alert carries ("16-bit precision" or "not
        precision").  "auto" (default): where it can (without XLA, one
        replica); False: off.  Loss-scale skips of a
        ``LossScaleOptimizer`` are recorded either way
        (``optimizer_step`` records).
      stop_on_nonfinite: do not apply the update of that step (nor any
        later one) and stop ``fit`` after the call (Keras'
        ``TerminateOnNaN`` stops after the update).
      flush_seconds: healthy logged steps are flushed to the event file
        together, at most this many seconds apart (default 1), and always
        at epoch end, train end, when a call raises and at exit; a call
        with a non-finite step is flushed when it returns.  0: every
        logged call is flushed when it returns.
      ieee_reference: where float32 measured degraded on the device and
        compilation the references run with (TF32 on Ampere and newer GPUs,
        oneDNN's fpmath mode; ``compare.float32_probe``, run when the lens
        starts and recorded in ``lens_status``), a float32 reference, its
        stable-rounding pass and the replay's float32 pass compute in
        float64, which TF32 and fpmath leave alone, so the reference is
        IEEE float32 or better; the training step keeps its own setting.
        False: the reference computes as float32 is there (the records
        say so, e.g. "float32 reference: TF32 in matmul/conv, 11 bits").

    What is logged, and how (README "Precision lens"): the gradients the
    optimizer applies (loss scaling undone), at the true optimizer step,
    every logged step also with ``steps_per_execution``; the step's own
    loss as the scalar ``loss``; comparisons whose reference draws the
    step's dropout masks.  Without XLA the lens observes the step as it
    runs (``live``); under ``jit_compile=True`` it stays out of the
    compiled step and recomputes it beside it (``probe``), so training is
    bit-identical with and without the lens either way.

    Under ``tf.distribute`` (MirroredStrategy, MultiWorkerMirroredStrategy)
    the statistics describe the all-reduced gradient the optimizer applies,
    computed by replica 0 and written by the chief only; comparisons run on
    replica 0's share of the batch.  See ``tb_gradlens.writing.distribute``.
    """

    def __init__(self, log_dir: Union[str, os.PathLike], gradient_every: int = GRADIENT_EVERY,
                 compare_every: Optional[int] = None, variables: Optional[str] = None, start_step: int = 0,
                 stop_step: Optional[int] = None, comparisons: Union[str, Sequence] = "auto",
                 histogram: bool = True, update_stats: bool = True, activations: bool = True,
                 name: str = "model", replica_divergence: bool = False, advisor: Optional["Advisor"] = None,
                 update_every: Optional[int] = None, nonfinite_replay: Union[str, bool] = "auto",
                 stop_on_nonfinite: bool = False, flush_seconds: float = FLUSH_SECONDS, ieee_reference: bool = True):
        super().__init__()
        self.options = LensOptions.from_arguments(
            log_dir, gradient_every, compare_every, variables, start_step, stop_step, comparisons, histogram,
            update_stats, activations, name, replica_divergence, update_every, nonfinite_replay,
            stop_on_nonfinite, flush_seconds, ieee_reference)
        self.advisor = advisor
        self._advising = None
        self._writer = None
        self._session = None
        self._active = None

    # The resolved arguments, read-only (``options``): ``callback.flush_seconds`` etc.
    log_dir = ReadOnlyOption()
    name = ReadOnlyOption()
    gradient_schedule = ReadOnlyOption()
    compare_schedule = ReadOnlyOption()
    update_schedule = ReadOnlyOption()
    variables = ReadOnlyOption()
    comparisons = ReadOnlyOption()
    histogram = ReadOnlyOption()
    activations = ReadOnlyOption()
    replica_divergence = ReadOnlyOption()
    nonfinite_replay = ReadOnlyOption()
    stop_on_nonfinite = ReadOnlyOption()
    flush_seconds = ReadOnlyOption()
    ieee_reference = ReadOnlyOption()

    def on_train_begin(self, logs=None):
        self._active = None
        try:
            if self._writer is None:
                self._writer = distribute.chief_writer(self.log_dir, self.model.distribute_strategy)
            session = self._session
            if session is not None and session.model is self.model and session.matches(self.model):
                session.resume()
            else:
                session = self._session = Session(self.model, self.options, self._writer)
                session.start()
            self._active = session
        except Exception as error:  # noqa: BLE001 - train without the lens
            if self._session is not None:
                self._session.restore()
            self._session = None
            self.model.make_train_function(force=True)
            safety.report(session_module.WRITER + " (setup)", error)
        if self.advisor is not None:
            self._advising = AdvisorHook.started(self._advising, self.advisor, self.model, self._writer,
                                                 self.compare_schedule)

    def on_train_batch_begin(self, batch, logs=None):
        if self._active is not None:
            self._active.arm()

    def on_train_batch_end(self, batch, logs=None):
        if self._advising is not None:
            self._advising.after_batch(self._active)

    def on_epoch_begin(self, epoch, logs=None):
        if self._active is not None:
            self._active.sync()

    def on_epoch_end(self, epoch, logs=None):
        if self._active is not None:
            self._active.flush()  # (healthy logged steps wait up to a second for their flush)

    def on_train_end(self, logs=None):
        if self._active is not None:
            self._active.end()
            self._active = None
