"""A live run appended at a fast rate while 8 clients use the tab's routes.

Writes ``--runs`` static runs (``--steps`` x ``--variables`` grad_stats, a
loss) with TensorBoard's TF-free writer, starts ``python -m
tensorboard.main`` on them, then a writer process appends a grad_stats
record of ``--variables`` rows to one more run at ``--rate`` logged steps/s
while ``--clients`` threads send what the tab sends (runs, overview,
alerts, the live run's series with max_steps=2000, its health), for
``--seconds`` (``--gzip``: asking for gzip answers, as the tab's browser
does).  Prints per route the latency median, p95, p99 and max, and
the steps the live run reached.  ``--before DIR`` measures an older source
tree the same way (tensorboard imports tb_gradlens from its working
directory), one after the other on the same logdir layout.

    python -m benchmarks.bench_live --before /tmp/old_tree
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from tests.support.tb_server import TensorBoardProcess  # noqa: E402

PREFIX = "/data/plugin/gradlens/"
TAG = "gradients/grad_stats/live"

WRITER = textwrap.dedent('''
    import sys, time
    import numpy as np
    from tests.support import hostile_logs
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util
    from tb_gradlens import metadata
    run_dir, rate, seconds, n_vars = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    rows = ["block_%03d/kernel" % i for i in range(n_vars)]
    md = hostile_logs.plugin_metadata(hostile_logs.content(metadata.GRAD_STATS, rows))
    writer = EventFileWriter(run_dir)
    start, step = time.time(), 0
    while time.time() < start + seconds:
        due = int((time.time() - start) * rate)
        while step <= due:
            value = summary_pb2.Summary.Value(tag="TAG_NAME", metadata=md if step == 0 else None,
                                              tensor=tensor_util.make_tensor_proto(hostile_logs.stats(n_vars, float(step))))
            writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary_pb2.Summary(value=[value])))
            step += 1
        writer.flush()
        time.sleep(0.02)
    writer.close()
    print(step)
''').replace("TAG_NAME", TAG)


def write_static(logdir, runs, steps, variables):
    from tests.support import hostile_logs
    from tb_gradlens import metadata

    rows = ["block_%03d/kernel" % i for i in range(variables)]
    for r in range(runs):
        if not os.path.isdir(os.path.join(logdir, "static_%02d" % r)):
            hostile_logs.write_records(os.path.join(logdir, "static_%02d" % r), [
                ("gradients/grad_stats/static", hostile_logs.content(metadata.GRAD_STATS, rows),
                 hostile_logs.stats(variables, 1.0))], steps=range(steps), scalars=["loss"])


def client(tb, stop, latencies, lock, headers):
    routes = ["runs", "overview", "alerts", "series?" + urllib.parse.urlencode(
        {"run": "live", "tag": TAG, "columns": "l2_norm,max_abs", "max_steps": 2000}),
        "health?" + urllib.parse.urlencode({"run": "live", "tag": TAG})]
    while not stop.is_set():
        for route in routes:
            if stop.is_set():
                return
            start = time.perf_counter()
            status, _, _ = tb.get(PREFIX + route, timeout=600, headers=headers)
            with lock:
                latencies.setdefault(route.split("?")[0], []).append((time.perf_counter() - start, status))


def bench(static, tree, args):
    logdir = tempfile.mkdtemp(prefix="gradlens_live_")
    for name in os.listdir(static):
        os.symlink(os.path.join(static, name), os.path.join(logdir, name))
    os.makedirs(os.path.join(logdir, "live"))
    with TensorBoardProcess(logdir, load_fast=args.load_fast == "true", cwd=tree, timeout=600) as tb:
        tb.wait_for(lambda d: len(d.get("runs", [])) >= args.runs, PREFIX + "runs", timeout=600)
        tb.get(PREFIX + "overview", timeout=600)  # the static runs read once (warm)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, os.path.join(logdir, "live"), str(args.rate),
                                   str(args.seconds), str(args.variables)], stdout=subprocess.PIPE, text=True,
                                  cwd=ROOT)  # tests.support imports from the repository root
        tb.wait_for(lambda d: any(r["run"] == "live" for r in d.get("runs", [])), PREFIX + "runs", timeout=120)
        stop, lock, latencies = threading.Event(), threading.Lock(), {}
        headers = {"Accept-Encoding": "gzip, deflate"} if args.gzip else None
        threads = [threading.Thread(target=client, args=(tb, stop, latencies, lock, headers))
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(max(1.0, args.seconds - 3))
        stop.set()
        for t in threads:
            t.join()
        steps = int(writer.communicate()[0].strip() or 0)
    shutil.rmtree(logdir, ignore_errors=True)
    out = {"tree": tree, "live_steps": steps, "routes": {}}
    for route, found in sorted(latencies.items()):
        times = sorted(t for t, _ in found)
        pick = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 3)  # noqa: E731
        out["routes"][route] = {"n": len(times), "median": pick(0.5), "p95": pick(0.95), "p99": pick(0.99),
                                "max": round(times[-1], 3), "not_200": sum(s != 200 for _, s in found)}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--variables", type=int, default=200)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--load-fast", choices=("true", "false"), default="true")
    parser.add_argument("--gzip", action="store_true", help="the clients ask for gzip, as a browser does")
    parser.add_argument("--static", help="directory of the static runs (kept, reused)")
    parser.add_argument("--before", help="an older source tree, measured first")
    args = parser.parse_args(argv)
    static = args.static or tempfile.mkdtemp(prefix="gradlens_static_")
    write_static(static, args.runs, args.steps, args.variables)
    for tree in ([args.before] if args.before else []) + [ROOT]:
        print(json.dumps(bench(static, tree, args)), flush=True)


if __name__ == "__main__":
    main()
