"""The README's five-minute tour, followed command by command as a new user would: each
output it shows is what the command prints now, each what-if it names runs, and each
file it says `--out` writes is there."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main

from tests.test_docs_samples import SAMPLE, _normalised, run_sample

REPO_ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = "scenarios/examples/quickstart.yaml"


def _tour() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## A five-minute tour")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_is_short_and_starts_with_its_two_commands():
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    assert blocks[0].endswith("distsim run scenarios/examples/quickstart.yaml")
    assert blocks[1] == "pip install -e '.[dev]' && python -m pytest"


def test_each_output_the_tour_shows_is_what_its_command_prints(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    shown = list(SAMPLE.finditer(_tour()))
    assert [m["command"] for m in shown] == [
        f"distsim run {QUICKSTART}", "distsim topology show dgx-h100 --nodes 2"]
    for sample in shown:
        assert _normalised(run_sample(sample["command"])) == _normalised(sample["body"])
    iteration = re.search(r"iteration\s+([\d.]+ ms)", shown[0]["body"])
    assert iteration is not None and iteration[1] == "316.4 ms"


@pytest.mark.parametrize("override", re.findall(r"`(--set [^`]+)`", _tour()))
def test_each_what_if_the_tour_names_runs(monkeypatch, capsys, override):
    monkeypatch.chdir(REPO_ROOT)
    assert main(["run", QUICKSTART, *shlex.split(override)]) == 0
    assert "iteration" in capsys.readouterr().out


def test_out_writes_what_the_tour_says(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    out = tmp_path / "run"
    assert main(["run", QUICKSTART, "--out", str(out)]) == 0
    capsys.readouterr()
    names = {p.name for p in out.iterdir()}
    assert {"summary.json", "resolved.yaml"} <= names
    assert "`--out DIR` writes `summary.json`, the resolved scenario" in _tour()
