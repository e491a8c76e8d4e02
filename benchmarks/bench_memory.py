"""Memory of a real tensorboard serving long runs, and what one request costs.

Writes a run of S steps x V variables of grad_stats records (and, with
``--histograms``, the log2 histogram record of the same variables), as the
Keras callback writes them (the metadata on each tag's first event), then
for each loader (--load_fast=false: Python multiplexer; --load_fast=true:
Rust data server) starts a real ``tensorboard`` with the default retention
(tb_gradlens keeps every step) on 127.0.0.1 and measures the resident
memory (RSS, tensorboard and its children) of:

  loaded       idle, after every step is loaded
  alerts       after runs + alerts + overview (every series read and cached)
  series       after one plain ``series`` GET (the default max_steps)
  parallel     after four (``--parallel``) plain series GETs at once
  max_steps    after a series GET with max_steps=10000 (the ceiling)
  20 prefixes  after the same series GET under 20 experiment ids
  histogram view  (with --histograms) after the tab's histogram request:
               one variable, max_steps=2000

and the bytes of each answer.  With ``--requests N`` it measures instead
the RSS growth of a real tensorboard under N requests that each ask
something no earlier request asked (issue 43), in three kinds of N/3:
``junk`` (a series GET with its own unknown 40 KB parameter, a cache
buster), ``spellings`` (``step_min`` spelled with 2,000-4,000 leading
zeros: one number), ``patterns`` (a distinct 1,000-character ``rows``
pattern: distinct answers), against the pools it is configured with
($TB_GRADLENS_CACHE_MB for the data, 64 MB derived, 64 MB answers) and a
fixed margin.  Event files are framed here with batched CRCs
(tb_gradlens.crc32c): TensorBoard's pure-Python writer takes minutes.

    python -m benchmarks.bench_memory                      # 50,000 x 50, grad_stats
    python -m benchmarks.bench_memory --steps 10000 --histograms
    python -m benchmarks.bench_memory --steps 200 --variables 5   # seconds
    python -m benchmarks.bench_memory --steps 200 --variables 4 --requests 20000 --cache-mb 64

``--json PATH`` also writes the results, each row with the machine line: a row
per tree and loader (its load time, and per stage the RSS MB and the answer),
or with ``--requests`` a row per tree (the RSS after each kind, the growth).
"""

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import urllib.parse

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.proto import summary_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from benchmarks.harness import write_rows  # noqa: E402
from benchmarks.soak import rss_bytes  # noqa: E402
from tb_gradlens import crc32c  # noqa: E402
from tb_gradlens import metadata  # noqa: E402
from tb_gradlens import records  # noqa: E402
from tests.support.tb_server import TensorBoardProcess  # noqa: E402

PREFIX = "/data/plugin/gradlens/"
RUN = "long"


def _frames(payloads):
    """TFRecord frames of serialized records (bytes)."""
    lengths = [len(p) for p in payloads]
    headers = [struct.pack("<Q", n) for n in lengths]
    head_crc = crc32c.masked(crc32c.crc32c_many(b"".join(headers), np.arange(len(headers)) * 8, [8] * len(headers)))
    buffer = b"".join(payloads)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    data_crc = crc32c.masked(crc32c.crc32c_many(buffer, starts, lengths))
    return b"".join(h + struct.pack("<I", int(hc)) + p + struct.pack("<I", int(dc))
                    for h, hc, p, dc in zip(headers, head_crc, payloads, data_crc))


def _value(tag, array, record=None):
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(array))
    if record is not None:
        value.metadata.CopyFrom(metadata.create_summary_metadata(record))
    return value


def write_run(run_dir, steps, variables, histograms, seed=0):
    """One event file; returns its size in bytes."""
    os.makedirs(run_dir, exist_ok=True)
    rows = ["model/block_%03d/dense/kernel" % i for i in range(variables)]
    stats = metadata.RecordMetadata(metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS,
                                    records.gradient_extras(["float32"] * variables, ["float32"] * variables))
    hist = metadata.RecordMetadata(metadata.GRAD_HISTOGRAM, rows, metadata.HISTOGRAM_COLUMNS,
                                   records.histogram_extras())
    rng = np.random.default_rng(seed)
    path = os.path.join(run_dir, "events.out.tfevents.1700000000.bench.1.v2")
    version = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()
    with open(path, "wb") as f:
        f.write(_frames([version]))
        for start in range(0, steps, 500):
            payloads = []
            for step in range(start, min(steps, start + 500)):
                first = step == 0
                values = [_value(metadata.tag_for("model", stats),
                                 rng.random((variables, len(metadata.GRAD_STATS_COLUMNS)), dtype=np.float32),
                                 stats if first else None)]
                if histograms:
                    counts = np.zeros((variables, len(metadata.HISTOGRAM_COLUMNS)), np.float32)
                    counts[:, 120:150] = rng.integers(0, 1000, (variables, 30))
                    values.append(_value(metadata.tag_for("model", hist), counts, hist if first else None))
                values.append(summary_pb2.Summary.Value(tag="loss", simple_value=float(1.0 / (step + 1))))
                payloads.append(event_pb2.Event(step=step, wall_time=1.7e9 + step,
                                                summary=summary_pb2.Summary(value=values)).SerializeToString())
            f.write(_frames(payloads))
    return os.path.getsize(path)


def _get(tb, route):
    status, _, body = tb.get(route, timeout=600)
    if status != 200:
        raise RuntimeError("GET %s -> %s: %s" % (route, status, body[:300]))
    return len(body)


def _wait_loaded(tb, steps, timeout=3600):
    """The runs answer once every step is loaded (a slow answer while loading is waited for)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            status, _, body = tb.get(PREFIX + "runs", timeout=600)
        except OSError:
            continue
        if status == 200:
            data = json.loads(body)
            if any(r["run"] == RUN and max((t["max_step"] or 0) for t in r["tags"]) == steps - 1
                   for r in data["runs"]):
                return data
        time.sleep(1)
    raise RuntimeError("the run was not loaded in %d s" % timeout)


def measure(logdir, load_fast, steps, source=ROOT, parallel=4):
    out = {}
    with TensorBoardProcess(logdir, load_fast=load_fast, timeout=300, cwd=source) as tb:
        started = time.time()
        data = _wait_loaded(tb, steps)
        out["load_s"] = round(time.time() - started, 1)
        tag = next(t["tag"] for r in data["runs"] if r["run"] == RUN for t in r["tags"] if t["kind"] == "grad_stats")
        pid = tb.process.pid
        mb = lambda: round(rss_bytes(pid) / 2**20)  # noqa: E731
        time.sleep(3)
        out["loaded"] = (mb(), None)
        size = sum(_get(tb, PREFIX + r) for r in ("runs", "alerts", "overview"))
        out["alerts"] = (mb(), size)
        plain = PREFIX + "series?run=%s&tag=%s" % (RUN, tag)
        out["series"] = (mb(), _get(tb, plain))
        sizes = []
        threads = [threading.Thread(target=lambda: sizes.append(_get(tb, plain))) for _ in range(parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["parallel"] = (mb(), sum(sizes))
        try:
            out["max_steps"] = (None, _get(tb, plain + "&max_steps=10000"))
            out["max_steps"] = (mb(), out["max_steps"][1])
        except RuntimeError as e:  # over the answer cap: a 400
            out["max_steps"] = (mb(), str(e)[:80])
        size = sum(_get(tb, "/experiment/e%02d%s" % (i, plain)) for i in range(20))
        out["20 prefixes"] = (mb(), size)
        hist = [(t["tag"], t["rows"][0]) for r in data["runs"] if r["run"] == RUN for t in r["tags"]
                if t["kind"] == "grad_histogram"]
        if hist:  # the tab's histogram view: one variable, max_steps=2000 (the whole tag is read)
            tag, row = hist[0]
            query = urllib.parse.urlencode({"run": RUN, "tag": tag, "row": row, "max_steps": 2000})
            answer = tb.get_json(PREFIX + "series?" + query)
            out["histogram view"] = (mb(), "%d steps%s" % (len(answer["steps"]),
                                                           ", sampled" if answer["sampled"] else ""))
    return out


# What a process may hold beyond its configured pools (allocator slack, TensorBoard's own state).
MARGIN_MB = 64
DERIVED_MB = ANSWERS_MB = 64


def _request_kinds(tag, n):
    """{kind: [path]} of n requests, each asking something none before it asked."""
    # One number per answer (the last step of one variable's first column): what a request keys is
    # then most of what it could leave behind.
    base = {"run": RUN, "tag": tag, "row": "model/block_000/dense/kernel", "max_steps": 1,
            "columns": metadata.GRAD_STATS_COLUMNS[0]}
    third = n // 3
    return {
        "junk": [PREFIX + "series?" + urllib.parse.urlencode(dict(base, **{"nocache%d" % i: "x" * 40_000}))
                 for i in range(third)],
        "spellings": [PREFIX + "series?" + urllib.parse.urlencode(dict(base, step_min="0" * (2000 + i % 2000)
                                                                        + str(i // 2000)))
                      for i in range(third)],
        "patterns": [PREFIX + "series?" + urllib.parse.urlencode(dict(base, rows=("block_00%d|" % (i % 4))
                                                                        + "q%06d" % i + "z" * 983))
                     for i in range(third)],
    }


def measure_requests(logdir, load_fast, n, steps, source=ROOT):
    """{"loaded": MB, kind: MB after its requests, "refused": count}: RSS under n distinct requests."""
    out = {"refused": 0}
    with TensorBoardProcess(logdir, load_fast=load_fast, timeout=300, cwd=source) as tb:
        data = _wait_loaded(tb, steps)
        tag = next(t["tag"] for r in data["runs"] if r["run"] == RUN for t in r["tags"] if t["kind"] == "grad_stats")
        pid = tb.process.pid
        _get(tb, PREFIX + "series?" + urllib.parse.urlencode({"run": RUN, "tag": tag}))
        time.sleep(2)
        out["loaded"] = round(rss_bytes(pid) / 2**20)
        for kind, paths in _request_kinds(tag, n).items():
            for path in paths:
                status, _, _ = tb.get(path, timeout=600)
                out["refused"] += status != 200
            out[kind] = round(rss_bytes(pid) / 2**20)
    return out


def main_requests(args, logdir):
    cache_mb = args.cache_mb
    os.environ["TB_GRADLENS_CACHE_MB"] = str(cache_mb)  # the tensorboard processes inherit it
    write_run(os.path.join(logdir, RUN), args.steps, args.variables, False)
    sources = [("this tree", ROOT)] + ([("before", args.before)] if args.before else [])
    bound = cache_mb + DERIVED_MB + ANSWERS_MB
    from benchmarks.harness import machine  # the machine line of every result
    print("machine: %s" % machine(), flush=True)
    print("%d requests (%d of each kind); pools %d MB (data %d + derived %d + answers %d), margin %d MB"
          % (args.requests, args.requests // 3, bound, cache_mb, DERIVED_MB, ANSWERS_MB, MARGIN_MB), flush=True)
    rows = []
    for label, source in sources:
        found = measure_requests(logdir, args.loaders.split(",")[0] == "true", args.requests, args.steps, source)
        print("%s: %s" % (label, json.dumps(found)), flush=True)
        rows.append((label, found))
    print("\n| tree | loaded MB | after junk | after spellings | after patterns | growth MB | within pools + margin |")
    print("|---|---|---|---|---|---|---|")
    for label, found in rows:
        growth = found["patterns"] - found["loaded"]
        print("| %s | %d | %d | %d | %d | %d | %s |" % (label, found["loaded"], found["junk"], found["spellings"],
                                                        found["patterns"], growth,
                                                        "yes" if growth <= bound + MARGIN_MB else "NO"))
    write_rows(args.json, [dict(found, tree=label, requests=args.requests, pools_mb=bound, margin_mb=MARGIN_MB,
                                growth_mb=found["patterns"] - found["loaded"],
                                within=found["patterns"] - found["loaded"] <= bound + MARGIN_MB)
                           for label, found in rows])
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50000)
    parser.add_argument("--variables", type=int, default=50)
    parser.add_argument("--histograms", action="store_true")
    parser.add_argument("--loaders", default="false,true", help="load_fast values to measure")
    parser.add_argument("--logdir", help="keep (and reuse) the generated logdir here")
    parser.add_argument("--parallel", type=int, default=4, help="plain series GETs sent at once")
    parser.add_argument("--before", help="also measure the tb_gradlens source tree in this directory (e.g. "
                        "`git archive <commit> | tar -x -C DIR`), side by side")
    parser.add_argument("--requests", type=int, default=0,
                        help="measure RSS under this many distinct requests instead (see above)")
    parser.add_argument("--cache-mb", type=int, default=64, help="TB_GRADLENS_CACHE_MB with --requests")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    logdir = args.logdir or tempfile.mkdtemp(prefix="gradlens_memory_")
    if args.requests:
        try:
            return main_requests(args, logdir)
        finally:
            if not args.logdir:
                shutil.rmtree(logdir, ignore_errors=True)
    try:
        started = time.time()
        size = write_run(os.path.join(logdir, RUN), args.steps, args.variables, args.histograms)
        print("logdir: %d steps x %d variables%s, %.0f MB of event files (written in %.1f s)"
              % (args.steps, args.variables, " + histograms" if args.histograms else "", size / 2**20,
                 time.time() - started), flush=True)
        results = {}
        sources = [("", ROOT)] + ([("before ", args.before)] if args.before else [])
        for load_fast in args.loaders.split(","):
            for label, source in sources:
                key = "%sload_fast=%s" % (label, load_fast)
                results[key] = measure(logdir, load_fast == "true", args.steps, source, args.parallel)
                print("%s: %s" % (key, json.dumps(results[key])), flush=True)
        names = ["loaded", "alerts", "series", "parallel", "max_steps", "20 prefixes", "histogram view"]
        print("\n| after | " + " | ".join("%s RSS MB (answer bytes)" % key for key in results) + " |")
        print("|---|" + "---|" * len(results))
        for name in names:
            cells = []
            if not all(name in results[lf] for lf in results):
                continue
            for lf in results:
                rss, answer = results[lf][name]
                cells.append("%s (%s)" % (rss, "{:,}".format(answer) if isinstance(answer, int) else answer or "-"))
            print("| %s | %s |" % (name, " | ".join(cells)))
        print("| load time s | %s |" % " | ".join(str(results[lf]["load_s"]) for lf in results))
        write_rows(args.json, [{"loader": key, "steps": args.steps, "variables": args.variables,
                                "histograms": args.histograms, "load_s": found["load_s"],
                                "after": {name: {"rss_mb": found[name][0], "answer": found[name][1]}
                                          for name in found if name != "load_s"}}
                               for key, found in results.items()])
    finally:
        if not args.logdir:
            shutil.rmtree(logdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
