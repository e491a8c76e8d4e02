"""Time for each GradLens view to become usable, cold and warm, in headless Chromium.

For each logdir size (the README demo, 128 variables x 3,000 steps, 200 x
10,000; written by frontend_logdir.py, the demo by tb_gradlens.demo) and
each loader (--load_fast=false: Python; true: Rust data server), it starts
a real `tensorboard`, waits until the logdir is loaded and TensorBoard is
idle ("after TensorBoard has loaded the data"), then opens each view in a
fresh browser context and reads, in the page, when the view was usable (its
`data-ready-at`: drawn and shown) and complete (late parts such as the
histogram drawn), in ms since the page started loading.

  cold: the first opening of that view after TensorBoard started (the
        plugin's caches are empty: TensorBoard is restarted for each view)
  warm: median of the next --rounds openings (server caches warm; each in a
        new browser context, so nothing is cached in the page)

Prints one table per size and loader; asserts nothing.

    python -m benchmarks.frontend_views [--sizes demo,128x3000,200x10000] [--loaders false,true]
    python -m benchmarks.frontend_views --tiny      # seconds, one TensorBoard: what the test suite runs
    ... --json PATH     # also a row per size, loader and view, each with the machine line
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from benchmarks import frontend_logdir  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402
from tests.support.tb_server import TensorBoardProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
VIEWS = {
    "overview": "view=overview",
    "divergence": "view=divergence&run=mixed_bfloat16",
    "gradients": "view=gradients&run=mixed_bfloat16",
    "dtypes": "view=dtypes&run=mixed_bfloat16",
    "compare": "view=compare",
    "advisor": "view=advisor",
    # Opened without a run: the view picks the run that matters (every run's alerts are read for it).
    "divergence-default-run": "view=divergence",
    "gradients-default-run": "view=gradients",
}
# size name -> (variables, steps, histogram every, divergence every)
SIZES = {"tiny": (8, 60, 1, 10), "128x3000": (128, 3000, 1, 10), "200x10000": (200, 10000, 10, 10)}


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, quiet=2.0, timeout=1800):
    """Wait until the process used < 10% of a core for `quiet` seconds."""
    deadline = time.time() + timeout
    last, calm = cpu_seconds(pid), 0.0
    while time.time() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        calm = calm + 0.5 if now - last < 0.05 else 0.0
        last = now
        if calm >= quiet:
            return


# Run TensorBoard from this checkout (--repo: another one, e.g. an older tab for a side-by-side run).
REPO = [None]


def start(logdir, load_fast, expect_runs):
    tb = TensorBoardProcess(logdir, load_fast=load_fast, timeout=600, cwd=REPO[0])
    tb.start()
    tb.wait_for(lambda d: len(d.get("runs", [])) >= expect_runs, "/data/plugin/gradlens/runs", timeout=1800)
    wait_idle(tb.process.pid)
    return tb


def open_view(browser, url):
    """(usable ms, complete ms) of one opening of the tab at url in a fresh context."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.route("**/favicon.ico", lambda r: r.fulfill(status=204, body=""))
        page.goto(url)
        # data-ready-at is stamped by the tab; a tab without it (an older one, for comparison) is timed
        # when data-ready appears (to a frame, ~16 ms).
        page.wait_for_function("document.documentElement.dataset.ready", timeout=600000)
        page.wait_for_function("!document.querySelector('.gl-view:not(.gl-pending) [data-loaded=\"0\"]')",
                               timeout=600000)
        errors = page.eval_on_selector_all(".gl-view .gl-error", "n => n.map(x => x.textContent)")
        if errors:
            raise RuntimeError("%s: %s" % (url, errors[0][:300]))
        usable = float(page.evaluate("document.documentElement.dataset.readyAt || performance.now()"))
        late = page.eval_on_selector_all("[data-loaded-at]", "n => n.map(x => Number(x.dataset.loadedAt))")
        return usable, max([usable] + late)
    finally:
        context.close()


def bench(browser, logdir, load_fast, rounds, expect_runs, restart=True, views=tuple(VIEWS)):
    """{view: {"cold": (usable, complete), "warm": (usable, complete)}}.

    restart=False shares one TensorBoard between the views (a view's "cold"
    then finds what earlier views read cached: only for --tiny)."""
    out = {}
    tb = None
    try:
        for view in views:
            state = VIEWS[view]
            if tb is None or restart:
                if tb is not None:
                    tb.stop()
                tb = start(logdir, load_fast, expect_runs)
            url = tb.url + "/data/plugin_entry.html?name=gradlens#" + state
            cold = open_view(browser, url)
            warm = [open_view(browser, url) for _ in range(rounds)]
            out[view] = {"cold": cold, "warm": tuple(statistics.median(w[i] for w in warm) for i in (0, 1))}
    finally:
        if tb is not None:
            tb.stop()
    return out


def demo_logdir(path, steps):
    marker = os.path.join(path, "demo_steps.json")
    if os.path.exists(marker) and json.load(open(marker)) == steps:
        return path
    from tb_gradlens import demo

    demo.write_demo_logdir(path, steps, precision=True)
    json.dump(steps, open(marker, "w"))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="demo,128x3000,200x10000")
    parser.add_argument("--loaders", default="false,true", help="--load_fast values")
    parser.add_argument("--rounds", type=int, default=3, help="warm openings per view")
    parser.add_argument("--views", default=",".join(VIEWS), help="comma list of: " + ", ".join(VIEWS))
    parser.add_argument("--workdir", help="keep the logdirs here and reuse them (default: a temporary one)")
    parser.add_argument("--tiny", action="store_true", help="a tiny logdir, one loader, one warm round")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--repo", help="run TensorBoard from this checkout (its tb_gradlens and tab)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sizes, args.loaders, args.rounds = "tiny", "true", 1
    REPO[0] = args.repo
    workdir = args.workdir or tempfile.mkdtemp(prefix="gradlens_views_bench_")
    from playwright.sync_api import sync_playwright

    report = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for size in args.sizes.split(","):
            path = os.path.join(workdir, size)
            if size == "demo":
                demo_logdir(path, 300)
                described = "the README demo (4 runs x 300 steps, 6 variables)"
                runs = 4
            else:
                variables, steps, hist_every, div_every = SIZES[size]
                info = frontend_logdir.ensure_logdir(path, variables, steps, hist_every, div_every)
                described = "%d variables x %d steps, histogram every %d (%.0f MB)" % (
                    variables, steps, hist_every, info["bytes"] / 1e6)
                runs = 3
            for lf in args.loaders.split(","):
                name = "rust (--load_fast=true)" if lf.strip() == "true" else "python (--load_fast=false)"
                results = bench(browser, path, lf.strip() == "true", args.rounds, runs, restart=not args.tiny,
                                views=args.views.split(","))
                report.extend({"size": size, "logdir": described, "loader": name, "view": view,
                               "cold_usable_ms": r["cold"][0], "cold_complete_ms": r["cold"][1],
                               "warm_usable_ms": r["warm"][0], "warm_complete_ms": r["warm"][1],
                               "warm_rounds": args.rounds} for view, r in results.items())
                print("\n%s, %s: ms until usable / complete" % (described, name))
                print("| view | cold usable | cold complete | warm usable | warm complete |")
                print("|---|---|---|---|---|")
                for view, r in results.items():
                    print("| %s | %.0f | %.0f | %.0f | %.0f |" % (view, r["cold"][0], r["cold"][1], r["warm"][0],
                                                                 r["warm"][1]))
                sys.stdout.flush()
        browser.close()
    write_rows(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
