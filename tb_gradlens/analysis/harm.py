"""Beyond harmless rounding: the one rule every judged divergence goes by.

TensorFlow-free, pure NumPy, one formula per function.  A 16-bit step
always differs from its float32 reference; what matters is whether the
difference changes what training does.  The lens measures, on the step
itself, the stable-rounding pass (``compare.stable``: the reference
computed stably but rounded to the candidate's dtype at every layer
boundary; its divergence ``s`` is what a numerically stable 16-bit
computation of that step shows at each row) and, for a gradient and the
loss, their sampling noise ``n`` (the reference of the first half of the
batch against the batch's: what another batch would change).  The stable
pass says where and why; it never excuses damage it makes itself: a row's
limit (``measured_limits``) is

* a layer output: ``C x max(u, s~)``, ``s~`` its stable divergence counted
  up to ``B`` x what the rows before it carry (``boundary_capped``): a
  larger jump is damage born at the layer's boundary (an input that needs
  more significand bits than 16, a stream swamping what is added to it),
  judged as if born inside, and the rows after it are not excused by what
  they carry of it;
* a gradient: ``max(C x max(u, s), f x n)``: below a fraction of its own
  sampling noise an error is no harm, and a gradient near zero by symmetry
  is judged by what rounding does to it;
* the loss: ``max(C x u, f x n)``: further from float32 than another batch
  moves it, it changes what the training follows, wherever it rounded;

with ``s`` and ``n`` the largest of the row's last ``window`` logged
comparisons (``envelope``; ``s`` leaving out the comparisons the row was
above its limit at: ``healthy_envelope``), ``C`` (``stable_factor``) the
rounding a stable 16-bit layer does inside beyond the pass (an LSTM cell's
gates, a GELU), ``f`` (``half_batch_fraction``) and ``u`` one rounding of
the candidate's dtype.

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


def boundary_capped(stable, floor, factor):
    """[S, R] the stable divergence of activation rows (in forward order) that
    rounding between layers explains: ``c[t, r] = s[t, r] / rho[t, r]`` with

        ``j[t, k] = s[t, k] / max(floor, max_{i < k} s[t, i])`` (a row's jump),
        ``rho[t, r] = prod_{k <= r, j[t, k] > factor} j[t, k] / factor``.

    Rounding a layer's inputs, weights and output once more moves its output
    by about what its inputs already carry, plus a rounding (``floor``, u):
    the largest stable divergence of the rows before it bounds that.  A row
    whose stable divergence jumps beyond ``factor`` x that bound is damage
    born at that layer's boundary (an input that needs more significand bits
    than the 16-bit dtype it is rounded to: timestamps, coordinates, a
    stream holding a large common part), not rounding it may be excused by
    (the candidate rounds there too, so the stable pass would excuse it); it
    is counted at ``factor`` x the bound, and every later row's stable
    divergence, which carries that damage forward, is scaled down by as
    much (relative errors pass through layers in proportion).  NaN and
    infinite entries pass through and do not raise the bound."""
    stable = np.asarray(stable, np.float64)
    floor = np.broadcast_to(np.asarray(floor, np.float64), stable.shape[1:])
    with np.errstate(invalid="ignore", divide="ignore"):
        known = np.where(np.isfinite(stable), stable, 0.0)
        before = np.maximum.accumulate(known, axis=1)
        before = np.concatenate([np.zeros((len(stable), 1)), before[:, :-1]], axis=1)
        jump = np.where(np.isfinite(stable), stable / np.fmax(floor[None, :], before), 0.0)
        excess = np.where(jump > factor, jump / factor, 1.0)
        rho = np.cumprod(excess, axis=1)
    return np.where(np.isfinite(stable), stable / rho, stable)


def healthy_envelope(stable, values, limit_at, window):
    """[S, R] ``e[t] = max(s[t], max{s[k]: t - window < k < t, v[k] <= limit_at(k, e[k])})``:
    ``envelope`` leaving out the comparisons at which a row was above its
    limit, so a fault's own stable divergence is not carried forward as the
    next comparisons' baseline.  ``limit_at(t, e_t) -> [R]`` is the limits
    at step index t of an envelope ``e_t``."""
    stable = np.asarray(stable, np.float64)
    values = np.asarray(values, np.float64)
    out = np.full(stable.shape, np.nan)
    kept = np.full(stable.shape, np.nan)  # s where the row was within its limit, else NaN
    with np.errstate(invalid="ignore"):
        for t in range(len(stable)):
            part = np.vstack([kept[max(0, t - int(window) + 1): t], stable[t: t + 1]])
            seen = np.isfinite(part) | np.isposinf(part)
            if seen.any():
                row = np.max(np.where(seen, part, -np.inf), axis=0)
                row[~seen.any(axis=0)] = np.nan
                out[t] = row
            within = ~(np.isfinite(values[t]) & (values[t] > limit_at(t, out[t])))
            kept[t] = np.where(within, stable[t], np.nan)
    return out


def measured_limit(scale, factor, floor):
    """``max(floor, factor * scale)`` elementwise; NaN (not judged) where
    ``scale`` is NaN or infinite (a reference of exactly zero: every
    divergence from it is infinite, the stable pass's too).  The sampling-
    noise term is added with ``numpy.fmax``."""
    scale = np.asarray(scale, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(scale), np.maximum(floor, factor * scale), np.nan)


def measured_limits(values, stable, half_batch, u, *, factor, fraction, window, boundary_factor=None, loss=False):
    """([S, R] limits, [S, R] between, [S, R] by_noise) of rows a stable-rounding
    pass measured, with S the stable divergence (``stable``) and N the sampling
    noise (``half_batch``), each the largest of the row's last ``window``
    comparisons (S leaving out those the row was above its limit at,
    ``healthy_envelope``), and u one rounding:

    * gradients: ``max(C x max(u, S), f x N)``;
    * layer outputs (``boundary_factor`` given, rows in forward order):
      ``C x max(u, S~)``, S~ capped by ``boundary_capped``;
    * the loss (``loss``): ``max(C x u, f x N)`` where N is measured (else as
      gradients): a loss further from float32 than its sampling noise changes
      what the training follows, wherever the rounding happened.

    ``between``: the stable pass reproduces the damage, so it is born between
    layers (a layer output beyond the boundary cap; the loss within C x S);
    ``by_noise``: the loss judged by its noise alone."""
    noise = envelope(half_batch, window)
    values = np.asarray(values, np.float64)
    stable = np.asarray(stable, np.float64)
    with np.errstate(invalid="ignore"):
        if boundary_factor is not None:
            capped = boundary_capped(stable, u, boundary_factor)
            between = np.isfinite(stable) & (stable > capped)
            stable = capped
        elif loss:
            between = np.isfinite(values) & (values <= factor * stable)
        else:
            between = np.zeros(values.shape, bool)
    by_noise = np.isfinite(noise) & bool(loss)

    def limit_at(t, env):
        scaled = measured_limit(env, factor, factor * u)
        scaled = np.fmax(scaled, np.where(np.isfinite(scaled), fraction * noise[t], np.nan))
        return np.where(by_noise[t], np.maximum(factor * u, fraction * noise[t]), scaled)

    env = healthy_envelope(stable, values, limit_at, window)
    limits = np.vstack([limit_at(t, env[t]) for t in range(len(values))]) if len(values) else env
    return limits, between, by_noise


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


# The rule of the rows judged here, as the tolerances route and the alerts state it.
MEASURED_RULE = (
    "%(column)s above %(stable_factor)g x the divergence of the stable-rounding pass (the reference rounded to the "
    "candidate's dtype between layers; at least one rounding; for a layer output counted up to "
    "%(boundary_factor)g x what the layers before carry, more being damage born at its boundary), for gradients "
    "at least %(half_batch_fraction)g x their sampling noise (the half batch's reference against the batch's); the "
    "loss above %(half_batch_fraction)g x its sampling noise, wherever the rounding happened; each the largest of "
    "the last %(stable_window)d logged comparisons; harmed (an alert) when above for %(held_comparisons)d logged "
    "comparisons in a row or %(immediate_factor)g x above at one."
)
