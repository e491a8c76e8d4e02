"""Many runs: what a cold and a warm ``overview`` cost on a real tensorboard.

Writes ``--runs`` tiny runs of one sweep (one grad_stats tag of 4 variables
and a loss scalar, 10 steps each; TensorBoard's TF-free writer) under a
temporary directory (or ``--logdir``, reused when it holds that many runs),
starts ``python -m tensorboard.main`` on it with each loader, waits until
every run is listed, then times on 127.0.0.1: ``overview`` cold (the first
request) and warm, ``alerts``, ``runs``.  ``--before DIR`` runs the same
against an older source tree (``git archive <commit> | tar -x -C DIR``:
tensorboard imports tb_gradlens from its working directory), side by side.

    python -m benchmarks.bench_many_runs --runs 2000
    python -m benchmarks.bench_many_runs --runs 2000 --before /tmp/old_tree
"""

import argparse
import json
import os
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from tests.support.tb_server import TensorBoardProcess  # noqa: E402

PREFIX = "/data/plugin/gradlens/"
ROWS = ["dense_%d/kernel" % i for i in range(4)]


def write_logdir(logdir, runs):
    from tests.support import hostile_logs
    from tb_gradlens import metadata

    for r in range(runs):
        run_dir = os.path.join(logdir, "seed_%05d" % r)
        if os.path.isdir(run_dir):
            continue
        hostile_logs.write_records(run_dir, [
            ("gradients/grad_stats/abc", hostile_logs.content(metadata.GRAD_STATS, ROWS), hostile_logs.stats(4, 1.0))],
            steps=range(10), scalars=["loss"])
    return logdir


def timed(tb, route):
    start = time.perf_counter()
    status, _, body = tb.get(PREFIX + route, timeout=1800)
    return {"route": route, "status": status, "seconds": round(time.perf_counter() - start, 3), "bytes": len(body)}


def bench(logdir, runs, load_fast, cwd):
    with TensorBoardProcess(logdir, load_fast=load_fast, cwd=cwd, timeout=600) as tb:
        start = time.perf_counter()
        # Every run listed (an overview of no variable reads no tensor), then the first overview is cold.
        tb.wait_for(lambda d: len(d.get("runs", [])) >= runs, PREFIX + "overview?rows=%5Enothing%24", timeout=1800)
        loaded = time.perf_counter() - start
        out = [timed(tb, "overview"), timed(tb, "overview"), timed(tb, "alerts"), timed(tb, "runs")]
    return {"load_fast": load_fast, "tree": cwd, "listed_seconds": round(loaded, 1), "routes": out}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--logdir")
    parser.add_argument("--before", help="an older source tree, measured side by side")
    parser.add_argument("--loaders", default="true,false", help="--load_fast values to measure")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    logdir = write_logdir(args.logdir or tempfile.mkdtemp(prefix="gradlens_runs_"), args.runs)
    results = []
    for load_fast in [v == "true" for v in args.loaders.split(",")]:
        for tree in ([args.before] if args.before else []) + [ROOT]:
            result = bench(logdir, args.runs, load_fast, tree)
            results.append(result)
            print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
