"""Open a report.html in real headless Chromium, as a person would (Playwright driving the
Debian ``chromium`` package), for the browser test and for the README's screenshot.

``python -m tests.browser`` runs the quickstart, writes its report.html and saves a
screenshot of its top to ``docs/img/report.png`` (the README shows it).

The browser is ``DISTSIM_CHROMIUM`` or the first of ``chromium``, ``chromium-browser``,
``google-chrome`` on the PATH; ``.ci/run`` installs Debian's.  The launch flags keep it
off the network and away from a GPU: a report opens with no network access.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    """The Chromium to drive, or None when none is installed."""
    configured = os.environ.get("DISTSIM_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why a page cannot be opened here (None: it can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "no Chromium on the PATH (apt-get install chromium; .ci/run does)"
    return None


@dataclass
class Loaded:
    """A page after its load: the Playwright page, seconds until the ``load`` event and
    every figure drawn, and the console's errors and the page's uncaught exceptions."""

    page: Any
    load_s: float
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def opened(path: Path, width: int = 1400, height: int = 900) -> Iterator[Loaded]:
    """``path`` open in a fresh headless Chromium (its own profile directory)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="distsim-chromium-") as profile, \
            sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            profile, executable_path=chromium_path(), args=FLAGS, headless=True,
            viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            loaded = Loaded(page, 0.0)
            page.on("console", lambda m: loaded.errors.append(m.text)
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: loaded.errors.append(str(e)))
            began = time.perf_counter()
            page.goto(path.resolve().as_uri(), wait_until="load")
            # Plotly draws on load; a figure is drawn once its SVG holds its main layer.
            page.wait_for_function(
                "() => [...document.querySelectorAll('.js-plotly-plot')]"
                ".every(d => d.querySelector('.main-svg'))")
            loaded.load_s = time.perf_counter() - began
            yield loaded
        finally:
            context.close()


def main() -> int:
    """Write the quickstart's report.html and screenshot it into docs/img/report.png."""
    reason = missing()
    if reason:
        print(f"cannot take the screenshot: {reason}", file=sys.stderr)
        return 1
    from distsim_gpu.scenarios.report.html_report import run_report_html
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    report = run_scenario(load_scenario(REPO_ROOT / "scenarios/examples/quickstart.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        page_path.write_text(run_report_html(report), encoding="utf-8")
        with opened(page_path, width=1280, height=1100) as loaded:
            target = REPO_ROOT / "docs" / "img" / "report.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            loaded.page.screenshot(path=str(target))
    print(f"wrote {target.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
