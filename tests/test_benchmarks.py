"""The benchmark command runs at a tiny size and prints its tables (no timing asserts)."""

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tensorboard]  # every benchmark's tiny form

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_benchmark_command_runs_at_tiny_size():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--tiny"],
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
