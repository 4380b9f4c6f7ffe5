"""`tokensim serve` in a real headless Chromium: the page shows the app, space starts the clock, time advances.

Uses Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`; .ci/run installs
them). Without them the test is skipped, except in CI (CI=true), where it must run. All traffic stays on
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
