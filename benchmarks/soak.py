"""Soak: a training process appends gradlens records while this process
queries the GradLens routes of a real tensorboard in a loop, on 127.0.0.1.

Measures: responses by status (anything but 200 is an error), how long the
newest step takes to appear in the routes after the trainer flushed it
(TensorBoard reloads every --reload_interval = 1 s here), and the resident
memory (RSS) of the tensorboard process and its children (the Rust data
server) over time.  Bounded in time (``--seconds``) and requests
(``--max-requests``).  Prints the numbers; tests/test_soak.py runs a short
form and asserts on errors and memory, never on timing.

    python benchmarks/soak.py                # the full 60 s form
    python benchmarks/soak.py --seconds 20 --load-fast false
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from tb_server import TensorBoardProcess  # noqa: E402

PREFIX = "/data/plugin/gradlens/"
RUN = "soak"

TRAINER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import tensorflow as tf
    from tb_gradlens import summary

    logdir, seconds, period, n_vars = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    variables = [tf.Variable(np.zeros(256, np.float32), name="layer_%d/kernel" % i) for i in range(n_vars)]
    writer = tf.summary.create_file_writer(logdir, flush_millis=10**9)
    rng = np.random.default_rng(0)
    end = time.time() + seconds
    step = 0
    with writer.as_default():
        while time.time() < end:
            grads = [tf.constant(rng.normal(size=256).astype(np.float32) * (step + 1)) for _ in variables]
            summary.gradients(grads, variables, step=step)
            tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
            writer.flush()
            print(json.dumps({"step": step, "time": time.time()}), flush=True)
            step += 1
            time.sleep(period)
    writer.close()
    """
)


def rss_bytes(pid):
    """Resident memory of ``pid`` and its descendants (Linux /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _stats_tag(tb):
    status, _, body = tb.get(PREFIX + "runs")
    if status != 200:
        return None
    for run in json.loads(body)["runs"]:
        if run["run"] == RUN:
            for t in run["tags"]:
                if t["kind"] == "grad_stats":
                    return t["tag"]
    return None


def soak(seconds=60.0, load_fast=True, period=0.05, n_vars=20, max_requests=20000, logdir=None,
         settle_seconds=30.0):
    """Run the soak; returns a dict of measurements."""
    logdir = logdir or tempfile.mkdtemp(prefix="gradlens_soak_")
    os.makedirs(os.path.join(logdir, RUN), exist_ok=True)
    trainer_out = open(os.path.join(logdir, "trainer.jsonl"), "w+")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, os.path.join(logdir, RUN), str(seconds), str(period), str(n_vars)],
        stdout=trainer_out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
    )
    statuses, errors, lags, rss = {}, [], [], []
    written = {}
    seen_max = -1
    requests = 0
    with TensorBoardProcess(logdir, load_fast=load_fast) as tb:
        pid = tb.process.pid
        tag = None
        started = time.time()
        deadline = started + seconds + settle_seconds
        last_rss = 0.0
        while time.time() < deadline and requests < max_requests:
            trainer_out.seek(0)
            for line in trainer_out.read().splitlines():
                point = json.loads(line)
                written[point["step"]] = point["time"]
            trainer_done = trainer.poll() is not None
            if trainer_done and written and seen_max == max(written):
                break
            tag = tag or _stats_tag(tb)
            routes = ["runs", "overview"]
            if tag:  # the run's own routes once TensorBoard has loaded it (404 before)
                routes[:0] = ["series?" + urllib.parse.urlencode(
                    {"run": RUN, "tag": tag, "columns": "l2_norm,max_abs", "max_steps": 200}),
                    "alerts?run=" + RUN]
            for route in routes:
                status, _, body = tb.get(PREFIX + route)
                requests += 1
                statuses[status] = statuses.get(status, 0) + 1
                now = time.time()
                if status != 200:
                    errors.append((route, status, body[:200]))
                    continue
                if route.startswith("series"):
                    steps = json.loads(body)["steps"]
                    newest = steps[-1] if steps else -1
                    for s in range(seen_max + 1, newest + 1):
                        if s in written:
                            lags.append(now - written[s])
                    seen_max = max(seen_max, newest)
            if time.time() - last_rss >= 1.0:
                rss.append((time.time() - started, rss_bytes(pid)))
                last_rss = time.time()
            time.sleep(0.02)
        trainer.wait(60)
    trainer_out.close()
    lags.sort()
    return {
        "seconds": seconds,
        "load_fast": load_fast,
        "steps_written": len(written),
        "newest_written": max(written) if written else None,
        "newest_seen": seen_max,
        "requests": requests,
        "statuses": statuses,
        "errors": errors,
        "lag_median_s": lags[len(lags) // 2] if lags else None,
        "lag_p95_s": lags[int(len(lags) * 0.95)] if lags else None,
        "lag_max_s": lags[-1] if lags else None,
        "rss_mb": [(round(t, 1), round(b / 2**20, 1)) for t, b in rss],
        "logdir": logdir,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--load-fast", choices=("true", "false"), default="true")
    parser.add_argument("--max-requests", type=int, default=20000)
    args = parser.parse_args(argv)
    result = soak(args.seconds, args.load_fast == "true", max_requests=args.max_requests)
    rss = [m for _, m in result["rss_mb"]]
    print("soak %.0f s, load_fast=%s: %d steps written, newest seen %s of %s"
          % (result["seconds"], result["load_fast"], result["steps_written"], result["newest_seen"],
             result["newest_written"]))
    print("requests %d, statuses %s, errors %d" % (result["requests"], result["statuses"], len(result["errors"])))
    print("lag newest step -> routes: median %s s, p95 %s s, max %s s"
          % tuple(None if v is None else round(v, 2) for v in
                  (result["lag_median_s"], result["lag_p95_s"], result["lag_max_s"])))
    if rss:
        print("tensorboard RSS MB: first %.1f, max %.1f, last %.1f (%d samples)" % (rss[0], max(rss), rss[-1], len(rss)))
    for e in result["errors"][:5]:
        print("error:", e)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
