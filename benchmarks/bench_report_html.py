"""Benchmark: report.html of the example scenarios — its size, the host time to make it,
and the time headless Chromium takes to load and draw it.

Run from the repository root (the browser part needs Chromium and Playwright, as the
browser test does; without them it prints the sizes only):

    python benchmarks/bench_report_html.py                       # quickstart and GPT-3
    python benchmarks/bench_report_html.py quickstart.yaml       # some examples

Prints a Markdown table.  The target (issue 16): the GPT-3 1024-GPU example's page under
10 MB and drawn in under 3 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from distsim_gpu.scenarios.report import format_summary
from distsim_gpu.scenarios.report.html_report import run_report_html
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "scenarios" / "examples"
sys.path.insert(0, str(REPO_ROOT))  # tests.browser: the browser test's own driver

from tests import browser  # noqa: E402


def measure(path: Path, tmp: Path) -> list[str]:
    report = run_scenario(load_scenario(path))
    began = time.perf_counter()
    page = run_report_html(report, format_summary(report))
    make_s = time.perf_counter() - began
    out = tmp / f"{path.stem}.html"
    out.write_text(page, encoding="utf-8")
    load = "—"
    if browser.missing() is None:
        with browser.opened(out) as loaded:
            load = f"{loaded.load_s:.2f} s" + (" (console errors)" if loaded.errors else "")
    rows = len(report.timelines) and _rows(report)
    return [path.stem, f"{report.num_gpus:,}", str(rows), f"{len(page) / 1e6:.2f} MB",
            f"{make_s:.2f} s", load]


def _rows(report) -> int:
    from distsim_gpu.scenarios.report.html_report import timeline_figure

    return len(timeline_figure(report).layout.yaxis.ticktext)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*",
                        default=["quickstart.yaml", "gpt3-175b-1024-a100.yaml"])
    args = parser.parse_args()
    if browser.missing():
        print(f"(no load times: {browser.missing()})")
    print("| example | GPUs | timeline rows | report.html | made in | drawn in |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            print("| " + " | ".join(measure(EXAMPLES / name, Path(tmp))) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
