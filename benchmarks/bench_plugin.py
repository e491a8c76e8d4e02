"""TensorBoard load time and GradLens route latency on a generated logdir.

Writes a logdir of R runs x S steps x V variables of grad_stats records (and
one divergence record per run), plus, for the side-by-side, the same
statistics of a few variables logged as plain TensorBoard scalars. Then for
each loader (--load_fast=false: Python multiplexer; --load_fast=true: Rust
data server) it starts a real `tensorboard` on 127.0.0.1, measures the time
until every run is fully loaded, and the latency p50/p95 of every route over
repeated requests (after one warm-up request each), next to TensorBoard's
scalars plugin serving the same numbers.

Event files are written with TensorBoard's own EventFileWriter (no
TensorFlow needed), in the gradlens format of tb_gradlens.metadata.

Run: python -m benchmarks.bench_plugin [--runs 20 --steps 10000 --variables 200] [--json PATH]
``--json``: a row per loader and route (its load time, p50, p95, bytes), each with the machine line.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.proto import summary_pb2  # noqa: E402
from tensorboard.summary.writer import event_file_writer  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from benchmarks.harness import write_rows  # noqa: E402
from tb_gradlens import metadata  # noqa: E402
from tests.support.tb_server import TensorBoardProcess  # noqa: E402

SCALAR_STATS = ("l2_norm", "max_abs", "zero_fraction")


def _event(step, tag, array, md=None):
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(array))
    if md is not None:
        value.metadata.CopyFrom(md)
    return event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=[value]))


def _scalar_metadata():
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )


def write_logdir(logdir, runs, steps, variables, scalar_variables, seed=0):
    """Returns the bytes written."""
    rows = ["model/layer_%03d/%s" % (i // 2, "kernel" if i % 2 == 0 else "bias") for i in range(variables)]
    stats_record = metadata.RecordMetadata(metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS)
    div_record = metadata.RecordMetadata(
        metadata.DIVERGENCE, rows, metadata.DIVERGENCE_COLUMNS,
        {"reference": {"label": "float32", "policy": "float32", "device": "default", "jit_compile": False},
         "candidate": {"label": "mixed_bfloat16", "policy": "mixed_bfloat16", "device": "default",
                       "jit_compile": False}},
    )
    stats_tag = metadata.tag_for("gradients", stats_record)
    div_tag = metadata.tag_for("compare", div_record)
    stats_md = metadata.create_summary_metadata(stats_record)
    div_md = metadata.create_summary_metadata(div_record)
    rng = np.random.default_rng(seed)
    n_stats = len(metadata.GRAD_STATS_COLUMNS)
    for r in range(runs):
        run_dir = os.path.join(logdir, "run_%02d" % r)
        writer = event_file_writer.EventFileWriter(run_dir, max_queue_size=1000, flush_secs=30)
        base = rng.lognormal(size=(variables, n_stats)).astype(np.float32)
        for step in range(steps):
            stats = base * np.float32(1.0 + 0.01 * np.sin(step / 50.0))
            writer.add_event(_event(step, stats_tag, stats, stats_md if step == 0 else None))
            if step % 10 == 0:
                div = np.abs(rng.normal(scale=1e-2, size=(variables, len(metadata.DIVERGENCE_COLUMNS))))
                writer.add_event(_event(step, div_tag, div.astype(np.float32), div_md if step == 0 else None))
            if r < 1:  # the scalar side-by-side: the same statistics as scalar summaries
                for v in range(scalar_variables):
                    for c in SCALAR_STATS:
                        value = np.float32(stats[v, metadata.GRAD_STATS_COLUMNS.index(c)])
                        writer.add_event(_event(step, "%s/%s" % (rows[v], c), value,
                                                _scalar_metadata() if step == 0 else None))
        writer.close()
    return rows, stats_tag, div_tag


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def latency(tb, path, repeats):
    """(p50, p95) in ms of GET path after one warm-up request; asserts 200."""
    status, _, body = tb.get(path)
    assert status == 200, (path, status, body[:300])
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        status, _, body = tb.get(path)
        times.append(1000 * (time.perf_counter() - t))
        assert status == 200, (path, status)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))], len(body)


def bench_loader(logdir, load_fast, runs, steps, rows, stats_tag, div_tag, repeats, scalar_variables):
    q = urllib.parse.quote
    tb = TensorBoardProcess(logdir, load_fast=load_fast, timeout=600)
    start = time.perf_counter()
    with tb:
        def loaded(data):
            return len(data["runs"]) == runs and all(
                t["max_step"] == steps - 1 for r in data["runs"] for t in r["tags"] if t["kind"] == "grad_stats")

        tb.wait_for(loaded, "/data/plugin/gradlens/runs", timeout=3600)
        load_s = time.perf_counter() - start
        g = "/data/plugin/gradlens/"
        run = "run_00"
        routes = {
            "runs": g + "runs",
            # The tab asks for max_steps=2000 (views/gradients.js, views/divergence.js).
            "series 1 column, max_steps=2000 (as the tab asks)": g + "series?run=%s&tag=%s&columns=l2_norm&max_steps=2000" % (
                run, q(stats_tag)),
            # All steps must be asked for (max_steps defaults to 2000; 10000 at most).
            "series 1 column, all steps (API, not the tab)": g + "series?run=%s&tag=%s&columns=l2_norm&max_steps=%d" % (
                run, q(stats_tag), steps),
            "series 1 row, 3 columns, all steps": g + "series?run=%s&tag=%s&row=%s&columns=l2_norm,max_abs,zero_fraction&max_steps=%d" % (
                run, q(stats_tag), q(rows[0]), steps),
            "divergence series": g + "series?run=%s&tag=%s&columns=rel_l2" % (run, q(div_tag)),
            "alerts": g + "alerts",
            "overview": g + "overview",
            "compare": g + "compare?run_a=run_00&run_b=run_01&kind=grad_stats&row=%s&column=l2_norm" % q(rows[0]),
        }
        results = {name: latency(tb, path, repeats) for name, path in routes.items()}
        # TensorBoard's scalars plugin serving the same numbers: one row, 3 statistics.
        t_total = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for c in SCALAR_STATS:
                status, _, _ = tb.get("/data/plugin/scalars/scalars?run=%s&tag=%s" % (run, q("%s/%s" % (rows[0], c))))
                assert status == 200
            t_total.append(1000 * (time.perf_counter() - t0))
        scalar_times = sorted(t_total[1:])
        results["scalars plugin: 1 row, 3 statistics (3 requests)"] = (
            statistics.median(scalar_times), scalar_times[int(round(0.95 * (len(scalar_times) - 1)))], 0)
    return load_s, results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--variables", type=int, default=200)
    parser.add_argument("--scalar-variables", type=int, default=4,
                        help="variables of run_00 also logged as scalars (side-by-side)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--loaders", default="false,true", help="--load_fast values to run")
    parser.add_argument("--logdir", help="keep this logdir, and reuse it when it holds the same sizes "
                                         "(default: a temporary one)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--write-only", action="store_true", help="write the logdir and stop")
    args = parser.parse_args(argv)
    logdir = args.logdir or tempfile.mkdtemp(prefix="gradlens_plugin_bench_")
    t = time.perf_counter()
    params = {"runs": args.runs, "steps": args.steps, "variables": args.variables,
              "scalar_variables": args.scalar_variables, "format": metadata.FORMAT_VERSION}
    marker = os.path.join(logdir, "bench_params.json")
    if os.path.exists(marker) and json.load(open(marker)).get("params") == params:
        saved = json.load(open(marker))
        rows, stats_tag, div_tag = saved["rows"], saved["stats_tag"], saved["div_tag"]
        print("reusing %s (%.0f MB)" % (logdir, dir_bytes(logdir) / 1e6), flush=True)
    else:
        rows, stats_tag, div_tag = write_logdir(logdir, args.runs, args.steps, args.variables,
                                                args.scalar_variables)
        with open(marker, "w") as f:
            json.dump({"params": params, "rows": rows, "stats_tag": stats_tag, "div_tag": div_tag}, f)
        print("wrote %d runs x %d steps x %d variables: %.0f MB in %.1f s" % (
            args.runs, args.steps, args.variables, dir_bytes(logdir) / 1e6, time.perf_counter() - t), flush=True)
    if args.write_only:
        return 0
    report = []
    try:
        for lf in args.loaders.split(","):
            load_fast = lf.strip() == "true"
            load_s, results = bench_loader(logdir, load_fast, args.runs, args.steps, rows, stats_tag, div_tag,
                                           args.repeats, args.scalar_variables)
            name = "rust (--load_fast=true)" if load_fast else "python (--load_fast=false)"
            report.extend({"runs": args.runs, "steps": args.steps, "variables": args.variables, "loader": name,
                           "load_s": load_s, "route": route, "p50_ms": p50, "p95_ms": p95, "bytes": size}
                          for route, (p50, p95, size) in results.items())
            print("\n%s: logdir loaded in %.1f s" % (name, load_s))
            print("| route | p50 ms | p95 ms | bytes |")
            print("|---|---|---|---|")
            for route, (p50, p95, size) in results.items():
                print("| %s | %.1f | %.1f | %d |" % (route, p50, p95, size))
            sys.stdout.flush()
    finally:
        if not args.logdir:
            shutil.rmtree(logdir, ignore_errors=True)
    write_rows(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
