"""The five answers (issue 40), against float64 NumPy on designed records.

Records written with TensorBoard's TF-free writer (tests/support/hostile_logs.py):
a healthy comparison whose layer outputs all sit at 1 / stable_factor of their
limit (by construction, as in any healthy run: nothing stands out, nothing may
be named), a harmed one, float32 runs with another seed, advice.  Each answer
is checked against a recomputation here, and `report` prints the same sentences.
"""

import json
import os

import numpy as np
import pytest

from tb_gradlens import cli
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import answers
from tb_gradlens.analysis import tolerances
from tb_gradlens.analysis.codes import DEFAULT_THRESHOLDS
from tb_gradlens.serving import judgment_json
from tb_gradlens.serving import routes_impl
from tests.support.readback import source_of
from tests.support import hostile_logs

STEPS = list(range(0, 120, 10))
LOSS_STEPS = range(60)
VARIABLES = ("mlp/dense_1/kernel", "mlp/dense_1/bias", "mlp/logits/kernel")
LAYERS = ("mlp/dense_1", "mlp/dense_2", "mlp/logits")
STABLE = 0.004  # every row's stable-rounding divergence
C = DEFAULT_THRESHOLDS.stable_factor
HARMED_ROW, HARMED_FROM = "mlp/logits/kernel", 60  # 3x its limit from here
F32 = records.variant("float32", "float32", "float32", "float32")
BF16 = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
NAME = "model_vs_float32"


def _content(record):
    return metadata.create_summary_metadata(record).plugin_data.content


def grad_rel_l2(run, row, step):
    if run == "harmed_bf16" and row == HARMED_ROW and step >= HARMED_FROM:
        return 3 * C * STABLE
    return (0.2 + 0.1 * VARIABLES.index(row)) * C * STABLE


def comparison_items(run):
    full = metadata.DIVERGENCE_COLUMNS
    items = []
    for kind, rows in ((metadata.DIVERGENCE, VARIABLES), (metadata.ACTIVATION_DIVERGENCE, LAYERS)):
        record = records.divergence_record(list(rows), records.comparison_extras(
            F32, BF16, row_dtypes=["bfloat16"] * len(rows)), kind)

        def values(step, kind=kind, rows=rows):
            m = np.full((len(rows), len(full)), np.nan, np.float32)
            m[:, full.index("nonfinite")] = 0
            m[:, full.index(metadata.STABLE_REL_L2)] = STABLE
            m[:, full.index("rel_l2")] = ([grad_rel_l2(run, r, step) for r in rows] if kind == metadata.DIVERGENCE
                                          else STABLE)  # a healthy layer output: its stable divergence, 1/C of its limit
            return m

        items.append((metadata.tag_for(NAME, record), _content(record), values))
    return items


def loss(run, step):
    base = 2.0 / (1.0 + 0.1 * step)
    return base * {"float32": 1.0, "float32_seed1": 1.0 + 0.01 * np.sin(step),
                   "healthy_bf16": 1.0 + 0.001 * np.cos(step), "harmed_bf16": 1.0 + 0.002 * step}[run]


HARM_ADVICE = {
    "writer": "tb_gradlens.advise", "metric": "harm_index", "reference": "float32", "candidate": "mixed_bfloat16",
    "tolerance": 1.0, "tolerance_basis": "every judged row within its limit", "before": 3.2, "loss_rel_error": 0.02,
    "gradient_before": 0.3, "worst_before": {"kind": "divergence", "row": HARMED_ROW, "value": 0.1, "limit": 0.03},
    "units": [
        {"name": "mlp/logits", "layers": ["mlp/logits"], "classes": ["Dense"], "params": 650, "step": 119,
         "output_row": "mlp/logits", "reason": None, "leave_one_out": 0.01, "one_at_a_time": 0.3,
         "harm_alone": 3.1, "harm_without": 0.4, "output_total": 0.01, "output_born": 0.01, "output_inherited": 0.0}],
    "recommendation": {"float32": ["mlp/logits"], "layers": ["mlp/logits"], "met": True, "verifications": 1,
                       "predicted": 0.4, "after": 0.42, "gradient_after": 0.01, "params_16bit_before": 650,
                       "params_16bit_after": 0, "params_total": 650},
    "not_attributable": [], "cost": {"passes": 3, "seconds": 0.5},
}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("answers")
    for run in ("float32", "float32_seed1"):
        hostile_logs.write_records(str(root / run), [("gradients/grad_stats/s", hostile_logs.content(
            metadata.GRAD_STATS, VARIABLES), hostile_logs.stats(len(VARIABLES), 1.0))], steps=LOSS_STEPS)
    for run in ("healthy_bf16", "harmed_bf16"):
        hostile_logs.write_records(str(root / run), comparison_items(run), steps=STEPS)
    advice = records.advice_record(HARM_ADVICE)
    hostile_logs.write_records(str(root / "harmed_bf16"), [(
        metadata.tag_for("advisor", advice), _content(advice), hostile_logs.json_tensor(HARM_ADVICE))],
        steps=[STEPS[-1]], filename_suffix=".advice")
    # Advice and no comparison: the advisor measured this run.
    hostile_logs.write_records(str(root / "advised_bf16"), [("gradients/grad_stats/s", hostile_logs.content(
        metadata.GRAD_STATS, VARIABLES), hostile_logs.stats(len(VARIABLES), 1.0))], steps=range(3))
    hostile_logs.write_records(str(root / "advised_bf16"), [(
        metadata.tag_for("advisor", advice), _content(advice), hostile_logs.json_tensor(HARM_ADVICE))],
        steps=[2], filename_suffix=".advice")
    # The loss of every run, from step 0 (as a user's loop logs it).
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for run in ("float32", "float32_seed1", "healthy_bf16", "harmed_bf16"):
        writer = EventFileWriter(str(root / run), filename_suffix=".loss")
        for step in LOSS_STEPS:
            value = summary_pb2.Summary.Value(tag="loss", simple_value=loss(run, step))
            writer.add_event(event_pb2.Event(step=step, wall_time=2e9 + step, summary=summary_pb2.Summary(value=[value])))
        writer.close()
    return str(root)


@pytest.fixture(scope="module")
def said(logdir):
    return {r["run"]: r for r in answers.logdir_answers(source_of(logdir))["runs"]}


def ratios(logdir, run):
    """{row: value / limit at each comparison} from the limits route and the logged values (float64)."""
    source = source_of(logdir)
    out = {}
    for entry in source.entries(run):
        if entry.kind not in tolerances.STABLE_COLUMN:
            continue
        limits = routes_impl.limits_impl(source, run, entry.tag)
        series = source.series(run, entry.tag)
        values = series.column("rel_l2").astype(np.float64)
        for r, row in enumerate(limits["rows"]):
            out[row] = values[:, r] / np.asarray(limits["limits"][r], np.float64)
    return out


def test_nothing_stands_out_when_every_part_is_within_and_no_row_is_named(logdir, said):
    """The layer outputs all sit at 1 / stable_factor of their limit: the old headline named the first
    of these equals ("mlp/dense_1"); a ranking by the harm index has nothing to name."""
    q2 = answers.by_id(said["healthy_bf16"])["diverges_most"]
    expected = ratios(logdir, "healthy_bf16")
    assert all(np.allclose(expected[layer], 1 / C) for layer in LAYERS)
    assert q2["verdict"] == "within" and q2["ratio"] == pytest.approx(max(v.max() for v in expected.values()))
    assert not any(name in q2["text"] for name in VARIABLES + LAYERS)
    assert q2["text"].startswith("Nothing stands out.")


def test_the_part_harmed_is_named_with_its_step_and_harm_index(logdir, said):
    q2 = answers.by_id(said["harmed_bf16"])["diverges_most"]
    expected = ratios(logdir, "harmed_bf16")
    source = source_of(logdir)
    tag = next(e.tag for e in source.entries("harmed_bf16") if e.kind == metadata.DIVERGENCE)
    limits = routes_impl.limits_impl(source, "harmed_bf16", tag)
    first_harmed = limits["harmed"][limits["rows"].index(HARMED_ROW)][0]
    assert q2["verdict"] == "harmed" and q2["row"] == HARMED_ROW and q2["kind"] == metadata.DIVERGENCE
    assert q2["step"] == first_harmed == HARMED_FROM
    assert q2["ratio"] == pytest.approx(expected[HARMED_ROW].max())
    assert "The gradient of %s diverges most, %s× its limit" % (HARMED_ROW, answers.fmt_ratio(q2["ratio"])) \
        in q2["text"]
    # The Divergence view's sentence of the gradients names the same row; the layer outputs' none.
    sections = said["harmed_bf16"]["comparisons"][0]["answer"]["sections"]
    assert sections[metadata.DIVERGENCE]["verdict"] == "harmed" and HARMED_ROW in sections[metadata.DIVERGENCE]["text"]
    assert sections[metadata.ACTIVATION_DIVERGENCE]["verdict"] == "within"
    assert not any(layer in sections[metadata.ACTIVATION_DIVERGENCE]["text"] for layer in LAYERS)


def test_better_or_worse_over_training_in_a_sentence(logdir, said):
    worse = answers.by_id(said["harmed_bf16"])["over_training"]
    index = np.max(np.stack([ratios(logdir, "harmed_bf16")[v] for v in VARIABLES]), axis=0)
    third = len(index) // 3
    early, late = np.median(index[:third]), np.median(index[-third:])
    assert worse["verdict"] == "worse" and late >= 1.5 * early
    assert "rose from %s" % answers.fmt_ratio(early) in worse["text"] and "to %s" % answers.fmt_ratio(late) in \
        worse["text"]
    assert "still harmed at the last comparison, step %d" % STEPS[-1] in worse["text"]
    assert answers.by_id(said["healthy_bf16"])["over_training"]["verdict"] == "steady"


def test_beyond_float32_noise_against_the_float32_run_with_another_seed(logdir, said):
    from tb_gradlens import analysis

    source = source_of(logdir)
    for run, verdict in (("harmed_bf16", "beyond"), ("healthy_bf16", "within")):
        q1 = answers.by_id(said[run])["beyond_noise"]
        assert q1["runs"] == {"a": "float32", "b": run, "noise": "float32_seed1"}
        comparison = analysis.compare_runs(source, "float32", run, analysis.DEFAULT_QUANTITY, "float32_seed1")
        result = judgment_json.run_comparison_json(comparison)
        assert q1["verdict"] == verdict and result["summary"]["exceeds_noise"] is (verdict == "beyond")
        assert q1["text"] == answers.noise_sentence(comparison)["text"]  # what the Compare view says of these runs
    first = answers.by_id(said["harmed_bf16"])["beyond_noise"]
    assert first["text"].startswith("Beyond noise from step %d." % first["step"])
    assert answers.by_id(said["float32"])["beyond_noise"]["verdict"] == "reference"


def test_without_a_noise_floor_run_it_says_how_to_get_one(logdir, tmp_path):
    import shutil

    shutil.copytree(logdir, tmp_path / "logs")
    shutil.rmtree(tmp_path / "logs" / "float32_seed1")
    q1 = answers.by_id(answers.logdir_answers(source_of(str(tmp_path / "logs")), ["harmed_bf16"])["runs"][0])
    q1 = q1["beyond_noise"]
    assert q1["verdict"] == "no_noise" and "Train float32 again with another seed" in q1["text"]


def test_what_to_keep_in_float32_is_the_advice_with_the_line_to_paste(said):
    q4 = answers.by_id(said["harmed_bf16"])["keep_float32"]
    assert q4["verdict"] == "keep" and q4["layers"] == ["mlp/logits"]
    assert q4["code"] == 'tb_gradlens.keep_in_float32(model, ["mlp/logits"])'
    assert q4["text"].startswith("Keep mlp/logits in float32. That brings the harm index from 3.2 to 0.42")
    assert answers.by_id(said["healthy_bf16"])["keep_float32"]["verdict"] == "no_advice"


def test_a_run_the_advisor_measured_is_not_said_to_have_no_comparison(said):
    q2 = answers.by_id(said["advised_bf16"])["diverges_most"]
    assert q2["verdict"] == "advisor_only" and "no comparison logged" not in q2["short"]
    assert q2["short"] == "advisor: the gradient of %s, 3.2× its limit" % HARMED_ROW
    assert q2["text"].startswith("No comparison during training. The advisor's batch at step 2 is beyond its limits")


def test_no_sentence_chains_colons_or_nests_brackets(said):
    for run in said.values():
        texts = [a["text"] for a in run["answers"]] + [
            s["text"] for c in run["comparisons"] for s in c["answer"].get("sections", {}).values()]
        for text in texts:
            for sentence in text.split(". "):
                assert sentence.count(": ") <= 1, sentence
            opened = []  # a bracket of prose (after a space) or of code (a call: after a name)
            for i, ch in enumerate(text):
                if ch == "(":
                    opened.append(i == 0 or text[i - 1] == " ")
                    assert sum(opened) <= 1, text
                elif ch == ")":
                    opened.pop()


def test_report_prints_the_same_answers(logdir, said, capsys):
    assert cli.main(["report", logdir, "-q"]) == 0
    out = capsys.readouterr().out
    for run in said.values():
        block = out[out.index("run %s\n" % run["run"]):]
        for i, a in enumerate(run["answers"], 1):
            assert "  %d. %s %s\n" % (i, a["question"], a["text"]) in block
    assert cli.main(["report", logdir, "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["run"]: [a["text"] for a in r["answers"]] for r in data["runs"]} == {
        r: [a["text"] for a in v["answers"]] for r, v in said.items()}


def test_the_numbers_read_as_the_tab_writes_them():
    assert [answers.fmt(v) for v in (0.64951905, 120.0, 1.2345e-5, 123456.5, float("nan"), 0.001, 123456.0)] == [
        "0.6495", "120", "1.234e-5", "1.235e+5", "NaN", "0.001", "123456"]
    assert [answers.fmt_ratio(v) for v in (6.0, 0.25, 1.02, 0.123, 140.4)] == ["6", "0.25", "1.02", "0.12", "140"]


def test_the_answers_route_is_served(logdir):
    from tb_gradlens.serving import routes_impl

    out = routes_impl.answers_impl(source_of(logdir), "harmed_bf16", DEFAULT_THRESHOLDS)
    assert [r["run"] for r in out["runs"]] == ["harmed_bf16"] and out["focus"] == "harmed_bf16"
    assert [q["id"] for q in out["questions"]] == [q for q, _ in answers.QUESTIONS]
    assert os.path.basename(logdir)
