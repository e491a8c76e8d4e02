"""docs/tab.png: the GradLens tab inside TensorBoard on a real demo logdir.

    python -m tb_gradlens demo --no-serve --logdir /tmp/gl_shot --steps 60
    python -m benchmarks.docs_screenshot /tmp/gl_shot docs/tab.png [VIEW, default divergence]

Starts TensorBoard on 127.0.0.1 (a free port), opens the tab at 1400x900 in
Chromium (/usr/bin/chromium), waits until the view is drawn, saves a PNG.
"""

import sys


from playwright.sync_api import sync_playwright  # noqa: E402

from tests.support.frontend_page import CHROMIUM, wait_drawn  # noqa: E402
from tests.support.tb_server import TensorBoardProcess  # noqa: E402


def main(logdir, out, view="divergence"):
    with TensorBoardProcess(logdir) as tb, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(tb.url + "/#gradlens&p.gradlens.view=" + view)
        page.wait_for_selector("iframe", timeout=60000)
        frame = next(f for f in page.frames if "plugin_entry.html?name=gradlens" in f.url)
        wait_drawn(frame)
        page.screenshot(path=out)
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
