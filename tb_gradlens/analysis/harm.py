"""Beyond harmless rounding: the one rule every judged divergence goes by.

TensorFlow-free, pure NumPy, one formula per function.  A 16-bit step
always differs from its float32 reference; what matters is whether it
differs more than rounding *has* to make it differ.  The lens measures that
on the step itself: the stable-rounding pass (``compare.stable``) is the
reference computed stably but rounded to the candidate's dtype at every
layer boundary, and its divergence ``s`` from the reference is what a
numerically stable 16-bit computation of that step shows at each row
(gradient, layer output, loss).  For a gradient and the loss the lens also
measures their sampling noise ``n``: how far the reference gradient (loss)
of the first half of the batch is from the batch's, what another batch
would change.  A candidate divergence ``v`` is judged against

    ``limit = max(u, factor * envelope(s), fraction * envelope(n))``:

* ``envelope``: the largest value of the row over the last ``window`` logged
  comparisons: a ReLU that flips, a max-pool that picks another element
  changes a gradient by a discrete amount in whichever pass it happens, so
  one pass alone under-states what rounding does there now and then;
* ``factor``: a stable layer computing in 16 bits rounds inside too (an
  LSTM cell's gates, a GELU), a few times more than the pass, which rounds
  only between layers;
* ``fraction``: an error in a gradient well below its sampling noise is no
  harm to the training, which already follows a gradient that noisy (and
  16-bit kernels that sum a bias's gradient over many positions in 16 bits
  stay under it);
* ``u``: one rounding of the candidate's dtype, the least any value moves.

Beyond its limit at ``held`` logged comparisons in a row, or ``immediate``
times beyond it at one, a row is harmed.  Every consumer uses these
functions: the alerts, the ``limits`` route and the tab, the advisor (its
tolerance, prediction and verification) and the run comparison's verdict.
"""

import numpy as np


def envelope(stable, window):
    """[S, R]: the largest stable divergence of each row over the ``window``
    logged comparisons ending at each step (NaN where none is measured):
    ``e[t, r] = max_{t - window < k <= t} s[k, r]``."""
    stable = np.asarray(stable, np.float64)
    out = np.full(stable.shape, np.nan)
    with np.errstate(invalid="ignore"):
        for t in range(len(stable)):
            part = stable[max(0, t - int(window) + 1): t + 1]
            seen = np.isfinite(part) | np.isposinf(part)
            if seen.any():
                out[t] = np.max(np.where(seen, part, -np.inf), axis=0)
                out[t][~seen.any(axis=0)] = np.nan
    return out


def measured_limit(scale, factor, floor):
    """``max(floor, factor * scale)`` elementwise; NaN (not judged) where
    ``scale`` is NaN or infinite (a reference of exactly zero: every
    divergence from it is infinite, the stable pass's too).  The sampling-
    noise term is added with ``numpy.fmax``."""
    scale = np.asarray(scale, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(scale), np.maximum(floor, factor * scale), np.nan)


def loss_scale(stable_loss, stable_output):
    """The rounding scale of the loss: ``max(s_loss, s_output)``.  The loss is
    one number computed from the model output: its own stable divergence is
    a single draw (it can be near 0 by chance), while the output's, over
    every element the loss reads, is the precision the loss inherits."""
    a = np.asarray(stable_loss, np.float64)
    b = np.asarray(stable_output, np.float64)
    return np.fmax(a, b)


def exceeds(values, limits):
    """[S, R] bool: ``v > limit`` where both are known (a NaN or infinite
    value is the non-finite rule's, not this one's)."""
    values = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values > limits)


def held(flags, steps):
    """[S, R] bool: the flags that belong to a run of at least ``steps``
    consecutive true flags (logged comparisons) of their row."""
    flags = np.asarray(flags, bool)
    k = max(1, int(steps))
    out = np.zeros_like(flags)
    if len(flags) < k:
        return out
    starts = flags[: len(flags) - k + 1].copy()
    for j in range(1, k):
        starts &= flags[j: len(flags) - k + 1 + j]
    for j in range(k):
        out[j: j + len(starts)] |= starts
    return out


def harmed(values, limits, held_steps, immediate):
    """[S, R] bool: beyond the limit for ``held_steps`` logged comparisons
    in a row, or beyond ``immediate`` x the limit at one."""
    over = exceeds(values, limits)
    with np.errstate(invalid="ignore"):
        far = over & (np.asarray(values, np.float64) > immediate * np.asarray(limits, np.float64))
    return held(over, held_steps) | far


def ratio(values, limits):
    """``v / limit`` (the harm index: above 1 is beyond harmless rounding);
    NaN where either is unknown."""
    values = np.asarray(values, np.float64)
    limits = np.asarray(limits, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(limits > 0, values / limits, np.nan)


# ---------------------------------------------------------------------------
# Two runs against a noise-floor run (``runs.compare_runs``).
# ---------------------------------------------------------------------------


def window_width(n_steps, minimum, windows_per_run=20):
    """Logged steps per window: ``max(minimum, ceil(n_steps / windows_per_run))``."""
    return max(int(minimum), -(-int(n_steps) // int(windows_per_run)))


def window_means(values, width):
    """[W] the mean of ``|values|`` over consecutive windows of ``width``
    (a last, partial window left out; NaN left out of each mean)."""
    values = np.abs(np.asarray(values, np.float64))
    n = len(values) // max(1, int(width))
    out = np.full(n, np.nan)
    for w in range(n):
        part = values[w * width: (w + 1) * width]
        part = part[~np.isnan(part)]
        if len(part):
            out[w] = np.mean(part)
    return out


def sustained_window(ratios, factor, count):
    """The first window of the first run of ``count`` consecutive windows whose
    ratio is above ``factor`` (None: no such run)."""
    run = 0
    for w, r in enumerate(np.asarray(ratios, np.float64)):
        run = run + 1 if r > factor else 0
        if run >= count:
            return w - count + 1
    return None
