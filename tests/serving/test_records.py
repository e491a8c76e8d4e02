"""The record contract (tb_gradlens.records): what writers state, what readers get.

Readers never guess: a comparison side states its compute dtype; records of
older versions get it from an exact policy name only; malformed extras are a
FormatError naming the tag, and through the reading stack an error entry for
that tag while the other tags of the run are served.
"""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import reading
from tb_gradlens.serving import routes_impl
from tb_gradlens.writing import summary_ops

from tests.support.readback import multiplexer_provider


def _comparison_record(extras, rows=("a", "b")):
    return metadata.RecordMetadata(metadata.DIVERGENCE, rows, metadata.DIVERGENCE_COLUMNS, extras)


def test_float_formats_match_numpy():
    for name, np_type in (("float64", np.float64), ("float32", np.float32), ("float16", np.float16)):
        f = float_formats.get(name)
        info = np.finfo(np_type)
        assert f.mantissa_bits == info.nmant
        assert 2.0**f.min_normal == float(info.tiny)
        assert 2.0**f.min_subnormal == float(info.smallest_subnormal)
        assert f.max == info.maxexp - 1
        assert float_formats.unit_roundoff(name) == float(info.eps) / 2
    bf16, info = float_formats.get("bfloat16"), ml_dtypes.finfo(ml_dtypes.bfloat16)
    assert bf16.mantissa_bits == info.nmant
    assert 2.0**bf16.min_normal == float(info.tiny)
    assert 2.0**bf16.min_subnormal == float(info.smallest_subnormal)
    assert bf16.max == info.maxexp - 1
    with pytest.raises(ValueError, match="no float format"):
        float_formats.get("float8")


def test_variant_states_compute_dtype_and_reads_back():
    cand = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32", None, True)
    ref = records.variant("float32", "float32", "float32", "float32")
    extras = records.comparison_extras(ref, cand, 0.1, row_dtypes=["bfloat16", "float32"])
    info = records.read_comparison(_comparison_record(extras))
    assert info.candidate == records.VariantInfo(
        "mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32", "default", True)
    assert info.reference.compute_dtype == "float32"
    assert info.comparison == records.PRECISION
    assert info.floor_fraction == 0.1
    assert records.row_compute_dtypes(info, 2) == ["bfloat16", "float32"]
    with pytest.raises(ValueError):
        records.variant("x", "x", "float8")


def test_old_records_infer_compute_dtype_from_exact_policy_names_only():
    old = {
        "reference": {"label": "float32", "policy": "float32", "device": "default", "jit_compile": False},
        "candidate": {"label": "m", "policy": "mixed_bfloat16", "device": "default", "jit_compile": False},
        "floor": "0.1 * rms(reference)",
    }
    info = records.read_comparison(_comparison_record(old))
    assert (info.reference.compute_dtype, info.candidate.compute_dtype) == ("float32", "bfloat16")
    assert info.floor_fraction == records.DEFAULT_FLOOR_FRACTION
    assert records.row_compute_dtypes(info, 2) == ["bfloat16", "bfloat16"]
    # A policy name that merely contains a dtype is not guessed.
    old["candidate"]["policy"] = "my_float16_experiment"
    assert records.read_comparison(_comparison_record(old)).candidate.compute_dtype is None
    # An explicit null compute dtype stays unknown, whatever the policy says.
    old["candidate"].update(policy="mixed_bfloat16", compute_dtype=None)
    assert records.read_comparison(_comparison_record(old)).candidate.compute_dtype is None


@pytest.mark.parametrize(
    "kind,extras,message",
    [
        (metadata.DIVERGENCE, {"reference": "float32"}, "reference must be an object"),
        (metadata.DIVERGENCE, {"candidate": {"label": 3}}, "candidate.label must be a string"),
        (metadata.DIVERGENCE, {"comparison": "nonsense"}, "unknown comparison"),
        (metadata.DIVERGENCE, {"floor_fraction": "0.1"}, "floor_fraction"),
        (metadata.DIVERGENCE, {"row_dtypes": ["a", "b", "c"]}, "row_dtypes"),
        (metadata.DIVERGENCE, {"row_dtypes": []}, "row_dtypes has 0 entries for 2 rows"),
        (metadata.UPDATE_STATS, {"variable_dtypes": "bfloat16"}, "variable_dtypes"),
        (metadata.GRAD_STATS, {"gradient_dtypes": [1, 2]}, "gradient_dtypes"),
        (metadata.GRAD_STATS, {"skipped": [{"row": "x"}]}, "skipped"),
    ],
)
def test_malformed_extras_are_format_errors_naming_the_tag(kind, extras, message):
    record = metadata.RecordMetadata(kind, ["a", "b"], metadata.KIND_COLUMNS[kind], extras)
    with pytest.raises(metadata.FormatError, match=message) as info:
        records.validate(record, tag="run/x/1")
    assert "run/x/1" in str(info.value)


def test_dtype_map_validation():
    good = records.dtype_map(
        [{"path": "d", "class": "Dense", "policy": "mixed_bfloat16", "compute_dtype": "bfloat16",
          "variable_dtype": "float32", "output_dtype": None}],
        [{"path": "d/kernel", "dtype": "float32"}], "float32")
    assert records.read_dtype_map(good) == good
    assert good["layers"][0]["output_dtype"] == records.UNKNOWN
    for bad in ([], {"layers": {"a": 1}}, {"layers": [{"path": 3}]},
                {"variables": [{"path": "x"}]}, {"model_output_dtype": 16}, {"model_output_layer": 3}):
        with pytest.raises(ValueError):
            records.read_dtype_map(bad)


def _written_and_read(tmp_path, write):
    """Run ``write()`` with a file writer on run "run" as default; the plugin's Source over tmp_path."""
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    with writer.as_default():
        out = write()
    writer.close()
    return reading.Source(multiplexer_provider(str(tmp_path))), out


def test_a_record_with_bad_extras_is_an_error_entry_and_the_rest_is_served(tmp_path):
    good = metadata.RecordMetadata(
        metadata.UPDATE_STATS, ["w"], metadata.UPDATE_STATS_COLUMNS, records.update_extras(["bfloat16"]))
    bad = metadata.RecordMetadata(
        metadata.UPDATE_STATS, ["w"], metadata.UPDATE_STATS_COLUMNS, {"variable_dtypes": {"w": 1}})
    source, (good_tag, bad_tag) = _written_and_read(tmp_path, lambda: (
        summary_ops.write_record("good", good, tf.zeros([1, 3]), 0),
        summary_ops.write_record("bad", bad, tf.zeros([1, 3]), 0)))
    entries = {e.tag: e for e in source.entries("run")}
    assert entries[good_tag].record is not None and entries[good_tag].error is None
    assert entries[bad_tag].record is None and "variable_dtypes" in entries[bad_tag].error
    assert records.read_update(entries[good_tag].record) == ("bfloat16",)


def test_lens_status_round_trip_and_expected_steps(tmp_path):
    status = records.lens_status(
        "GradLensCallback",
        [records.expectation(metadata.GRAD_STATS, "model", 3, start=2, stop=11),
         records.expectation(metadata.DIVERGENCE, "mixed_bfloat16_vs_float32", 0)],
        [records.unsupported("comparison mixed_bfloat16_vs_float32", [metadata.DIVERGENCE],
                             "the model's layers cannot switch policy", step=0)],
    )
    source, written = _written_and_read(tmp_path, lambda: summary_ops.lens_status(status, step=0))
    assert bool(written)
    (entry,) = source.entries_of_kind("run", metadata.LENS_STATUS)
    (point,) = source.lens_statuses("run", entry.tag)
    got = point["status"]
    assert got.writer == "GradLensCallback"
    assert got.expected[0] == records.Expectation(metadata.GRAD_STATS, "model", 3, 2, 11)
    assert got.unsupported[0].reason == "the model's layers cannot switch policy"
    assert list(records.expected_steps(got.expected[0], 0, 100)) == [2, 5, 8]
    assert list(records.expected_steps(got.expected[0], 4, 7)) == [5]
    assert list(records.expected_steps(got.expected[1], 0, 100)) == []
    for bad in ({"writer": 1}, {"writer": "x", "expected": [{"kind": "grad_stats"}]},
                {"writer": "x", "unsupported": [{"what": "a"}]}):
        with pytest.raises(ValueError):
            records.read_lens_status(bad)


def test_lens_status_states_its_step_offset():
    """A training whose optimizer restarted (recompile) continues the run's
    steps: the status says by how much its records are shifted."""
    plain = records.lens_status("GradLensCallback", [records.expectation(metadata.GRAD_STATS, "model", 1)])
    assert "step_offset" not in plain and records.read_lens_status(plain).step_offset == 0
    shifted = records.lens_status(
        "GradLensCallback", [records.expectation(metadata.GRAD_STATS, "model", 1, start=6)], step_offset=6)
    got = records.read_lens_status(shifted)
    assert got.step_offset == 6 and got.expected[0].start == 6
    with pytest.raises(ValueError):
        records.read_lens_status(dict(shifted, step_offset="6"))


def test_records_written_the_old_way_are_analysed_without_guessing(tmp_path):
    """A divergence record of tb_gradlens before the record contract: sides with a
    policy but no compute dtype, no comparison, floor or row dtypes.  Exact policy
    names give the dtype (a bfloat16 alert); another name is said to be unknown."""
    from tb_gradlens import analysis

    old_ref = {"label": "float32", "policy": "float32", "device": "default", "jit_compile": False}
    sides = {
        "exact": {"label": "bf16", "policy": "mixed_bfloat16", "device": "default", "jit_compile": False},
        "free": {"label": "mine", "policy": "my_bf16_run", "device": "default", "jit_compile": False},
    }
    cols = metadata.DIVERGENCE_COLUMNS_V1  # records of an older tb_gradlens: format version 1
    value = np.zeros((1, len(cols)), np.float32)
    value[0, cols.index("rel_l2")] = 2.0
    value[0, cols.index("cosine")] = 0.5
    value[0, cols.index("norm_ratio")] = 1.0
    for run, cand in sides.items():
        record = metadata.RecordMetadata(metadata.ACTIVATION_DIVERGENCE, ["dense"], cols,
                                         {"reference": old_ref, "candidate": cand, "floor": "0.1 * rms(reference)"},
                                         version=1)
        writer = tf.summary.create_file_writer(str(tmp_path / run))
        with writer.as_default():
            summary_ops.write_record("grads", record, tf.constant(value), 0)
        writer.close()
    source = reading.Source(multiplexer_provider(str(tmp_path)))
    alerts, problems = analysis.run_alerts(source)
    assert problems == []
    by_run = {a.run: a for a in alerts}
    assert by_run["exact"].code == "bf16_divergence" and "bfloat16 rounding" in by_run["exact"].explanation
    assert by_run["free"].code == "divergence" and "compute dtype not recorded" in by_run["free"].explanation
    (entry,) = source.entries("free")
    assert "not recorded" in routes_impl.limits_impl(source, "free", entry.tag)["basis"][0]


def test_histogram_extras_are_validated_and_default():
    columns = metadata.HISTOGRAM_COLUMNS
    written = metadata.RecordMetadata(metadata.GRAD_HISTOGRAM, ["a"], columns, records.histogram_extras())
    info = records.read_histogram(written)
    assert info.min_exponent == metadata.MIN_EXPONENT
    assert info.dtype_exponent_limits["bfloat16"]["min_subnormal"] == -133
    older = metadata.RecordMetadata(metadata.GRAD_HISTOGRAM, ["a"], columns, {})
    assert records.read_histogram(older) == info
    for bad in ({"min_exponent": "x"}, {"min_exponent": 1.5}, {"dtype_exponent_limits": 5},
                {"dtype_exponent_limits": {"bfloat16": {"max": "127"}}}):
        record = metadata.RecordMetadata(metadata.GRAD_HISTOGRAM, ["a"], columns, bad)
        with pytest.raises(metadata.FormatError, match="'h'"):
            records.validate(record, "h")


def _advice_payload():
    units = [
        records.advice_unit("dense", ["dense"], ["Dense"], 40,
                            {"leave_one_out": 500.0, "one_at_a_time": 0.01, "output_total": 0.002,
                             "output_born": 0.002, "output_inherited": 0.0}, step=3, output_row="dense"),
        records.advice_unit("norm", ["norm"], ["NaiveVarianceNorm"], 0,
                            {"leave_one_out": 0.1, "one_at_a_time": float("inf")}, step=3, output_row="norm"),
        records.advice_unit("raw", ["raw"], ["Raw"], 8, reason="computes in bfloat16 whatever its dtype policy"),
    ]
    rec = records.advice_recommendation(["norm"], ["norm"], {"predicted": 0.05, "after": 0.1,
                                        "params_16bit_before": 48, "params_16bit_after": 48, "params_total": 48},
                                        True, 1)
    return records.advice("tb_gradlens.advise", "mixed_bfloat16", 0.84, "calibrated", 500.0, 0.3, units, rec,
                          [{"what": "ops outside any layer", "reason": "r"}], {"passes": 9, "seconds": 0.5})


def test_advice_round_trip_through_an_event_file(tmp_path):
    payload = _advice_payload()
    source, written = _written_and_read(tmp_path, lambda: summary_ops.advice(payload, step=5))
    assert bool(written)
    (entry,) = source.entries_of_kind("run", metadata.ADVICE)
    assert list(entry.record.rows) == ["dense", "norm", "raw"]
    (point,) = source.advice("run", entry.tag)
    got = point["advice"]
    assert point["step"] == 5 and got.writer == "tb_gradlens.advise" and got.tolerance == 0.84
    assert got.units[1]["one_at_a_time"] == float("inf") and got.units[1]["output_born"] is None
    assert not got.units[2]["attributable"] and got.units[2]["reason"].startswith("computes")
    assert got.recommendation["float32"] == ["norm"] and got.recommendation["met"] is True
    assert got.not_attributable[0]["what"] == "ops outside any layer" and got.cost["passes"] == 9


@pytest.mark.parametrize("change", [
    lambda p: p.update(writer=3),
    lambda p: p.update(units="dense"),
    lambda p: p["units"][0].update(leave_one_out="big"),
    lambda p: p["units"][0].update(layers=[1]),
    lambda p: p["recommendation"].update(float32=["not_a_unit"]),
    lambda p: p["recommendation"].update(met="yes"),
    lambda p: p.update(not_attributable=[{"what": "x"}]),
    lambda p: p.update(cost=[]),
])
def test_malformed_advice_is_refused(change):
    payload = _advice_payload()
    change(payload)
    with pytest.raises(ValueError):
        records.read_advice(payload)


def test_an_unreadable_advice_point_is_an_error_entry(tmp_path):
    payload = _advice_payload()
    payload["recommendation"]["float32"] = ["ghost"]
    source, _ = _written_and_read(tmp_path, lambda: (summary_ops.advice(_advice_payload(), step=1),
                                                     summary_ops.advice(payload, step=2)))
    (entry,) = source.entries_of_kind("run", metadata.ADVICE)
    points = source.advice("run", entry.tag)
    assert "error" not in points[0] and "unreadable advice at step 2" in points[1]["error"]
    assert [e["tag"] for e in source.point_errors()] == [entry.tag]
