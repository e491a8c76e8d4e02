"""The advisor's recommendation formulas (``advisor.recommend``) against NumPy
expressions, and the greedy choice on errors that grow together."""

import math

import numpy as np
import pytest

from tb_gradlens.advisor import recommend


def test_rel_l2_is_the_norm_of_the_difference_over_the_norm_of_the_reference():
    rng = np.random.default_rng(0)
    c, r = [rng.normal(size=(3, 4)), rng.normal(size=5)], [rng.normal(size=(3, 4)), rng.normal(size=5)]
    d = np.concatenate([(a - b).ravel() for a, b in zip(c, r)])
    ref = np.concatenate([b.ravel() for b in r])
    assert recommend.rel_l2(c, r) == pytest.approx(np.linalg.norm(d) / np.linalg.norm(ref), rel=1e-12)
    assert recommend.rel_l2([np.array([np.nan])], [np.array([1.0])]) == math.inf
    assert recommend.rel_l2([None, np.zeros(2)], [None, np.zeros(2)]) == 0.0


def test_predicted_rows_scale_the_measured_rows_by_the_error_left():
    rng = np.random.default_rng(1)
    measured, alone = rng.uniform(1, 2, size=4), rng.uniform(0, 1, size=(3, 4))
    a2 = alone ** 2
    expected = measured * np.sqrt(a2[[0]].sum(0) / a2.sum(0))  # units 1 and 2 in float32
    np.testing.assert_allclose(recommend.predicted_rows(measured, alone, [1, 2]), expected, rtol=1e-12)
    # From rows measured with unit 1 in float32: only unit 2's share is taken away.
    expected = measured * np.sqrt(a2[[0]].sum(0) / a2[[0, 2]].sum(0))
    np.testing.assert_allclose(recommend.predicted_rows(measured, alone, [1, 2], [1]), expected, rtol=1e-12)


def test_a_unit_non_finite_alone_keeps_its_rows_infinite_until_it_is_kept():
    measured = np.array([math.inf, 1.0])
    alone = np.array([[math.inf, 0.5], [0.1, 0.5]])
    assert np.isinf(recommend.predicted_rows(measured, alone, [1])[0])
    np.testing.assert_allclose(recommend.predicted_rows(measured, alone, [0]), [0.1, math.sqrt(0.5)], rtol=1e-12)


def test_harm_index_is_the_largest_value_over_limit_on_judged_rows():
    values, limits = np.array([1.0, 9.0, math.inf]), np.array([2.0, 3.0, math.nan])
    assert recommend.harm_index(values, limits) == pytest.approx(3.0)
    assert recommend.harm_index([math.nan], [1.0]) == math.inf
    assert recommend.harm_index([5.0], [math.nan]) == 0.0


def test_greedy_follows_the_measured_rows_when_errors_grow_together():
    # A deep model: one unit's error is amplified by the layers after it (the
    # whole model is 1000x its limit, each unit alone far less).  Taken as
    # independent, no unit explains the total and every unit would be kept;
    # the leave-one-out pass measured unit 1 alone in float32 brings it back.
    total, limits = np.array([1000.0, 1.0]), np.array([10.0, 10.0])
    alone = np.array([[5.0, 1.0], [7.0, 1.0], [3.0, 1.0]])
    without = [np.array([900.0, 1.0]), np.array([2.0, 1.0]), np.array([950.0, 1.0])]
    kept, predicted = recommend.greedy(total, alone, limits, [True] * 3, 1.0, without)
    assert kept == [1] and predicted == pytest.approx(0.2)
    # Without measured rows the prediction alone keeps every unit.
    assert sorted(recommend.greedy(total, alone, limits, [True] * 3, 1.0)[0]) == [0, 1, 2]


def test_greedy_adds_units_predicted_from_the_first_ones_measured_rows():
    total, limits = np.array([40.0, 40.0]), np.array([10.0, 10.0])
    alone = np.array([[4.0, 0.0], [0.0, 4.0], [0.1, 0.1]])
    without = [np.array([1.0, 40.0]), np.array([40.0, 1.0]), np.array([40.0, 40.0])]
    kept, predicted = recommend.greedy(total, alone, limits, [True, True, False], 1.0, without)
    assert sorted(kept) == [0, 1] and predicted <= 1.0


def test_excess_sums_how_far_beyond_their_limits_the_rows_are():
    values, limits = np.array([30.0, 5.0, 20.0, 1.0]), np.array([10.0, 10.0, 10.0, math.nan])
    ratio = values[:3] / limits[:3]
    assert recommend.excess(values, limits) == pytest.approx(np.sum(np.maximum(ratio - 1, 0)))


def _advice(units, kept):
    from tb_gradlens import records

    entries = [records.advice_unit(name, [name], [cls], 10) for name, cls in units]
    rec = records.advice_recommendation(kept, kept, {"after": 0.5}, True, 1)
    return records.read_advice(records.advice("test", "mixed_bfloat16", 1.0, "", 30.0, 0.1, entries, rec))


def test_a_recommendation_names_the_stream_and_the_input_where_that_is_what_it_keeps():
    """Issue 38: a stream's Add layers kept in float32 are named as the residual stream; the first unit
    kept, the layer reading the model input."""
    from tb_gradlens.analysis import advice as advice_analysis

    units = [("embed", "Dense"), ("ln_0", "LayerNormalization"), ("residual_0", "Add"), ("ln_1", "LayerNormalization"),
             ("residual_1", "Add"), ("logits", "Dense")]
    stream = _advice(units, ["embed", "residual_0", "residual_1"])
    assert advice_analysis.named(stream) == ("the residual stream through residual_0, residual_1; "
                                             "embed, which reads the model input")
    assert "that is: the residual stream" in "\n".join(advice_analysis.text_lines(stream))
    assert advice_analysis.named(_advice(units, ["ln_1"])) is None
    assert advice_analysis.named(_advice(units, [])) is None
