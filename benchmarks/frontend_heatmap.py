"""Time the GradLens heatmap of 200 variables x 10,000 steps in headless Chromium.

Loads frontend_static/heatmap.js (served from disk through Playwright's
request routing, no server), builds random log-normal values with a few
NaN/Inf cells, and times heatmap() - colors anchored at a tolerance, ImageData paint by
step value, axes, row labels and legend - until the canvas is drawn.  Prints the times; asserts
nothing.

    python -m benchmarks.frontend_heatmap [--rows 200] [--steps 10000] [--repeat 5] [--json PATH]
"""

import argparse
import os
import statistics

from benchmarks.harness import write_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATIC = os.path.join(ROOT, "frontend_static")
ORIGIN = "http://gradlens.bench"
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head>
<body style="width:1280px"><div id="host" style="width:1200px"></div></body></html>"""

SCRIPT = """async ([rows, steps, repeat]) => {
  const {heatmap} = await import('/static/heatmap.js');
  const colorers = await import('/static/heatmap_colors.js');
  // Random log-normal values (a tiny xorshift generator), some NaN/Inf.
  let seed = 12345;
  const random = () => {
    seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
    return ((seed >>> 0) + 0.5) / 4294967296;
  };
  const values = [];
  for (let r = 0; r < rows; r++) {
    const row = new Float64Array(steps);
    for (let s = 0; s < steps; s++) row[s] = Math.exp(4 * (random() - 0.5) * 3) * 1e-3;
    values.push(row);
  }
  values[3][5000] = NaN;
  values[7][9000] = Infinity;
  const names = Array.from({length: rows}, (_, r) => `model/layer_${r}/kernel`);
  const stepList = Array.from({length: steps}, (_, s) => s);
  const host = document.getElementById('host');
  const times = [];
  // Colored by value / its limit at that step (0.01 everywhere here), as the Divergence view does.
  const ratios = values.map((row) => row.map((v) => v / 0.01));
  for (let k = 0; k < repeat; k++) {
    host.replaceChildren();
    const t0 = performance.now();
    const figure = heatmap({rows: names, steps: stepList, values: ratios, legendTitle: 'rel_l2',
      colors: colorers.limitRatio()});
    host.appendChild(figure);
    figure.redraw();  // one full draw at the attached width
    // Wait for the next frame so the drawing is really done.
    await new Promise((resolve) => requestAnimationFrame(() => resolve()));
    times.push(performance.now() - t0);
  }
  return times;
}"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--json", help="also write the results here: the printed times, each draw's ms")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    def serve(route):
        path = route.request.url[len(ORIGIN):].split("?")[0]
        if path.startswith("/static/"):
            with open(os.path.join(STATIC, path[len("/static/"):]), "rb") as f:
                route.fulfill(status=200, body=f.read(), content_type="text/javascript")
        else:
            route.fulfill(status=200, body=PAGE, content_type="text/html")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route(ORIGIN + "/**", serve)
        page.goto(ORIGIN + "/")
        times = page.evaluate(SCRIPT, [args.rows, args.steps, args.repeat])
        browser.close()
    print(
        "heatmap %d variables x %d steps: first %.0f ms, median of %d %.0f ms, min %.0f ms"
        % (args.rows, args.steps, times[0], len(times), statistics.median(times), min(times))
    )
    write_rows(args.json, [{"rows": args.rows, "steps": args.steps, "first_ms": times[0],
                            "median_ms": statistics.median(times), "min_ms": min(times), "draws_ms": times}])


if __name__ == "__main__":
    main()
