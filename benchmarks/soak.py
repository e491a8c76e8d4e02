"""Soak: a training process appends gradlens records while several clients
query the GradLens routes of a real tensorboard at once, on 127.0.0.1.

Clients (``--clients``, each a thread with its own connection), by role:
0 the tab (series with max_steps, alerts, runs, overview; it measures the
lag), 1 plain series requests with every column and no max_steps (the
server's default bound applies), 2 alerts, overview and compare, 3 hostile
requests (a catastrophic-backtracking rows pattern, an absurd repeat
count), then the roles repeat.  Measures: responses by status (anything
but the expected status is an error: 200, and 400 for the refused
pattern), how long the newest step takes to appear in the routes after the
trainer flushed it (TensorBoard reloads every --reload_interval = 1 s
here), and the resident memory (RSS) of the tensorboard process and its
children (the Rust data server) over time.  Bounded in time
(``--seconds``) and requests (``--max-requests``).  Prints the numbers;
tests/evaluation/test_soak.py runs a short form and asserts on errors and memory,
never on timing.

    python -m benchmarks.soak                # the full 60 s form, 4 clients
    python -m benchmarks.soak --seconds 20 --load-fast false --clients 8
"""

import argparse
import json
import os
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
RUN = "soak"

TRAINER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import tensorflow as tf
    from tb_gradlens import summary

    logdir, seconds, period, n_vars = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    # Long word-character names: what a catastrophic rows pattern backtracks on.
    variables = [tf.Variable(np.zeros(256, np.float32), name="block_%02d_%s/kernel" % (i, "w" * 48))
                 for i in range(n_vars)]
    writer = summary.create_file_writer(logdir)
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


HOSTILE_ROWS = r"^(\w+)+!"  # 2^n backtracking in Python's re on long names


def client_requests(role, tag):
    """[(route with query, accepted statuses)] one client of ``role`` sends per round."""
    series = lambda **q: "series?" + urllib.parse.urlencode(dict({"run": RUN, "tag": tag}, **q))  # noqa: E731
    if tag is None:
        return [("runs", (200,)), ("overview", (200,))]
    return {
        0: [(series(columns="l2_norm,max_abs", max_steps=200), (200,)), ("alerts?run=" + RUN, (200,)),
            ("runs", (200,)), ("overview", (200,))],
        1: [(series(), (200,))],
        2: [("alerts", (200,)), ("overview", (200,)),
            ("compare?" + urllib.parse.urlencode({"run_a": RUN, "run_b": RUN, "kind": "scalar", "tag": "loss"}),
             (200,))],
        3: [(series(rows=HOSTILE_ROWS, columns="count"), (200,)), (series(rows="a{99999999999}"), (400,))],
    }[role % 4]


class _Shared:
    """What the clients and the main loop share (under ``lock``)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses, self.errors, self.lags = {}, [], []
        self.written = {}
        self.seen_max = -1
        self.requests = 0
        self.tag = None
        self.stop = threading.Event()


def _client(tb, role, shared, max_requests):
    while not shared.stop.is_set():
        with shared.lock:
            tag = shared.tag
        for route, accepted in client_requests(role, tag):
            with shared.lock:
                if shared.requests >= max_requests:
                    shared.stop.set()
                    return
                shared.requests += 1
            try:
                status, _, body = tb.get(PREFIX + route, timeout=120)
            except OSError as e:  # a timeout: the server did not answer
                status, body = "timeout", str(e).encode()
            now = time.time()
            with shared.lock:
                shared.statuses[status] = shared.statuses.get(status, 0) + 1
                if status not in accepted:
                    shared.errors.append((route[:120], status, body[:200]))
                    continue
                if role == 0 and route.startswith("series") and status == 200:
                    steps = json.loads(body)["steps"]
                    newest = steps[-1] if steps else -1
                    for step in range(shared.seen_max + 1, newest + 1):
                        if step in shared.written:
                            shared.lags.append(now - shared.written[step])
                    shared.seen_max = max(shared.seen_max, newest)
        time.sleep(0.02)


def soak(seconds=60.0, load_fast=True, period=0.05, n_vars=20, max_requests=20000, logdir=None,
         settle_seconds=30.0, clients=4):
    """Run the soak; returns a dict of measurements."""
    logdir = logdir or tempfile.mkdtemp(prefix="gradlens_soak_")
    os.makedirs(os.path.join(logdir, RUN), exist_ok=True)
    trainer_out = open(os.path.join(logdir, "trainer.jsonl"), "w+")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, os.path.join(logdir, RUN), str(seconds), str(period), str(n_vars)],
        stdout=trainer_out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
    )
    shared = _Shared()
    rss = []
    with TensorBoardProcess(logdir, load_fast=load_fast, cwd=ROOT) as tb:
        pid = tb.process.pid
        threads = [threading.Thread(target=_client, args=(tb, role, shared, max_requests), daemon=True)
                   for role in range(clients)]
        for thread in threads:
            thread.start()
        started = time.time()
        deadline = started + seconds + settle_seconds
        while time.time() < deadline and not shared.stop.is_set():
            trainer_out.seek(0)
            written = {}
            for line in trainer_out.read().splitlines():
                point = json.loads(line)
                written[point["step"]] = point["time"]
            tag = shared.tag or _stats_tag(tb)
            with shared.lock:
                shared.written, shared.tag = written, tag
                done = trainer.poll() is not None and written and shared.seen_max == max(written)
            if done:
                break
            rss.append((time.time() - started, rss_bytes(pid)))
            time.sleep(1.0)
        shared.stop.set()
        for thread in threads:
            thread.join(180)
        trainer.wait(60)
    trainer_out.close()
    lags = sorted(shared.lags)
    written = shared.written
    return {
        "seconds": seconds,
        "load_fast": load_fast,
        "clients": clients,
        "steps_written": len(written),
        "newest_written": max(written) if written else None,
        "newest_seen": shared.seen_max,
        "requests": shared.requests,
        "statuses": shared.statuses,
        "errors": shared.errors,
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
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (roles repeat every 4)")
    args = parser.parse_args(argv)
    result = soak(args.seconds, args.load_fast == "true", max_requests=args.max_requests, clients=args.clients)
    rss = [m for _, m in result["rss_mb"]]
    print("soak %.0f s, load_fast=%s, %d clients: %d steps written, newest seen %s of %s"
          % (result["seconds"], result["load_fast"], result["clients"], result["steps_written"],
             result["newest_seen"], result["newest_written"]))
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
