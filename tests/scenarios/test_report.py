"""Reports: metrics from their definitions, JSON shape, determinism, the terminal summary,
and --out directories that appear whole or not at all."""

from __future__ import annotations

import json
import math
import os

import pytest
import yaml
from distsim_gpu.scenarios.report import (
    OUTPUT_FILES,
    WRITERS,
    OutputContext,
    ReportWriter,
    Written,
    format_summary,
    group_gpus,
    plots,
    register_writer,
    unregister_writer,
    write_output_dir,
)
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny, write_scenario):
    path = write_scenario(tmp_path_factory.mktemp("report") / "tiny.yaml", tiny())
    return load_scenario(path)


@pytest.fixture(scope="module")
def traced(scenario):
    return run_scenario(scenario, trace=True)


def test_metrics_follow_their_definitions(scenario, traced):
    r = traced
    t = r.iteration_time_s
    assert t > 0
    assert r.num_gpus == 8 and r.microbatches == 4
    assert r.samples_per_s == pytest.approx(8 / t)
    assert r.tokens_per_s == pytest.approx(8 * 128 / t)
    flops = scenario.model.model_flops_per_iteration(8, 128)
    assert r.model_flops == pytest.approx(flops)
    assert r.model_tflops_per_gpu == pytest.approx(flops / t / 8 / 1e12)
    assert r.mfu == pytest.approx(r.model_tflops_per_gpu * 1e12 / 312e12)
    assert 0 < r.mfu < 1
    assert r.wall_time_s > 0 and r.events > 0 and r.flows > 0


def test_each_gpu_time_adds_up_to_the_iteration(traced):
    for g in traced.per_gpu:
        parts = g.compute_s + g.host_s + g.exposed_communication_s + g.bubble_s + g.idle_s
        assert parts == pytest.approx(traced.iteration_time_s, rel=1e-9)
        assert g.communication_s >= g.exposed_communication_s - 1e-12
        assert min(g.compute_s, g.bubble_s, g.idle_s, g.exposed_communication_s) >= -1e-12


def test_json_has_the_documented_keys_all_numeric(traced):
    data = json.loads(json.dumps(traced.to_json_dict()))
    for key in ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_gpu",
                "mfu", "num_gpus", "wall_time_s", "microbatches", "events", "flows",
                "model_flops", "peak_flops_per_gpu", "gpu_memory_bytes"):
        assert isinstance(data[key], (int, float)) and math.isfinite(data[key]), key
    assert len(data["per_gpu"]) == 8
    for entry in data["per_gpu"]:
        for key in ("compute_s", "host_s", "communication_s", "exposed_communication_s",
                    "bubble_s", "idle_s", "peak_memory_bytes"):
            assert isinstance(entry[key], float) and math.isfinite(entry[key]), key
        assert set(entry["memory"]) == {"weights_bytes", "gradients_bytes", "optimizer_bytes",
                                        "activations_bytes", "total_bytes"}
        assert entry["memory"]["total_bytes"] == entry["peak_memory_bytes"]
    assert [e["gpu"] for e in data["per_gpu"]] == [f"n0.gpu{i}" for i in range(8)]
    assert data["config"]["parallelism"]["tp"] == 2


def test_same_seed_gives_the_same_json_except_wall_time(scenario, traced):
    again = run_scenario(scenario).to_json_dict()
    first = traced.to_json_dict()
    for data in (first, again):
        data.pop("wall_time_s")
    assert again == first


def test_summary_has_headline_units_and_a_row_per_group(traced):
    text = format_summary(traced)
    for part in ("iteration", "samples/s", "tokens/s", "TFLOP/s", "MFU", "%", "GiB",
                 "compute", "communication", "exposed comm", "bubble", "idle", "weights",
                 "gradients", "optimizer", "activations"):
        assert part in text, part
    groups = traced.groups()
    assert [(g.stage, len(g.gpus)) for g in groups] == [(0, 4), (1, 4)]
    time_rows = [line for line in text.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert len(time_rows) == 2 * 2  # the time table and the memory table


def test_summary_names_a_power_limit_below_the_rated_power(tmp_path, tiny, write_scenario):
    def cluster_line(gpu):
        path = write_scenario(tmp_path / "s.yaml", tiny(compute={"gpu": gpu}))
        text = format_summary(run_scenario(load_scenario(path)))
        return next(line for line in text.splitlines() if "cluster" in line)

    assert cluster_line({"preset": "h100", "power_limit": "500 W"}).endswith(
        "h100-sxm limited to 500 W of 700 W (compute clocks lower)")
    assert cluster_line("h100").endswith(", h100-sxm")


def test_the_header_names_the_nics_and_fabric_the_run_resolved(tmp_path, tiny,
                                                               write_scenario):
    """A what-if on the network shows in the header: 400 Gb/s and 2:1 had read like the
    preset's 200 Gb/s non-blocking tree."""
    def network_line(**cluster):
        data = tiny()
        data["cluster"] = {"preset": "dgx-a100", "nodes": 1, "fabric": "fat-tree", **cluster}
        path = write_scenario(tmp_path / "s.yaml", data)
        text = format_summary(run_scenario(load_scenario(path)))
        return next(line for line in text.splitlines() if line.startswith("  network"))

    base = network_line()
    assert base.endswith("NICs a node at 200 Gb/s; fat-tree (infiniband, non-blocking, "
                         "dmodk routing)")
    what_if = network_line(nic={"bandwidth": "400 Gbps"},
                           fabric={"kind": "fat-tree", "oversubscription": 2})
    assert "at 400 Gb/s; fat-tree (infiniband, 2:1 oversubscribed," in what_if


def test_a_straggler_gets_a_group_of_its_own(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny(stragglers={"n0.gpu6": 1.5}))
    report = run_scenario(load_scenario(path))
    groups = report.groups()
    # The straggler alone; its TP partner waits for it in their collectives, not computing,
    # so it is a row of its own too (the two had shared the straggler's compute).
    assert ("n0.gpu6",) in [g.gpus for g in groups] and ("n0.gpu7",) in [g.gpus for g in groups]
    by_gpu = {t.gpu: t for t in report.per_gpu}
    assert by_gpu["n0.gpu6"].compute_s == pytest.approx(1.5 * by_gpu["n0.gpu7"].compute_s)
    assert len(groups) > 2
    assert sorted(gpu for g in groups for gpu in g.gpus) == [f"n0.gpu{i}" for i in range(8)]
    # An exact grouping (tolerance 0) never merges GPUs whose times differ at all.
    assert len(group_gpus(report.per_gpu, report.iteration_time_s, 0.0)) >= 3


def test_out_dir_has_summary_resolved_trace_and_plots(tmp_path, traced):
    out = tmp_path / "run1"
    result = write_output_dir(traced, out)
    assert set(result.files) == set(OUTPUT_FILES) == {p.name for p in out.iterdir()}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iteration_time_s"] == traced.iteration_time_s
    trace = json.loads((out / "trace.json").read_text())
    assert trace["traceEvents"]
    assert {e["ph"] for e in trace["traceEvents"]} >= {"X", "M"}
    for png in ("timeline.png", "breakdown.png", "memory.png"):
        assert (out / png).read_bytes().startswith(PNG_MAGIC)
    assert not [p for p in tmp_path.iterdir() if p.name != "run1"]  # no staging left


def test_resolved_yaml_in_out_dir_reproduces_the_run(tmp_path, traced):
    write_output_dir(traced, tmp_path / "out", plots=False)
    again = run_scenario(load_scenario(tmp_path / "out" / "resolved.yaml"))
    assert again.iteration_time_s == traced.iteration_time_s
    assert yaml.safe_load((tmp_path / "out" / "resolved.yaml").read_text()) == traced.config


def test_failure_midway_leaves_nothing(tmp_path, traced, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(plots, "plot_breakdown", broken)
    with pytest.raises(RuntimeError, match="plotting failed"):
        write_output_dir(traced, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_failure_midway_keeps_a_previous_output_intact(tmp_path, traced, monkeypatch):
    out = tmp_path / "out"
    write_output_dir(traced, out, plots=False, html=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(plots, "plot_memory",
                        lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(ConfigError, match="No space left"):
        write_output_dir(traced, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_previous_output_is_replaced_and_foreign_directories_refused(tmp_path, traced):
    out = tmp_path / "out"
    write_output_dir(traced, out, plots=False, html=False)
    assert {p.name for p in out.iterdir()} == {"summary.json", "resolved.yaml", "trace.json"}
    write_output_dir(traced, out)  # a previous distsim output: replaced whole
    assert {p.name for p in out.iterdir()} == set(OUTPUT_FILES)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as info:
        write_output_dir(traced, out)
    assert "--out" in str(info.value) and "did not write" in str(info.value)
    assert (out / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    write_output_dir(traced, empty, plots=False)
    assert (empty / "summary.json").is_file()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        write_output_dir(traced, a_file)


def test_an_out_dir_below_a_file_names_the_file(tmp_path, traced):
    """``--out FILE/sub`` names the file in the way; it had said only "File exists"."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out in (a_file / "sub", a_file / "deeper" / "sub"):
        with pytest.raises(ConfigError, match=f"{a_file} is a file, not a directory"):
            write_output_dir(traced, out)
    assert a_file.read_text() == "x"


def test_without_matplotlib_plots_are_skipped_with_a_note(tmp_path, traced, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.figure", None)
    result = write_output_dir(traced, tmp_path / "out", html=False)
    assert set(result.files) == {"summary.json", "resolved.yaml", "trace.json"}
    assert len(result.notes) == 1 and "matplotlib" in result.notes[0]
    assert sorted(os.listdir(tmp_path / "out")) == ["resolved.yaml", "summary.json",
                                                    "trace.json"]


def test_untraced_run_writes_no_trace_and_no_timeline(tmp_path, scenario):
    report = run_scenario(scenario)
    assert report.tracer is None
    result = write_output_dir(report, tmp_path / "out")
    assert "trace.json" not in result.files and "timeline.png" not in result.files
    assert "breakdown.png" in result.files


# --------------------------------------------------------------------------- writers


class ToyUnavailable(Exception):
    """What the toy writer raises when its (imaginary) optional package is missing."""


def _toy_write(out: OutputContext) -> Written:
    (out.directory / "toy.txt").write_text(f"{out.report.name} {out.report.num_gpus}\n")
    return Written(("toy.txt",), ("toy wrote one line",))


TOY = ReportWriter("toy", ("toy.txt",), _toy_write)


def test_a_writer_passed_in_writes_its_file_after_the_others(tmp_path, traced):
    out = tmp_path / "out"
    result = write_output_dir(traced, out, plots=False, html=False, writers=[*WRITERS, TOY])
    assert result.files == ("summary.json", "resolved.yaml", "trace.json", "toy.txt")
    assert result.notes == ("toy wrote one line",)
    assert (out / "toy.txt").read_text() == f"{traced.name} 8\n"
    # Its file is distsim's own output: the folder is replaced, not refused.
    again = write_output_dir(traced, out, plots=False, html=False, writers=[*WRITERS, TOY])
    assert again.files == result.files
    with pytest.raises(ConfigError, match="did not write"):  # without it, toy.txt is foreign
        write_output_dir(traced, out, plots=False, html=False)


def test_a_registered_writer_runs_with_every_out_dir(tmp_path, traced):
    register_writer(TOY)
    try:
        with pytest.raises(ValueError, match="toy"):
            register_writer(TOY)
        result = write_output_dir(traced, tmp_path / "out", plots=False, html=False)
    finally:
        unregister_writer("toy")
    assert result.files[-1] == "toy.txt"
    assert sorted(os.listdir(tmp_path / "out")) == ["resolved.yaml", "summary.json",
                                                    "toy.txt", "trace.json"]
    assert TOY not in WRITERS


def test_a_writer_without_its_optional_package_is_skipped_with_its_note(tmp_path, traced):
    def missing(out: OutputContext) -> Written:
        raise ToyUnavailable("needs toylib: pip install toylib")

    toy = ReportWriter("toy", ("toy.txt",), missing, unavailable=(ToyUnavailable,),
                       skipped="toy.txt skipped")
    result = write_output_dir(traced, tmp_path / "out", plots=False, html=False,
                              writers=[*WRITERS, toy])
    assert result.notes == ("toy.txt skipped: needs toylib: pip install toylib",)
    assert "toy.txt" not in result.files and not (tmp_path / "out" / "toy.txt").exists()


def test_the_built_in_writers_write_the_documented_files_in_order():
    assert [w.name for w in WRITERS] == ["summary", "resolved", "trace", "plots", "html"]
    assert OUTPUT_FILES == ("summary.json", "resolved.yaml", "trace.json", "timeline.png",
                            "breakdown.png", "memory.png", "report.html")
