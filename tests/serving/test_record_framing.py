"""The record factories (records/framing.py) and the tag parser (metadata.parse_tag)."""

import pathlib

import pytest

from tb_gradlens import metadata
from tb_gradlens import records

PACKAGE = pathlib.Path(__file__).resolve().parent.parent.parent / "tb_gradlens"

_SIDE = records.variant("float32", "float32", "float32", "float32")
_COMPARISON = records.comparison_extras(_SIDE, _SIDE)


def _framed():
    """{kind: (the factory's record, the same record framed by hand)}."""
    rows = ["dense/kernel", "dense/bias"]
    gradient = records.gradient_extras(["float32"] * 2, ["bfloat16"] * 2)
    update = records.update_extras(["float32"] * 2)
    replay = records.replay_extras(["output", "loss"], _SIDE, _SIDE)
    dtype_map = records.dtype_map([{"path": "dense"}], [], "float32")
    status = records.lens_status("w", [records.expectation(metadata.GRAD_STATS, "gradients", 1)])
    advice = records.advice("w", "mixed_bfloat16", 0.1, "", 0.2, 0.0,
                            [records.advice_unit("dense", ["dense"], ["Dense"], 3)], None)
    m = metadata
    return {
        m.GRAD_STATS: (records.grad_stats_record(rows, gradient),
                       m.RecordMetadata(m.GRAD_STATS, rows, m.GRAD_STATS_COLUMNS, gradient)),
        m.GRAD_HISTOGRAM: (records.grad_histogram_record(rows),
                           m.RecordMetadata(m.GRAD_HISTOGRAM, rows, m.HISTOGRAM_COLUMNS, records.histogram_extras())),
        m.UPDATE_STATS: (records.update_stats_record(rows, update),
                         m.RecordMetadata(m.UPDATE_STATS, rows, m.UPDATE_STATS_COLUMNS, update)),
        m.GRADIENT_INDICES: (records.gradient_indices_record(rows, [10, None]),
                             m.RecordMetadata(m.GRADIENT_INDICES, rows, m.GRADIENT_INDICES_COLUMNS,
                                              {"table_rows": [10, None]})),
        m.OPTIMIZER_STEP: (records.optimizer_step_record(True),
                           m.RecordMetadata(m.OPTIMIZER_STEP, ["optimizer"], m.OPTIMIZER_STEP_COLUMNS,
                                            {"loss_scaling": True})),
        m.NONFINITE_REPLAY: (records.nonfinite_replay_record(["dense", "loss"], replay),
                             m.RecordMetadata(m.NONFINITE_REPLAY, ["dense", "loss"], m.NONFINITE_REPLAY_COLUMNS,
                                              replay)),
        m.DIVERGENCE: (records.divergence_record(rows, _COMPARISON),
                       m.RecordMetadata(m.DIVERGENCE, rows, m.DIVERGENCE_COLUMNS, _COMPARISON)),
        m.ACTIVATION_DIVERGENCE: (records.activation_divergence_record(["dense"], _COMPARISON),
                                  m.RecordMetadata(m.ACTIVATION_DIVERGENCE, ["dense"], m.DIVERGENCE_COLUMNS,
                                                   _COMPARISON)),
        m.LOSS_COMPARISON: (records.loss_comparison_record(_COMPARISON),
                            m.RecordMetadata(m.LOSS_COMPARISON, ["loss"], m.LOSS_COMPARISON_COLUMNS, _COMPARISON)),
        m.DTYPES: (records.dtypes_record(dtype_map), m.RecordMetadata(m.DTYPES, ["dense"], ())),
        m.LENS_STATUS: (records.lens_status_record(status),
                        m.RecordMetadata(m.LENS_STATUS, ["grad_stats:gradients"], ())),
        m.ADVICE: (records.advice_record(advice), m.RecordMetadata(m.ADVICE, ["dense"], ())),
    }


def test_every_kind_has_a_factory_that_frames_it_as_written_before():
    framed = _framed()
    assert set(framed) == set(metadata.KINDS)
    for kind, (made, by_hand) in framed.items():
        assert made.kind == kind
        assert metadata.serialize_content(made) == metadata.serialize_content(by_hand), kind
        metadata.create_summary_metadata(made)  # validates
        records.validate(made)


def test_comparison_record_picks_the_factory_of_its_kind():
    framed = _framed()
    for kind in (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON):
        by_hand = framed[kind][1]
        assert records.comparison_record(kind, by_hand.rows, _COMPARISON) == by_hand
    with pytest.raises(ValueError):
        records.divergence_record(["a"], _COMPARISON, kind=metadata.GRAD_STATS)


def test_json_text_sorts_keys_and_keeps_unicode():
    assert records.json_text({"b": 1, "a": "é"}) == '{"a": "é", "b": 1}'


def test_writers_frame_records_only_through_the_factories():
    for folder in ("writing", "keras", "compare", "advisor"):
        for path in (PACKAGE / folder).rglob("*.py"):
            assert "RecordMetadata(" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("name", ["gradients", "compare/float32_vs_mixed_bfloat16", "replicas", "a/b/c"])
def test_parse_tag_inverts_tag_for(name):
    for made, _ in _framed().values():
        tag = metadata.tag_for(name, made)
        parts = metadata.parse_tag(tag)
        assert parts.name == name
        assert parts.kind == made.kind
        assert tag == "%s/%s/%s" % parts
        assert tag == metadata.tag_for(parts.name, made)


@pytest.mark.parametrize("tag", ["loss", "epoch/loss", ""])
def test_parse_tag_of_another_shape_is_all_name(tag):
    assert metadata.parse_tag(tag) == metadata.TagParts(tag, None, None)
