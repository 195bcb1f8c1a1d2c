"""``distsim run``: the summary, --json, --set, --out, --allow-oom, clear errors with exit
status 2, and the shipped examples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli import run as run_command
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[3] / "scenarios" / "examples"


def run_cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def tiny_path(tmp_path, tiny, write_scenario):
    return write_scenario(tmp_path / "tiny.yaml", tiny())


def test_run_prints_the_summary(capsys, tiny_path):
    status, out, err = run_cli(capsys, "run", tiny_path)
    assert status == 0 and err == ""
    assert out.startswith("distsim run: tiny")
    for part in ("iteration", "samples/s", "MFU", "Time per GPU", "Memory per GPU"):
        assert part in out


def test_json_prints_exactly_one_object(capsys, tiny_path):
    status, out, _ = run_cli(capsys, "run", tiny_path, "--json")
    assert status == 0
    data = json.loads(out)  # fails on anything but one JSON document
    assert data["num_gpus"] == 8 and data["iteration_time_s"] > 0
    assert data["config"]["name"] == "tiny"


def test_set_overrides_reach_the_run(capsys, tiny_path):
    _, base, _ = run_cli(capsys, "run", tiny_path, "--json")
    status, out, _ = run_cli(capsys, "run", tiny_path, "--json", "--set", "parallelism.tp=4",
                             "--set", "parallelism.dp=1", "--set",
                             'cluster.link_bandwidth="50 Gbps"')
    assert status == 0
    data = json.loads(out)
    assert data["config"]["parallelism"]["tp"] == 4
    # written with its unit, so the resolved file reads back (simcore.units)
    assert data["config"]["cluster"]["link_bandwidth"] == f"{50e9 / 8!r} B/s"
    assert data["iteration_time_s"] != json.loads(base)["iteration_time_s"]


def test_bad_scenario_exits_2_with_one_error_line(capsys, tiny_path):
    status, out, err = run_cli(capsys, "run", tiny_path, "--set", "parallelism.tp=3")
    assert status == 2 and out == ""
    assert err.startswith("distsim: error: ") and "tiny.yaml" in err
    assert "tp·pp·dp = 3·2·2" in err and len(err.strip().splitlines()) == 1
    status, _, err = run_cli(capsys, "run", tiny_path.with_name("absent.yaml"))
    assert status == 2 and "distsim: error:" in err and "absent.yaml" in err
    status, _, err = run_cli(capsys, "run", tiny_path, "--set", "no-equals-sign")
    assert status == 2 and "--set" in err


def test_out_of_memory_needs_allow_oom(capsys, tmp_path, tiny, write_scenario):
    data = tiny(parallelism={"tp": 8, "pp": 1, "dp": 1}, training={"global_batch": 1})
    data["model"] = {"preset": "gpt3-175b", "layers": 24}
    path = write_scenario(tmp_path / "big.yaml", data)
    status, _, err = run_cli(capsys, "run", path)
    assert status == 2 and "out of memory" in err and "--allow-oom" in err
    status, out, _ = run_cli(capsys, "run", path, "--allow-oom", "--json")
    assert status == 0 and json.loads(out)["iteration_time_s"] > 0
    # The scenario key does the same, for the commands without the flag; the resolved
    # configuration keeps it (it reruns as it ran).
    status, same, _ = run_cli(capsys, "run", path, "--set", "simulation.allow_oom=true",
                              "--json")
    assert status == 0
    assert json.loads(same)["iteration_time_s"] == json.loads(out)["iteration_time_s"]
    assert json.loads(same)["config"]["simulation"]["allow_oom"] is True
    assert "allow_oom" not in json.loads(out)["config"]["simulation"]


def test_out_writes_the_directory_and_says_so(capsys, tiny_path, tmp_path):
    out_dir = tmp_path / "results"
    status, out, _ = run_cli(capsys, "run", tiny_path, "--out", out_dir)
    assert status == 0
    assert f"wrote {out_dir}:" in out
    names = {p.name for p in out_dir.iterdir()}
    assert {"summary.json", "resolved.yaml", "trace.json"} <= names
    assert "traceEvents" in json.loads((out_dir / "trace.json").read_text())
    (out_dir / "mine.txt").write_text("keep")
    status, _, err = run_cli(capsys, "run", tiny_path, "--out", out_dir)
    assert status == 2 and "distsim: error:" in err and "--out" in err


def test_no_trace_leaves_out_the_trace(capsys, tiny_path, tmp_path):
    status, _, _ = run_cli(capsys, "run", tiny_path, "--out", tmp_path / "o", "--no-trace")
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert status == 0 and "summary.json" in names
    assert not names & {"trace.json", "timeline.png"}
    status, _, err = run_cli(capsys, "run", tiny_path, "--no-trace")
    assert status == 2 and "--no-trace" in err


def test_a_run_above_the_traced_size_leaves_the_trace_out_unless_asked(
        capsys, tiny_path, tmp_path, monkeypatch):
    """A trace unfolds every replica: above MAX_TRACED_GPUS --out says it left it out."""
    monkeypatch.setattr(run_command, "MAX_TRACED_GPUS", 1)
    status, out, _ = run_cli(capsys, "run", tiny_path, "--out", tmp_path / "o")
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert status == 0 and "summary.json" in names and "trace.json" not in names
    assert "trace.json and timeline.png left out" in out and "--trace" in out
    # A run note, so that summary.json and report.html say it too.
    notes = json.loads((tmp_path / "o" / "summary.json").read_text())["notes"]
    (note,) = [note for note in notes if note["key"] == "--trace"]
    assert note["kind"] == "defaulted" and "left out" in note["message"]
    assert "left out" in (tmp_path / "o" / "report.html").read_text()
    status, out, _ = run_cli(capsys, "run", tiny_path, "--out", tmp_path / "t", "--trace")
    assert status == 0 and (tmp_path / "t" / "trace.json").exists() and "left out" not in out
    for argv in (("--trace",), ("--out", tmp_path / "b", "--trace", "--no-trace")):
        status, _, err = run_cli(capsys, "run", tiny_path, *argv)
        assert status == 2 and "--trace" in err


def test_json_with_out_keeps_stdout_one_object(capsys, tiny_path, tmp_path):
    status, out, _ = run_cli(capsys, "run", tiny_path, "--json", "--out", tmp_path / "o")
    assert status == 0 and json.loads(out)["name"] == "tiny"


def test_without_matplotlib_the_run_works_and_out_notes_skipped_plots(
        capsys, tiny_path, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    status, _, err = run_cli(capsys, "run", tiny_path)
    assert status == 0 and err == ""
    status, _, err = run_cli(capsys, "run", tiny_path, "--out", tmp_path / "o")
    assert status == 0
    assert err.count("\n") == 1 and err.startswith("distsim: note: plots skipped")


def test_other_commands_still_parse(capsys):
    status, out, _ = run_cli(capsys, "nccl-tests", "--cluster", "switch", "-b", "1M", "-e", "1M")
    assert status == 0 and "busbw" in out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads_and_validates(path):
    scenario = load_scenario(path)
    assert scenario.name == path.stem


def test_the_examples_are_there():
    assert {p.name for p in EXAMPLES.glob("*.yaml")} >= {
        "quickstart.yaml", "gpt3-175b-1024-a100.yaml", "llama2-70b-fsdp-64-h100.yaml",
        "mixtral-8x7b-ep-64-h100.yaml", "bert-large-dp-32-v100.yaml",
        "llama3.1-405b-16k-h100.yaml"}


def test_quickstart_runs_from_the_console_entry_point(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "distsim_gpu.scenarios", "run", str(EXAMPLES / "quickstart.yaml"),
         "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["num_gpus"] == 16 and 0 < data["mfu"] < 1
