"""The benchmark command runs at a tiny size, prints its tables and writes its results
as JSON (``--json``): the machine line, every benchmark's exit code and, for those
that write JSON, the rows of their tables (no timing asserts)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tensorboard]  # every benchmark's tiny form

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_benchmark_command_runs_at_tiny_size(tmp_path):
    results_path = str(tmp_path / "results.json")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--tiny", "--json", results_path],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert out.startswith("machine: ")
    # One row per model in the logging table, with every variant's ratio and its noise.
    assert "| mlp | 55050 | 6 | 64 |" in out and "| transformer |" in out
    logging_part = out.split("## logging")[1].split("## fit")[0]
    assert "Statistics pass (all columns + histogram) vs one read of the same gradients" in logging_part
    assert logging_part.count("| mlp | 55050 |") == 2  # step overhead and the pass vs its floor
    assert "kernel: compiled kernel as TensorFlow ops" in logging_part
    fit_part = out.split("## fit")[1].split("## variables")[0]
    assert "| mlp | 64 |" in fit_part and "gradients written in the step (prototype)" in fit_part
    variables_part = out.split("## variables")[1].split("## real_models")[0]
    assert "| 1000 | yes |" in variables_part and "| 100 | no |" in variables_part
    assert "| bn_dropout_cnn | False |" in out.split("## real_models")[1].split("## short_fit")[0]
    assert "| bn_dropout_cnn | defaults |" in out.split("## short_fit")[1]
    whole_run = out.split("## whole_run")[1].split("## plugin")[0]
    assert "| model (wall time) | steps | batch | plain s | lens s | whole run lens / plain | tracing % |" in whole_run
    assert "| model (cpu time) |" in whole_run
    assert "| mlp | 24 | 64 |" in whole_run
    assert "rust (--load_fast=true): logdir loaded in" in out
    assert "| series 1 column, max_steps=2000 (as the tab asks) |" in out
    assert "| series 1 column, all steps (API, not the tab) |" in out
    assert "## frontend" in out
    advisor = out.split("## advisor")[1].split("## reference")[0]
    assert "| mlp | 3 |" in advisor and "| transformer | 8 |" in advisor
    reference = out.split("## reference")[1].split("## gpu_check")[0]
    assert "| mlp | mixed_float16 |" in reference and "| mlp | mixed_bfloat16 |" in reference
    hardware = out.split("## gpu_check")[1]
    assert "| float32 probe | TF32 switch on | CPU | IEEE float32, 24 bits;" in hardware
    assert "| float32 probe | TF32 switch on | GPU | not run (no GPU here) |" in hardware
    assert "| NaN model, defaults | jit_compile='auto' -> False | CPU | replayed step 2: not precision" in hardware

    # The same run's --json: what the tables above print, as numbers.
    with open(results_path) as f:
        gathered = json.load(f)
    assert out.startswith("machine: " + gathered["machine"] + "\n") and gathered["tiny"] is True
    benchmarks = gathered["benchmarks"]
    assert {name: b["exit_code"] for name, b in benchmarks.items()} == dict.fromkeys(
        ["logging", "passes", "fit", "nonfinite", "variables", "real_models", "short_fit", "whole_run", "plugin",
         "frontend", "charts", "views", "writer", "memory", "advisor", "reference", "gpu_check"], 0)
    logging_rows = {r["model"]: r for r in benchmarks["logging"]["results"]}
    assert sorted(logging_rows) == ["mlp", "transformer"]
    assert (logging_rows["mlp"]["parameters"], logging_rows["mlp"]["variables"], logging_rows["mlp"]["batch"]) == (
        55050, 6, 64)
    assert all(s["p25"] <= s["median"] <= s["p75"] for s in logging_rows["mlp"]["spread"].values())
    assert [(r["model"], r["batch"]) for r in benchmarks["fit"]["results"]] == [("mlp", 64)]
    assert {(r["variables"], r["histogram"]) for r in benchmarks["variables"]["results"]} >= {(1000, True),
                                                                                            (100, False)}
    short_fit = {r["model"]: r for r in benchmarks["short_fit"]["results"]}
    assert "defaults" in short_fit["bn_dropout_cnn"]["variants"]
    whole_run_mlp = benchmarks["whole_run"]["results"][0]
    assert {c: (r["model"], r["steps"], r["batch"]) for c, r in whole_run_mlp.items()} == {
        "wall": ("mlp", 24, 64), "cpu": ("mlp", 24, 64)}
    assert {r["model"]: r["units"] for r in benchmarks["advisor"]["results"]} == {"mlp": 3, "transformer": 8}
    # Every other benchmark's rows say where they were measured; the chart benchmark keeps its own raw timings.
    assert benchmarks["charts"]["results"] is None
    assert all(isinstance(b["results"], list) and b["results"] and all("machine" in r for r in b["results"])
               for name, b in benchmarks.items()
               if name not in ("charts", "logging", "fit", "variables", "short_fit", "whole_run", "advisor"))
