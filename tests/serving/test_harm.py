"""The rule every judged divergence goes by (``tb_gradlens.analysis.harm``), formula by formula.

Each pure function is checked against a plain loop written from its
docstring's formula, on seeded random tables with NaN and infinite entries,
and the rule as a whole (``measured_limits``) on the cases issue 38 names:
damage born at a layer's boundary is not excused by the stable pass that
rounds there too, a healthy model's rounding that grows with depth is, the
loss is judged by its sampling noise wherever it rounded, and a fault's own
baseline is not carried forward.
"""

import numpy as np
import pytest

from tb_gradlens.analysis import harm

U = 2.0 ** -8  # one bfloat16 rounding
C, F, WINDOW, B = 4.0, 0.5, 4, 2.0


def _table(seed, shape=(9, 6)):
    rng = np.random.default_rng(seed)
    out = rng.lognormal(-5, 2, shape)
    out[rng.random(shape) < 0.1] = np.nan
    out[rng.random(shape) < 0.05] = np.inf
    return out


@pytest.mark.parametrize("seed", range(4))
def test_envelope_is_the_largest_of_the_window(seed):
    s = _table(seed)
    got = harm.envelope(s, WINDOW)
    for t in range(len(s)):
        for r in range(s.shape[1]):
            part = s[max(0, t - WINDOW + 1): t + 1, r]
            part = part[~np.isnan(part)]
            want = part.max() if len(part) else np.nan
            np.testing.assert_equal(got[t, r], want)


@pytest.mark.parametrize("seed", range(4))
def test_boundary_capped_divides_each_row_by_the_jumps_beyond_factor_up_to_it(seed):
    s = _table(seed)
    got = harm.boundary_capped(s, U, B)
    for t in range(len(s)):
        before, rho = U, 1.0
        for r in range(s.shape[1]):
            x = s[t, r]
            if np.isfinite(x):
                jump = x / before
                rho *= jump / B if jump > B else 1.0
                before = max(before, x)
                np.testing.assert_allclose(got[t, r], x / rho, rtol=1e-12)
            else:
                np.testing.assert_equal(got[t, r], x)


def test_a_jump_at_a_boundary_is_capped_and_growth_with_depth_is_not():
    # A deep healthy model: rounding grows ~1.3x per layer; a timestamp cast at the first layer: 70 roundings.
    healthy = U * 1.3 ** np.arange(12)[None, :]
    np.testing.assert_array_equal(harm.boundary_capped(healthy, U, B), healthy)
    timestamp = np.array([[70 * U, 70 * U, 72 * U, 75 * U]])
    capped = harm.boundary_capped(timestamp, U, B)
    assert capped[0, 0] == B * U  # born at the first layer's input
    # The rows after it carry that damage forward: they are not excused by it either.
    np.testing.assert_allclose(capped[0, 1:], timestamp[0, 1:] / 35)


def _limit(noise):
    return lambda t, env: C * np.fmax(U, env) + 0 * noise[t]


def test_healthy_envelope_leaves_out_the_comparisons_a_row_was_above_its_limit_at():
    # One row: a fault at comparison 1 whose candidate and stable pass both jump (the stable pass
    # there is no baseline for comparisons 2-4).
    s = np.array([[1.0], [50.0], [1.0], [1.0], [1.0]]) * U
    v = np.array([[2.0], [400.0], [2.0], [2.0], [2.0]]) * U
    env = harm.healthy_envelope(s, v, _limit(np.zeros_like(s)), WINDOW)
    np.testing.assert_array_equal(env[:, 0], [U, 50 * U, U, U, U])  # its own step keeps its own s
    plain = harm.envelope(s, WINDOW)
    assert plain[2, 0] == plain[4, 0] == 50 * U  # what the plain envelope carried forward


@pytest.mark.parametrize("seed", range(3))
def test_healthy_envelope_equals_the_plain_one_when_no_row_is_above(seed):
    s = np.abs(_table(seed))
    s[~np.isfinite(s)] = U
    np.testing.assert_array_equal(harm.healthy_envelope(s, s, lambda t, e: C * e, WINDOW), harm.envelope(s, WINDOW))


def test_measured_limits_of_each_kind():
    s = np.array([[U, 0.5 * U, 40 * U], [U, U, 40 * U]])
    n = np.array([[0.2, 0.2, 0.2], [0.01, 0.01, 0.01]])
    v = np.array([[2 * U, U, 40 * U], [2 * U, U, 40 * U]])
    kw = dict(factor=C, fraction=F, window=WINDOW)
    u = np.full(3, U)
    grads, between, _ = harm.measured_limits(v, s, n, u, **kw)
    np.testing.assert_allclose(grads, np.maximum(C * np.fmax(U, harm.envelope(s, WINDOW)), F * harm.envelope(n, WINDOW)))
    assert not between.any()
    acts, between, _ = harm.measured_limits(v, s, np.full_like(s, np.nan), u, boundary_factor=B, **kw)
    # Row 2 jumps to 40 roundings over rows that carry 1: counted as 2, so its limit is 8 roundings.
    np.testing.assert_allclose(acts[:, 2], C * B * U)
    assert between[:, 2].all() and not between[:, :2].any()
    loss_v = np.array([[0.02], [0.02]])
    loss, between, by_noise = harm.measured_limits(loss_v, np.array([[0.02], [0.02]]), np.array([[0.01], [0.08]]),
                                                   np.array([U]), loss=True, **kw)
    np.testing.assert_allclose(loss[:, 0], [max(C * U, F * 0.01), F * 0.08])  # its noise alone, not 4 x 0.02
    assert by_noise.all() and between.all()  # the stable pass differs as much: born between layers


def test_held_and_harmed():
    over = np.array([[1, 0], [1, 1], [0, 1], [1, 1]], bool)
    np.testing.assert_array_equal(harm.held(over, 2), [[1, 0], [1, 1], [0, 1], [0, 1]])
    values = np.array([[11.0, 0.5], [0.5, 0.5]])
    limits = np.ones_like(values)
    np.testing.assert_array_equal(harm.harmed(values, limits, 2, 10), [[True, False], [False, False]])
    np.testing.assert_array_equal(harm.ratio(values, np.array([[2.0, 0.0], [np.nan, 1.0]])),
                                  [[5.5, np.nan], [np.nan, 0.5]])
