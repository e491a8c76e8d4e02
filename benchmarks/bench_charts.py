"""The tab's line-chart kit against uPlot on the 10,000-step views, in headless Chromium.

Draws the same data with both, side by side in one page, in alternated rounds: R runs x N steps
(default 20 x 10,000) of a positive, noisy, decaying series per run (a gradient norm) on a log y
axis, smoothed as the tab smooths (TensorBoard's debiased moving average, weight 0.6: the raw line
pale under the smoothed one, so 2R lines), one chart 600 x 220 CSS pixels at a device pixel ratio
of 1, with a hover readout (step, and each run's value and smoothed value, in the tab's tooltip) and
drag-to-zoom on the step axis.

  kit:   frontend_static/line_chart.js as the views call it (lineChart(), the view's shared axis,
         the theme followed by theme.js), loaded from disk as the tab serves it.
  uPlot: benchmarks/third_party/uplot/uPlot.esm.js (1.6.32, vendored for this benchmark only) with
         the same series, colors, widths, log y axis, theme colors, tooltip (the kit's own
         fillTooltip/placeTooltip, filled from uPlot's cursor index) and its own drag-to-zoom;
         smoothing by the kit's smooth(), computed inside the timed first draw as the kit does.

Timed (ms, median and range of --rounds; the order kit/uPlot alternates round by round):

  first draw  building the chart until its canvas is drawn and rasterized (a 1-pixel read back)
  resize      the chart redrawn at a new width (600 -> 480 and back; the kit follows its
              ResizeObserver, uPlot is given setSize)
  theme       light -> dark and back (theme.js's switch; uPlot's axes read the same colors, then
              redraw(false): its paths are kept)
  zoom        steps 2,000-4,000 shown: the kit as the tab zooms (the view drawn again with the
              zoom: a new chart, smoothing computed again), uPlot by setScale on the same chart
  hover       one synthetic mousemove on the plot, the readout filled and placed (mean of --moves)
  heap        JS heap a chart keeps after a garbage collection (CDP: V8's heap and the typed arrays'
              backing stores; the data arrays, shared, excluded)

Each is also given as a ratio round by round (kit / uPlot of the same round): on a shared machine the
load moves the two sides of one round together more than it moves rounds apart.
Draw times are the main thread's busy time: from the trigger to the read back, less the idle wait
for the next frame where the kit's draw waits for layout (its ResizeObserver); "wall" includes it.
Also prints the bytes each side ships as served (and gzip -9). Asserts nothing.

    python -m benchmarks.bench_charts [--runs 20] [--steps 10000] [--rounds 7]
    python -m benchmarks.bench_charts --static DIR   # the kit of another tree (or a changed copy)
    python -m benchmarks.bench_charts --tiny     # seconds: what the test suite runs
"""

import argparse
import gzip
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STATIC = os.path.join(ROOT, "frontend_static")
UPLOT = os.path.join(HERE, "third_party", "uplot")
ORIGIN = "http://gradlens.bench"
# The line-chart kit: the chart, its drawing, axes, scales, frame, zoom, shared axis, smoothing,
# memory of hidden series and CSV/JSON download (colors, dom, format and theme are the tab's too).
KIT_FILES = ["line_chart.js", "line_draw.js", "axes.js", "scale.js", "chart_frame.js", "zoom.js",
             "shared_axis.js", "smoothing.js", "chart_memory.js", "download.js"]
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="/static/gradlens.css"><link rel="stylesheet" href="/uplot/uPlot.min.css">
</head><body style="width:1280px"><div id="host"></div></body></html>"""

SCRIPT = r"""
import {lineChart} from '/static/line_chart.js';
import {beginAxis} from '/static/shared_axis.js';
import {followTheme} from '/static/theme.js';
import {smooth} from '/static/smoothing.js';
import {PALETTE, themeColors} from '/static/colors.js';
import {fillTooltip, placeTooltip} from '/static/chart_frame.js';
import {el, isolate} from '/static/dom.js';
import {fmt} from '/static/format.js';
import {logTicks, stepTicks, tickText} from '/static/scale.js';
import uPlot from '/uplot/uPlot.esm.js';

const HEIGHT = 220;
const FIGURE_EXTRA = 22; // figure.gl-chart: 10 px padding and 1 px border on each side
const host = document.getElementById('host');
const S = {};

// The theme as a standalone tab follows it (prefers-color-scheme), switched here without a browser
// round trip: theme.js's own listener runs, then uPlot's.
const media = {matches: false, listeners: [], addEventListener(type, fn) { this.listeners.push(fn); }};
window.matchMedia = () => media;
function switchTheme() {
  media.matches = !media.matches;
  for (const fn of media.listeners) fn({matches: media.matches});
}

function makeData(runs, steps) {
  let seed = 12345;
  const random = () => {
    seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
    return ((seed >>> 0) + 0.5) / 4294967296;
  };
  const stepList = Array.from({length: steps}, (_, i) => i);
  const series = [];
  for (let r = 0; r < runs; r++) {
    const values = new Float64Array(steps);
    let walk = 0;
    for (let i = 0; i < steps; i++) {
      walk += (random() - 0.5) * 0.04;
      values[i] = 10 ** (-1 - r / 8) * Math.exp(-2 * i / steps + walk + (random() - 0.5) * 0.8);
    }
    series.push({name: `run_${String(r).padStart(2, '0')}/model/dense_${r}/kernel`, values});
  }
  return {steps: stepList, series};
}

export function setup(runs, steps, smoothing, width) {
  Object.assign(S, {data: makeData(runs, steps), smoothing, width, chart: null, lib: null});
  followTheme();
  media.addEventListener('change', () => {
    if (S.lib !== 'uplot' || !S.chart) return;
    S.theme = themeColors();
    S.chart.u.redraw(false);
  });
  return {runs, steps};
}

function kitChart(zoom) {
  beginAxis(zoom, () => {});
  return lineChart({title: 'L2 norm', yLabel: 'l2_norm', yScale: 'log', smoothing: S.smoothing,
    series: S.data.series.map((s) => ({name: s.name, steps: S.data.steps, values: s.values}))});
}

function kitDrawn(figure) {
  const canvas = figure.querySelector('canvas');
  return new Promise((resolve) => {
    const seen = new MutationObserver(() => {
      seen.disconnect();
      resolve(canvas);
    });
    seen.observe(canvas, {attributes: true, attributeFilter: ['data-plot']});
  });
}

function uplotChart(width) {
  S.theme = themeColors();
  const data = [S.data.steps];
  const series = [{label: 'step'}];
  const colors = [];
  S.data.series.forEach((s, k) => {
    const color = PALETTE[k % PALETTE.length];
    colors.push(color);
    data.push(s.values, smooth(s.values, S.smoothing));
    series.push({label: `${s.name} (raw)`, stroke: `${color}4d`, width: 1, points: {show: false}},
      {label: s.name, stroke: color, width: 1.5, points: {show: false}});
  });
  const wrap = el('div', {class: 'gl-plot'});
  const tooltip = el('div', {class: 'gl-tooltip', hidden: true, role: 'status'});
  let drawn = null;
  const chart = {wrap, tooltip, next: () => new Promise((resolve) => { drawn = resolve; })};
  const first = chart.next();
  // The kit's ticks, labels and y range, so both draw the same axes (uPlot's own log axis draws a grid
  // line at every mantissa).
  const axis = (grid) => ({stroke: () => S.theme.muted, font: '11px Roboto, "Helvetica Neue", Arial, sans-serif',
    grid: grid ? {stroke: () => S.theme.grid, width: 1} : {show: false},
    ticks: {stroke: () => S.theme.muted, width: 1, size: 4}});
  const opts = {
    width, height: HEIGHT, series, legend: {show: false},
    scales: {x: {time: false}, y: {distr: 3, log: 10, range: (u, lo, hi) => [lo / 1.25, hi * 1.25]}},
    axes: [{...axis(false), size: 24, values: (u, ticks) => ticks.map((t) => (t === null ? '' : String(t))),
      splits: (u, i, lo, hi) => stepTicks(lo, hi, Math.max(2, Math.floor(u.bbox.width / 90)))},
    {...axis(true), label: 'l2_norm', labelSize: 14, values: (u, ticks) => ticks.map((t) => (t === null ? '' : tickText(t))),
      splits: (u, i, lo, hi) => logTicks(lo, hi, 6)}],
    cursor: {points: {show: false}, drag: {x: true, y: false}},
    hooks: {
      draw: [() => {
        if (drawn) {
          const done = drawn;
          drawn = null;
          done(chart.u.ctx.canvas);
        }
      }],
      setCursor: [(u) => {
        const i = u.cursor.idx;
        if (i === null || i === undefined || u.cursor.left < 0) {
          tooltip.hidden = true;
          return;
        }
        const lines = [];
        S.data.series.forEach((s, k) => {
          const raw = u.data[1 + 2 * k][i];
          lines.push(el('div', {}, [el('span', {class: 'gl-swatch', style: `background:${colors[k]}`}),
            `${isolate(s.name)}: ${fmt(raw)} (smoothed ${fmt(u.data[2 + 2 * k][i])})`]));
        });
        fillTooltip(tooltip, `step ${u.data[0][i]}`, lines);
        placeTooltip(tooltip, wrap, u.cursor.left + u.bbox.left, u.cursor.top + u.bbox.top);
      }],
    },
  };
  chart.u = new uPlot(opts, data, wrap);
  wrap.appendChild(tooltip);
  chart.first = first;
  return chart;
}

function flush(canvas) {
  canvas.getContext('2d').getImageData(0, 0, 1, 1);
}

/** Busy and wall ms of trigger() until drawn (a promise of the canvas) and rasterized. */
async function measure(trigger) {
  let frame = null;
  const t0 = performance.now();
  requestAnimationFrame(() => { frame = performance.now(); });
  const drawn = trigger();
  const tSync = performance.now();
  const late = new Promise((resolve, reject) => setTimeout(() => reject(new Error('not drawn in 60 s')), 60000));
  const canvas = await Promise.race([drawn, late]);
  flush(canvas);
  const t1 = performance.now();
  const idle = frame !== null && frame > tSync ? frame - tSync : 0;
  return {busy: t1 - t0 - idle, wall: t1 - t0};
}

function frameDone() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

export function clear() {
  if (S.chart && S.chart.u) S.chart.u.destroy();
  S.chart = null;
  S.lib = null;
  host.replaceChildren();
  host.style.width = '';
}

export async function first(lib) {
  clear();
  await frameDone();
  S.lib = lib;
  let result;
  if (lib === 'kit') {
    host.style.width = `${S.width + FIGURE_EXTRA}px`;
    result = await measure(() => {
      const figure = kitChart(null);
      const drawn = kitDrawn(figure);
      host.appendChild(figure);
      S.chart = {figure};
      return drawn;
    });
  } else {
    result = await measure(() => {
      const chart = uplotChart(S.width);
      host.appendChild(chart.wrap);
      S.chart = chart;
      return chart.first;
    });
  }
  await frameDone();
  const canvas = lib === 'kit' ? S.chart.figure.querySelector('canvas') : S.chart.u.ctx.canvas;
  return {...result, canvas: [canvas.width, canvas.height]};
}

export async function resize(lib, width) {
  let result;
  if (lib === 'kit') {
    const drawn = kitDrawn(S.chart.figure);
    result = await measure(() => {
      host.style.width = `${width + FIGURE_EXTRA}px`;
      return drawn;
    });
  } else {
    result = await measure(() => {
      const drawn = S.chart.next();
      S.chart.u.setSize({width, height: HEIGHT});
      return drawn;
    });
  }
  await frameDone();
  return result;
}

export async function theme(lib) {
  const drawn = lib === 'kit' ? kitDrawn(S.chart.figure) : S.chart.next();
  const result = await measure(() => {
    switchTheme();
    return drawn;
  });
  await frameDone();
  return {...result, theme: document.documentElement.dataset.theme};
}

export async function zoom(lib, range) {
  let result;
  if (lib === 'kit') {
    result = await measure(() => {
      const figure = kitChart(range);
      const drawn = kitDrawn(figure);
      host.replaceChildren(figure);
      S.chart = {figure};
      return drawn;
    });
  } else {
    result = await measure(() => {
      const drawn = S.chart.next();
      S.chart.u.setScale('x', {min: range[0], max: range[1]});
      return drawn;
    });
  }
  await frameDone();
  return result;
}

/** Mean ms per mousemove over the plot (moves spread over its width), and the readout's last lines. */
export async function hover(lib, moves) {
  const target = lib === 'kit' ? S.chart.figure.querySelector('canvas') : S.chart.u.over;
  const tooltip = lib === 'kit' ? S.chart.figure.querySelector('.gl-tooltip') : S.chart.tooltip;
  const rect = target.getBoundingClientRect();
  const [x0, x1] = lib === 'kit' ? [70, rect.width - 20] : [10, rect.width - 10];
  const t0 = performance.now();
  for (let i = 0; i < moves; i++) {
    const x = rect.left + x0 + ((i * 37) % Math.max(1, Math.floor(x1 - x0)));
    target.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: rect.top + 60, bubbles: true}));
  }
  const t1 = performance.now();
  const lines = tooltip.children.length;
  await frameDone();
  return {each: (t1 - t0) / moves, lines};
}
"""


def file_bytes(paths):
    raw = b"".join(open(p, "rb").read() for p in paths)
    return len(raw), len(gzip.compress(raw, 9))


def shipped(static=STATIC):
    """{name: (bytes, gzip -9 bytes)} of what each side would serve."""
    kit = file_bytes([os.path.join(static, f) for f in KIT_FILES])
    lines = sum(open(os.path.join(static, f)).read().count("\n") for f in KIT_FILES)
    return {
        "kit (%d files, %d lines, unminified ES modules as served)" % (len(KIT_FILES), lines): kit,
        "uPlot.esm.js (the only ES module build; unminified)": file_bytes([os.path.join(UPLOT, "uPlot.esm.js")]),
        "uPlot.min.css": file_bytes([os.path.join(UPLOT, "uPlot.min.css")]),
    }


def paired_ratios(kit, uplot, rounds):
    """kit / uPlot within each round (the mean of a round's measurements of each): the load of the
    shared machine moves both sides of a round together more than it moves rounds apart."""
    per = len(kit) // rounds
    means = lambda v: [statistics.fmean(v[k * per:(k + 1) * per]) for k in range(rounds)]  # noqa: E731
    return [a / b if b > 0 else float("inf") for a, b in zip(means(kit), means(uplot))]


def summary(values):
    return statistics.median(values), min(values), max(values)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--moves", type=int, default=200, help="mousemoves per hover measurement")
    parser.add_argument("--smoothing", type=float, default=0.6)
    parser.add_argument("--width", type=int, default=600, help="canvas width, CSS px")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--json", help="write the raw timings here")
    parser.add_argument("--static", default=STATIC,
                        help="the tab's frontend_static/ to load the kit from (another tree's, or a changed copy)")
    parser.add_argument("--tiny", action="store_true", help="2 runs x 200 steps, 1 round: seconds")
    args = parser.parse_args(argv)
    if args.tiny:
        args.runs, args.steps, args.rounds, args.moves = 2, 200, 1, 10

    from playwright.sync_api import sync_playwright

    def serve(route):
        path = route.request.url[len(ORIGIN):].split("?")[0]
        if path == "/bench.js":
            route.fulfill(status=200, body=SCRIPT, content_type="text/javascript")
        elif path.startswith("/static/") or path.startswith("/uplot/"):
            base, name = path.split("/", 2)[1:]
            base = args.static if base == "static" else UPLOT
            kind = "text/css" if name.endswith(".css") else "text/javascript"
            with open(os.path.join(base, name), "rb") as f:
                route.fulfill(status=200, body=f.read(), content_type=kind)
        else:
            route.fulfill(status=200, body=PAGE, content_type="text/html")

    libs = ("kit", "uplot")
    ops = ("first", "resize", "theme", "zoom", "hover", "heap")
    times = {lib: {op: [] for op in ops} for lib in libs}
    walls = {lib: {op: [] for op in ops} for lib in libs}
    checks = {lib: {} for lib in libs}
    zoom = [args.steps // 5, args.steps * 2 // 5]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route(ORIGIN + "/**", serve)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(ORIGIN + "/")
        page.evaluate("async () => { window.bench = await import('/bench.js'); }")
        page.evaluate("([r, s, w, px]) => window.bench.setup(r, s, w, px)",
                      [args.runs, args.steps, args.smoothing, args.width])
        cdp = page.context.new_cdp_session(page)

        def heap():
            cdp.send("HeapProfiler.collectGarbage")
            cdp.send("HeapProfiler.collectGarbage")
            usage = cdp.send("Runtime.getHeapUsage")
            # Typed arrays' contents (the smoothed values) live outside the V8 heap: their backing stores.
            return usage["usedSize"] + usage.get("backingStorageSize", 0)

        def run(lib, expression, *values):
            return page.evaluate("(a) => window.bench.%s(%r, ...a)" % (expression, lib), list(values))

        for k in range(args.rounds):
            for lib in libs if k % 2 == 0 else libs[::-1]:
                page.evaluate("() => window.bench.clear()")
                before = heap()
                out = run(lib, "first")
                after = heap()
                times[lib]["heap"].append((after - before) / 2**20)
                checks[lib]["canvas"] = out["canvas"]
                times[lib]["first"].append(out["busy"])
                walls[lib]["first"].append(out["wall"])
                for width in (args.width * 4 // 5, args.width):
                    out = run(lib, "resize", width)
                    times[lib]["resize"].append(out["busy"])
                    walls[lib]["resize"].append(out["wall"])
                for _ in range(2):
                    out = run(lib, "theme")
                    times[lib]["theme"].append(out["busy"])
                    walls[lib]["theme"].append(out["wall"])
                out = run(lib, "hover", args.moves)
                checks[lib]["readout lines"] = out["lines"]
                times[lib]["hover"].append(out["each"])
                out = run(lib, "zoom", zoom)
                times[lib]["zoom"].append(out["busy"])
                walls[lib]["zoom"].append(out["wall"])
        browser_version = browser.version
        browser.close()
    if errors:
        raise RuntimeError("page errors: %s" % errors[:3])

    if os.path.abspath(args.static) != STATIC:
        print("kit loaded from %s" % args.static)
    print("chart kit vs uPlot 1.6.32: %d runs x %d steps (%d lines with smoothing %.2f), log y, %d x 220 px, "
          "%d rounds alternated, Chromium %s" % (args.runs, args.steps, 2 * args.runs, args.smoothing, args.width,
                                                 args.rounds, browser_version))
    print("canvas (device px): kit %s, uPlot %s; readout lines after hover: kit %s, uPlot %s" % (
        checks["kit"]["canvas"], checks["uplot"]["canvas"], checks["kit"]["readout lines"],
        checks["uplot"]["readout lines"]))
    print("| measure | kit median (range) | uPlot median (range) | kit / uPlot, medians | kit / uPlot, round by round |")
    print("|---|---|---|---|---|")
    labels = {"first": "first draw, ms", "resize": "redraw on resize, ms", "theme": "redraw on theme switch, ms",
              "zoom": "zoom to steps %d-%d, ms" % tuple(zoom), "hover": "hover, ms per mousemove",
              "heap": "JS heap kept by the chart, MB"}
    for op in ops:
        a, b = summary(times["kit"][op]), summary(times["uplot"][op])
        digits = 3 if op == "hover" else 2 if op == "heap" else 1
        cell = lambda m: "%.*f (%.*f-%.*f)" % (digits, m[0], digits, m[1], digits, m[2])  # noqa: E731
        ratio = "%.1fx" % (a[0] / b[0]) if b[0] > 0 else "-"
        paired = summary(paired_ratios(times["kit"][op], times["uplot"][op], args.rounds))
        print("| %s | %s | %s | %s | %.1fx (%.1f-%.1f) |" % ((labels[op], cell(a), cell(b), ratio) + paired))
    print("wall (trigger to drawn, the kit's wait for its next frame included), median ms: " + "; ".join(
        "%s kit %.1f, uPlot %.1f" % (op, statistics.median(walls["kit"][op]), statistics.median(walls["uplot"][op]))
        for op in ("first", "resize", "theme", "zoom")))
    print("bytes shipped (raw / gzip -9):")
    for name, (raw, packed) in shipped(args.static).items():
        print("  %s: %d / %d" % (name, raw, packed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "busy": times, "wall": walls, "checks": checks}, f, indent=1)


if __name__ == "__main__":
    main()
