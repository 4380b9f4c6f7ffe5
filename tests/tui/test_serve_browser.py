"""`tokensim serve` in a real headless Chromium: the page shows the app, space starts the clock, time advances.

Uses Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`; .ci/run installs
them), and a CJK font for the Chinese screen (fonts-noto-cjk, also installed by .ci/run). Without them the test is skipped, except in CI (CI=true), where it must run. All traffic stays on
127.0.0.1: the server listens there and the browser resolves no other host name.
Set TOKENSIM_SERVE_SCREENSHOT=path.png to save the page as the README shows it (docs/serve.png).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tui.served import SERVER_START_S, serving, wait_for

BUDGET_S = 30.0  # wall time for the whole page interaction; a normal run takes about 3 s
# Chromium flags for a shared, offline machine: no sandbox (root in CI), no GPU, and nothing fetched in the
# background. Every host name but 127.0.0.1 fails to resolve, so the page's web-font link goes nowhere.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "--window-size=1280,760")
# textual-serve's page script keeps its xterm.js Terminal in a closure (`this.terminal = new Terminal(...)`).
# Before the page loads, an accessor on Object.prototype catches that assignment, stores the value as a
# normal own property, and keeps the first Terminal in window.__term, whose buffer (what xterm draws on
# its canvas) is then read through xterm's public buffer API.
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, 'terminal', {configurable: true, set(v) {
  Object.defineProperty(this, 'terminal', {value: v, writable: true, configurable: true, enumerable: true});
  if (v && v.buffer && v.buffer.active && !window.__term) { window.__term = v; }
}});
"""
READ_SCREEN = """
const term = window.__term;
if (!term) { return null; }
const rows = [];
for (let y = 0; y < term.rows; y++) { rows.push(term.buffer.active.getLine(y).translateToString(true)); }
return rows;
"""
SIM_TIME = re.compile(r"sim (\d+\.\d+) s")


def in_ci() -> bool:
    """CI sets CI=true; there the browser test must run, never skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def browser_paths() -> tuple[str, str] | None:
    """Debian's chromium and its chromedriver, or None when either is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium through chromedriver, with a fresh profile; always quit afterwards."""
    paths = browser_paths()
    if paths is None:
        if in_ci():
            pytest.fail("CI=true but chromium/chromedriver are missing: .ci/run should have installed them")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    # Naming the driver's path keeps selenium from looking for (or downloading) one of its own.
    driver = webdriver.Chrome(options=options, service=Service(paths[1]))
    try:
        driver.set_page_load_timeout(SERVER_START_S)
        driver.set_script_timeout(5)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CATCH_TERMINAL})
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """`tokensim serve --paused --lang en` on a free 127.0.0.1 port; its URL."""
    with serving(tmp_path / "serve.log", "--paused", "--lang", "en") as served:
        yield f"http://127.0.0.1:{served.port}/"


def test_the_app_runs_in_a_browser(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + BUDGET_S
    browser.get(server)

    def header() -> str | None:
        rows = browser.execute_script(READ_SCREEN)
        return rows[0] if rows and "tokensim" in rows[0] else None

    def sim_time(row: str) -> float:
        match = SIM_TIME.search(row)
        assert match, f"no simulated time in the header: {row!r}"
        return float(match.group(1))

    first = wait_for("the app's header in the page", header, deadline)
    assert "paused" in first and sim_time(first) == 0.0, first
    assert "H100" in first and "generic-14b" in first  # the app's own default configuration

    # Keys go to xterm's hidden textarea, which sends them down the websocket to the app.
    browser.find_element(By.CSS_SELECTOR, "textarea.xterm-helper-textarea").send_keys(" ")
    playing = wait_for("space to start the clock",
                       lambda: (row := header()) and "playing" in row and sim_time(row) > 0 and row, deadline)
    t1 = sim_time(playing)
    later = wait_for("the simulated time to advance",
                     lambda: (row := header()) and sim_time(row) >= t1 + 0.2 and row, deadline)
    t2 = sim_time(later)
    assert t2 > t1 > 0.0 and "playing" in later

    if shot := os.environ.get("TOKENSIM_SERVE_SCREENSHOT"):
        time.sleep(1.5)  # let a few users' answers fill in before the picture
        assert browser.save_screenshot(shot)


# Where the screen shows Chinese: each distinct CJK character (a wide cell) once, with its box on the page in CSS
# pixels (left, top, width, height), from xterm's buffer and the size of its drawing area (.xterm-screen).
FIND_CJK = """
const term = window.__term;
const area = document.querySelector('.xterm-screen');
if (!term || !area) { return []; }
const r = area.getBoundingClientRect(), cw = r.width / term.cols, ch = r.height / term.rows;
const found = new Map();
for (let y = 0; y < term.rows; y++) {
  const line = term.buffer.active.getLine(y);
  for (let x = 0; x < term.cols; x++) {
    const cell = line.getCell(x), text = cell.getChars();
    if (cell.getWidth() === 2 && /[\\u4e00-\\u9fff]/.test(text) && !found.has(text)) {
      found.set(text, [Math.round(r.left + x * cw), Math.round(r.top + y * ch), Math.round(2 * cw), Math.round(ch)]);
    }
  }
}
return Array.from(found.entries());
"""
# The ink of each box in a screenshot: the PNG is decoded by the page itself (an <img> drawn on a canvas), and a
# pixel is ink when it differs from the box's most common colour (its background). Returns one string per box,
# '#' for ink and '.' for background, row after row.
INK = """
const [png, boxes, done] = arguments;
const img = new Image();
img.onload = () => {
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  done(boxes.map(([x, y, w, h]) => {
    const d = g.getImageData(x, y, w, h).data, counts = new Map();
    const key = i => (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
    for (let i = 0; i < d.length; i += 4) { counts.set(key(i), (counts.get(key(i)) || 0) + 1); }
    const bg = [...counts.entries()].sort((a, b) => b[1] - a[1])[0][0];
    let mask = '';
    for (let i = 0; i < d.length; i += 4) {
      const far = Math.abs((key(i) >> 16) - (bg >> 16)) + Math.abs(((key(i) >> 8) & 255) - ((bg >> 8) & 255))
                + Math.abs((key(i) & 255) - (bg & 255));
      mask += far > 96 ? '#' : '.';
    }
    return mask;
  }));
};
img.src = 'data:image/png;base64,' + png;
"""

# The status of the page's CJK face for xterm's font family ('loaded' once a glyph was drawn from it).
CJK_FACE_STATUS = """
const face = [...document.fonts].find(f => f.family.includes('Roboto Mono') && /2e80/i.test(f.unicodeRange));
return face ? face.status : 'missing';
"""


def test_chinese_renders_as_glyphs_not_boxes(browser: Any, server: str) -> None:
    """After `l` the screen's Chinese is drawn with a CJK font: different characters have different ink.

    Without a CJK font the browser draws every such character as the same empty box (tofu), so their ink masks
    in the screenshot are identical; with one, a dozen distinct characters give a dozen distinct masks.
    """
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + BUDGET_S
    browser.get(server)
    wait_for("the app's header in the page",
             lambda: (rows := browser.execute_script(READ_SCREEN)) and "tokensim" in rows[0], deadline)
    browser.find_element(By.CSS_SELECTOR, "textarea.xterm-helper-textarea").send_keys("l")
    boxes = wait_for("Chinese on the screen", lambda: len(found := browser.execute_script(FIND_CJK)) >= 12 and found,
                     deadline)
    time.sleep(0.3)  # one more frame: the buffer is written before the canvas is drawn
    chars = [text for text, _ in boxes]
    masks = browser.execute_async_script(INK, browser.get_screenshot_as_base64(), [box for _, box in boxes])
    inked = [m for m in masks if m.count("#") >= 4]
    assert len(inked) == len(masks), f"characters drawn without ink: {chars}"
    distinct = len(set(masks))
    assert distinct >= 0.8 * len(masks), (
        f"{len(masks)} Chinese characters drew only {distinct} distinct shapes (empty boxes: no CJK font): {chars}")
    # The glyphs come from the CJK face the page adds to the terminal's family (serve_cmd.CJK_FONT_FACE), loaded.
    assert browser.execute_script(CJK_FACE_STATUS) == "loaded"
