"""Loss-scale skips told apart from real trouble (``optimizer_step`` records).

TensorFlow-free.  Dynamic loss scaling (Keras' ``LossScaleOptimizer``)
multiplies the loss by a scale, and when the scaled gradients overflow
float16 it skips the update and halves the scale: at the start of a healthy
float16 run the scale comes down from 2^15 until the gradients fit, and
every 2000 finite steps it doubles and may overflow once more.  Such a
skip is an ``info``; its non-finite gradients were never applied and are
no ``nonfinite`` error.  Real trouble stays an error
(``loss_scale_failure``):

* a skip whose loss was not finite (an overflow in the forward pass, or a
  NaN in the data or the loss: not what loss scaling is for);
* the scale falling below ``Thresholds.loss_scale_floor`` (1): Keras 3
  halves it without end, and below 1 it shrinks the gradients it should
  protect (TensorFlow's own LossScaleOptimizer never went below 1); from
  2^15 that takes 15 skips in a row, which no overflow needs;
* after an update was applied, more than ``loss_scale_skips_in_row`` (3)
  skips in a row: the scale then grows one binade at a time, so a healthy
  overflow costs one skip, and four in a row (the scale 16x below a level
  that worked) is a gradient loss scaling cannot bring into range.

Every skip is recorded (the lens checks every step), so the steps between
two records are applied updates.  The lens's in-step replay of the first
non-finite step follows the same rule (``keras.forensics``).
"""

import numpy as np

from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import texts
from tb_gradlens.analysis.codes import Alert


def classify(steps, table, thresholds=codes.DEFAULT_THRESHOLDS):
    """Per record of an ``optimizer_step`` series (``steps`` [S], ``table``
    [S, columns]): (benign, trouble) boolean [S] arrays: a skip the scale
    explains, and a step in real trouble (see the module)."""
    columns = metadata.OPTIMIZER_STEP_COLUMNS
    skipped = table[:, columns.index("skipped")] > 0.5
    loss_bad = table[:, columns.index("loss_nonfinite")] > 0.5  # NaN: not seen (XLA)
    below = table[:, columns.index("next_loss_scale")] < thresholds.loss_scale_floor
    trouble = skipped & (loss_bad | below)
    in_row, applied_before = 0, False
    for i in range(len(steps)):
        if i and steps[i] != steps[i - 1] + 1:
            applied_before = True  # the steps between two records applied their update
        if skipped[i]:
            in_row = in_row + 1 if i and steps[i] == steps[i - 1] + 1 and skipped[i - 1] else 1
            if applied_before and in_row > thresholds.loss_scale_skips_in_row:
                trouble[i] = True
        else:
            in_row, applied_before = 0, True
    return skipped & ~trouble, trouble


def benign_skips(source, run, thresholds=codes.DEFAULT_THRESHOLDS):
    """The record steps of ``run`` at which a non-finite gradient was a
    loss-scale skip, nothing worse (a sorted tuple)."""
    out = set()
    for entry in source.entries_of_kind(run, metadata.OPTIMIZER_STEP):
        series = source.series(run, entry.tag)
        if len(series.steps):
            benign, _ = classify(series.steps, series.values[:, 0, :], thresholds)
            out.update(int(s) for s in series.steps[benign])
    return tuple(sorted(out))


def alerts_for_optimizer_steps(series, thresholds=codes.DEFAULT_THRESHOLDS):
    """The ``loss_scale_skip`` info and the ``loss_scale_failure`` error of
    an ``optimizer_step`` Series."""
    steps = series.steps
    if len(steps) == 0:
        return []
    table = series.values[:, 0, :].astype(np.float64)
    columns = metadata.OPTIMIZER_STEP_COLUMNS
    scale, after = table[:, columns.index("loss_scale")], table[:, columns.index("next_loss_scale")]
    benign, trouble = classify(steps, table, thresholds)
    out = []
    if benign.any():
        at = np.nonzero(benign)[0]
        a, b = int(steps[at[0]]), int(steps[at[-1]])
        out.append(Alert(
            codes.INFO, codes.LOSS_SCALE_SKIP, series.run, series.tag, a, b, [],
            texts.LOSS_SCALE_SKIP.format(n=len(at), steps=_steps_text(steps[at]), first=_scale(scale[at[0]]),
                                         last=_scale(after[at[-1]])),
            texts.LOSS_SCALE_SKIP_FIX, codes.view(series, "loss_scale", "optimizer", a),
            [{"step": int(steps[i]), "loss_scale": float(scale[i]), "next_loss_scale": float(after[i])} for i in at],
        ))
    if trouble.any():
        at = np.nonzero(trouble)[0]
        a, b = int(steps[at[0]]), int(steps[at[-1]])
        loss_bad = table[at, columns.index("loss_nonfinite")] > 0.5
        why = (texts.LOSS_SCALE_LOSS if loss_bad[0] else
               texts.LOSS_SCALE_FLOOR.format(floor=thresholds.loss_scale_floor)
               if after[at[0]] < thresholds.loss_scale_floor else
               texts.LOSS_SCALE_IN_ROW.format(k=thresholds.loss_scale_skips_in_row))
        out.append(Alert(
            codes.ERROR, codes.LOSS_SCALE_FAILURE, series.run, series.tag, a, b, [],
            texts.LOSS_SCALE_FAILURE.format(a=a, why=why, scale=_scale(after[at[-1]]), steps=_steps_text(steps[at])),
            texts.LOSS_SCALE_FAILURE_FIX, codes.view(series, "loss_scale", "optimizer", a),
            [{"step": int(steps[i]), "loss_scale": float(scale[i]), "next_loss_scale": float(after[i]),
              "loss_nonfinite": bool(table[i, columns.index("loss_nonfinite")] > 0.5)} for i in at],
        ))
    return out


def _steps_text(steps, limit=6):
    shown = ", ".join(str(int(s)) for s in steps[:limit])
    return shown + (" and %d more" % (len(steps) - limit) if len(steps) > limit else "")


def _scale(value):
    return "%g" % value if np.isfinite(value) else "?"


def optimizer_steps(source, run, thresholds=codes.DEFAULT_THRESHOLDS, offsets=()):
    """The headline of ``run``'s ``optimizer_step`` records (None without):
    ``{"skips": [steps], "trouble": [steps], "loss_scale": [first, last]
    (None without loss scaling), "differ_from": the first record step at
    which the optimizer's own step falls behind the train step (a skipped
    update; None: never), "last_step", "last_iteration"}``.  ``offsets``:
    the run's ``coverage.step_offsets`` (a training that continues the
    run's steps is not behind by its offset)."""
    steps, rows = [], []
    for entry in source.entries_of_kind(run, metadata.OPTIMIZER_STEP):
        series = source.series(run, entry.tag)
        steps.append(series.steps)
        rows.append(series.values[:, 0, :].astype(np.float64))
    if not steps or not sum(len(s) for s in steps):
        return None
    steps, table = np.concatenate(steps), np.concatenate(rows)
    order = np.argsort(steps, kind="stable")
    steps, table = steps[order], table[order]
    columns = metadata.OPTIMIZER_STEP_COLUMNS
    iteration = table[:, columns.index("iteration")]
    scale = table[:, columns.index("loss_scale")]
    benign, trouble = classify(steps, table, thresholds)
    shift = np.zeros(len(steps))
    for o in sorted(offsets, key=lambda o: o["step"]):
        shift[steps >= o["step"]] = o["offset"]
    lag = steps - shift - iteration
    behind = np.nonzero(lag > lag[0])[0]
    return {
        "skips": [int(s) for s in steps[benign | trouble]],
        "trouble": [int(s) for s in steps[trouble]],
        "loss_scale": None if not np.isfinite(scale).any() else [float(scale[0]),
                                                                 float(table[-1, columns.index("next_loss_scale")])],
        "differ_from": int(steps[behind[0]]) if len(behind) else None,
        "last_step": int(steps[-1]),
        "last_iteration": int(iteration[-1]),
    }
