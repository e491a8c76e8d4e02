"""The gradlens format: metadata round trip, tags, and rejection of bad content."""

import argparse
import json

import pytest
from tensorboard.compat.proto import summary_pb2

from tb_gradlens import metadata
from tb_gradlens.serving import loader


def _stats_record(rows=("dense/kernel", "dense/bias")):
    return metadata.RecordMetadata(
        metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS, {"variable_dtypes": ["float32"] * 2}
    )


def test_summary_metadata_has_tensor_data_class_and_round_trips():
    record = _stats_record()
    md = metadata.create_summary_metadata(record)
    assert md.data_class == summary_pb2.DATA_CLASS_TENSOR
    assert md.plugin_data.plugin_name == "gradlens"
    parsed = metadata.parse_summary_metadata(md, tag="t")
    assert parsed == record
    assert parsed.version == metadata.FORMAT_VERSION
    assert parsed.extras == {"variable_dtypes": ["float32", "float32"]}


def test_tag_changes_with_rows_and_is_stable():
    a = metadata.tag_for("gradients", _stats_record())
    assert a == metadata.tag_for("gradients", _stats_record())
    assert a.startswith("gradients/grad_stats/")
    assert a != metadata.tag_for("gradients", _stats_record(("other/kernel", "dense/bias")))


def _content(**overrides):
    obj = _stats_record().to_json()
    obj.update(overrides)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe not utf8", "not UTF-8 JSON"),
        (b"{not json", "not UTF-8 JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (_content(version=metadata.FORMAT_VERSION + 1), "newer than this tb_gradlens reads"),
        (_content(version=0), "invalid format version"),
        (_content(version="1"), "invalid format version"),
        (_content(kind="mystery"), "unknown kind 'mystery'"),
        (_content(columns=["l2_norm"]), "must have columns"),
        (_content(rows="dense/kernel"), "rows and columns must be lists"),
        (_content(rows=[1, 2]), "rows must be a list of strings"),
        (json.dumps({"version": 1, "kind": "grad_stats", "rows": []}).encode(), "missing field 'columns'"),
    ],
)
def test_parser_rejects_bad_content_naming_the_tag(content, message):
    with pytest.raises(metadata.FormatError) as info:
        metadata.parse_plugin_content(content, tag="run1/gradients/grad_stats/abc")
    assert message in str(info.value)
    assert "run1/gradients/grad_stats/abc" in str(info.value)
    assert info.value.tag == "run1/gradients/grad_stats/abc"


def test_parser_reads_unknown_extra_keys_of_a_known_version():
    record = metadata.parse_plugin_content(_content(future_hint="x"))
    assert record.extras["future_hint"] == "x"


def test_tensor_shape_check():
    record = _stats_record()
    metadata.check_tensor_shape(record, (2, len(metadata.GRAD_STATS_COLUMNS)))
    with pytest.raises(metadata.FormatError, match="does not match"):
        metadata.check_tensor_shape(record, (3, len(metadata.GRAD_STATS_COLUMNS)), "t")


def test_loader_raises_default_retention_but_keeps_user_value():
    flags = argparse.Namespace(samples_per_plugin={"images": 5})
    loader.GradLensLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"images": 5, "gradlens": 0}
    flags = argparse.Namespace(samples_per_plugin={"gradlens": 7})
    loader.GradLensLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"gradlens": 7}


def test_package_import_is_tensorflow_free():
    import subprocess
    import sys

    code = (
        "import sys, tb_gradlens, tb_gradlens.metadata, tb_gradlens.serving.loader, "
        "tb_gradlens.serving.gradlens_plugin, tb_gradlens.serving.reading\n"
        "bad = [m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.') or m == 'keras']\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
