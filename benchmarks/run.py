"""Run every benchmark and print their tables: the one benchmark command.

    python -m benchmarks.run            # full sizes (about an hour on 2 cores)
    python -m benchmarks.run --tiny     # seconds: checks that everything runs
    python -m benchmarks.run --tiny --json results.json   # and every result as JSON

Full sizes: logging overhead on the MLP, the 0.6M conv net, the ~5M
transformer, ResNet50 and MobileNetV2 (custom loop and model.fit), the
statistics pass against one read of the same gradients, each pass of the
lens (gradient, update, divergence) against one read on the real models'
sizes, the comparison step, 10^4 to 10^6 tiny variables, the lens on keras.applications
MobileNetV2 and ResNet50 under fit (steps it does not log, the first step),
whole 50-step fits with and without the lens, tracing included (DenseNet121,
EfficientNetB0, ConvNeXtTiny, ResNet50, the transformer), whole 2,000-step
runs at the defaults with the lens's cost by part (the conv net, ResNet50,
the transformer, EfficientNetB0, the MLP), plugin load
and route latency for 20 runs x 10,000 steps x 200 variables with both
loaders, the 200 x 10,000 heatmap in headless Chromium, the tab's line-chart kit
against uPlot on 20 runs x 10,000 steps, the tab's views until
usable (cold and warm) on the demo, 128 x 3,000 and 200 x 10,000, and
TensorBoard's memory on long runs (50,000 steps x 50 variables; 10,000 with
histograms), the precision advisor's cost per comparison step (MLP,
transformer), the IEEE reference's exactness and cost where float32 is
degraded (emulated TF32; MLP, conv net, transformer), and the hardware checks
of ``gpu_check.py`` (its GPU rows "not run" without a GPU). Results go to
BENCHMARKS.md by hand, with the machine, versions and date this prints.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.harness import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmarks that write their results with --json (benchmarks.harness.write_json).
WRITES_JSON = {"bench_logging", "bench_passes", "bench_fit", "bench_nonfinite", "bench_variables",
               "bench_real_models", "bench_short_fit", "bench_whole_run", "bench_plugin", "frontend_heatmap",
               "frontend_views", "bench_writer", "bench_memory", "bench_advisor", "bench_reference", "gpu_check"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--json", help="also write every benchmark's results to this JSON file: the machine line, "
                                       "and per benchmark its command, exit code and results (those that write "
                                       "JSON)")
    parser.add_argument("--only", help="comma list of: logging,passes,fit,nonfinite,variables,real_models,short_fit,"
                                       "whole_run,plugin,"
                                       "frontend,charts,views,writer,memory,advisor,reference,gpu_check")
    args = parser.parse_args(argv)
    every = ("logging,passes,fit,nonfinite,variables,real_models,short_fit,whole_run,plugin,frontend,charts,views,"
             "writer,memory,advisor,"
             "reference,gpu_check")
    only = set((args.only or every).split(","))
    machine_line = machine()
    print("machine: " + machine_line, flush=True)
    tiny = args.tiny
    jobs = {
        "logging": ["bench_logging.py"] + (["--tiny", "--models", "mlp,transformer", "--rounds", "1", "--steps", "2",
                                            "--pass-rounds", "1"] if tiny else []),
        "passes": ["bench_passes.py", "--activations"] + (["--tiny", "--models", "mlp,transformer", "--rounds", "1"]
                                                          if tiny else []),
        "fit": ["bench_fit.py"] + (["--tiny", "--models", "mlp", "--rounds", "1", "--batches", "4"] if tiny else []),
        "nonfinite": ["bench_nonfinite.py", "--first"] + (["--tiny", "--models", "mlp", "--rounds", "1", "--batches", "4"]
                                                          if tiny else []),
        "variables": ["bench_variables.py"] + (["--tiny"] if tiny else []),
        "real_models": ["bench_real_models.py"] + (["--tiny", "--rounds", "1", "--first-rounds", "1",
                                                    "--batches", "4", "--batch", "8"] if tiny else []),
        "short_fit": ["bench_short_fit.py"] + (["--tiny"] if tiny else []),
        "whole_run": ["bench_whole_run.py"] + (["--tiny", "--models", "mlp"] if tiny else []),
        "plugin": ["bench_plugin.py"] + (["--runs", "2", "--steps", "30", "--variables", "4", "--repeats", "2",
                                          "--loaders", "true"] if tiny else []),
        "frontend": ["frontend_heatmap.py"] + (["--rows", "20", "--steps", "100", "--repeat", "1"] if tiny else []),
        "charts": ["bench_charts.py"] + (["--tiny"] if tiny else []),
        "views": ["frontend_views.py"] + (["--tiny"] if tiny else []),
        "writer": ["bench_writer.py"] + (["--rounds", "1", "--steps", "3"] if tiny else []),
        "memory": ["bench_memory.py"] + (["--steps", "200", "--variables", "4", "--loaders", "true"] if tiny else []),
        "memory_histograms": ["bench_memory.py", "--steps", "10000", "--histograms"] if not tiny else None,
        "advisor": ["bench_advisor.py"] + (["--tiny", "--rounds", "1", "--batches", "4", "--batch", "8"]
                                           if tiny else []),
        "reference": ["bench_reference.py"] + (["--tiny", "--models", "mlp", "--rounds", "1"] if tiny else []),
        "gpu_check": ["gpu_check.py"] + (["--tiny"] if tiny else []),
    }
    status = 0
    gathered = {"machine": machine_line, "tiny": tiny, "benchmarks": {}}
    scratch = tempfile.mkdtemp(prefix="gradlens_run_")
    for name, cmd in jobs.items():
        if (name not in only and name.split("_")[0] not in only) or cmd is None:  # memory_histograms: memory
            continue
        print("\n## %s: %s" % (name, " ".join(cmd)), flush=True)
        module = cmd[0][:-len(".py")]
        results_path = os.path.join(scratch, name + ".json")
        extra = ["--json", results_path] if args.json and module in WRITES_JSON else []
        rc = subprocess.call([sys.executable, "-m", "benchmarks." + module] + cmd[1:] + extra, cwd=ROOT)
        if rc:
            print("%s exited with %d" % (name, rc), flush=True)
            status = 1
        results = None
        if extra and os.path.exists(results_path):
            with open(results_path) as f:
                results = json.load(f)
        gathered["benchmarks"][name] = {"command": " ".join(cmd), "exit_code": rc, "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(gathered, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
