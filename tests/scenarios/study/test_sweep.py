"""Sweeps: grid parsing, points, results equal to single runs, resume, failures, Dask."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import distsim_gpu.scenarios.study.sweep_runner as sweep_runner
import pytest
from distsim_gpu.scenarios.cli import sweep as sweep_cli
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.scenarios.study.sweep import (
    SUMMARY_METRICS,
    parse_grid,
    point_id,
    run_sweep,
    sweep_points,
)
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.pool import Workers

SCENARIO = """\
cluster: {preset: switch, gpus: 8, link_bandwidth: "100 GB/s", link_latency: "1 us"}
model: {layers: 4, hidden: 512, heads: 8, seq_len: 256, vocab: 1000}
parallelism: {tp: 2, dp: 4}
training: {micro_batch: 1, global_batch: 8}
compute: {gpu: a100-80gb}
"""

BANDWIDTHS = ("link_bandwidth=50 GB/s,100 GB/s,200 GB/s")


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


def _without_wall(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_time_s"}


def _single(path: Path, overrides: Any) -> dict[str, Any]:
    report = run_scenario(load_scenario(path, list(overrides)))
    return _without_wall(json.loads(json.dumps(report.to_json_dict())))


def _rows(directory: Path) -> list[dict[str, str]]:
    with open(directory / "results.csv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = sweep_runner.run_point

    def counting(config: dict[str, Any], source: str) -> dict[str, Any]:
        calls.append(source)
        return real(config, source)

    monkeypatch.setattr(sweep_runner, "run_point", counting)
    return calls


# --------------------------------------------------------------------------- grids


def test_parse_grid_reads_values_like_set() -> None:
    assert parse_grid("parallelism.tp=1,2,4") == ("parallelism.tp", [1, 2, 4])
    assert parse_grid('cluster.nic.bandwidth="100 Gbps,200 Gbps"') == (
        "cluster.nic.bandwidth", ["100 Gbps", "200 Gbps"])
    assert parse_grid("training.recompute=full, none") == (
        "training.recompute", ["full", "none"])


def test_parse_grid_keeps_lists_and_mappings_whole() -> None:
    """Commas inside brackets, braces and quotes belong to their value."""
    assert parse_grid("training.recompute_modules=[layernorm],[layernorm, moe_act]") == (
        "training.recompute_modules", [["layernorm"], ["layernorm", "moe_act"]])
    assert parse_grid("model.moe.routing=uniform,{histogram: [1, 2, 3]},{zipf: 1.2}") == (
        "model.moe.routing", ["uniform", {"histogram": [1, 2, 3]}, {"zipf": 1.2}])
    assert parse_grid("model.name='a,b',c") == ("model.name", ["a,b", "c"])
    assert parse_grid("model.name=bob's,alice") == ("model.name", ["bob's", "alice"])


@pytest.mark.parametrize("text", ["parallelism.tp", "=1,2", "parallelism.tp=1,,2",
                                  "model.moe.routing=uniform,{zipf: 1.2",
                                  "training.recompute_modules=[a]]"])
def test_parse_grid_rejects_malformed(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_grid(text)
    assert "--grid" in str(info.value)


def test_product_and_zip() -> None:
    grids = [("a", [1, 2, 3]), ("b", ["x", "y"])]
    assert len(sweep_points(grids)) == 6
    assert sweep_points(grids)[:2] == [(("a", 1), ("b", "x")), (("a", 1), ("b", "y"))]
    assert sweep_points([("a", [1, 2]), ("b", ["x", "y"])], zip_=True) == [
        (("a", 1), ("b", "x")), (("a", 2), ("b", "y"))]
    with pytest.raises(ConfigError, match=r"same length.*a: 3, b: 2"):
        sweep_points(grids, zip_=True)
    with pytest.raises(ConfigError, match="more than once"):
        sweep_points([("a", [1]), ("a", [2])])


def test_a_point_runs_once_but_zipped_grids_may_repeat_a_value() -> None:
    """``tp=1,2,1`` with ``dp=64,32,32`` is three different points; a product over a
    repeated value, or zipped grids repeating a whole point, would run one twice."""
    assert sweep_points([("tp", [1, 2, 1]), ("dp", [64, 32, 32])], zip_=True) == [
        (("tp", 1), ("dp", 64)), (("tp", 2), ("dp", 32)), (("tp", 1), ("dp", 32))]
    with pytest.raises(ConfigError, match=r"tp.*1 appears twice"):
        sweep_points([("tp", [1, 2, 1])])
    with pytest.raises(ConfigError, match=r"--zip.*tp=1, dp=64.*appears twice"):
        sweep_points([("tp", [1, 2, 1]), ("dp", [64, 32, 64])], zip_=True)


def test_point_id_is_stable_and_distinct() -> None:
    a = (("parallelism.tp", 2), ("cluster.link_bandwidth", "50 GB/s"))
    assert point_id(a) == point_id(tuple(a))
    assert len(point_id(a)) == 12
    assert point_id(a) != point_id((("parallelism.tp", 4), a[1]))


def test_summary_metrics_are_the_reports_numbers(scenario: Path) -> None:
    data = run_scenario(load_scenario(scenario)).to_json_dict()
    numeric = tuple(k for k, v in data.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool))
    assert numeric == SUMMARY_METRICS


# --------------------------------------------------------------------------- running


def test_cartesian_sweep_equals_single_runs(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_sweep(scenario, [f"cluster.{BANDWIDTHS}", "training.global_batch=8,16"],
                       out_dir=out, workers=1, progress=False)
    assert len(result.points) == 6 and result.ran == 6 and result.failed == 0
    for point in result.points:
        expected = _single(scenario, point.overrides)
        assert _without_wall(dict(point.summary or {})) == expected
        stored = json.loads((out / "points" / point.id / "summary.json").read_text())
        assert _without_wall(stored) == expected
    rows = _rows(out)
    columns = list(rows[0])
    assert columns[:5] == ["id", "cluster.link_bandwidth", "training.global_batch", "status",
                           "error"]
    for name in ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_gpu",
                 "mfu", "num_gpus", "wall_time_s"):
        assert name in columns
    assert [r["cluster.link_bandwidth"] for r in rows[:2]] == ["50 GB/s", "50 GB/s"]
    assert {r["status"] for r in rows} == {"ok"}
    for row, point in zip(rows, result.points):
        assert float(row["iteration_time_s"]) == point.summary["iteration_time_s"]
    # A faster link is never slower.
    times = {(r["cluster.link_bandwidth"], r["training.global_batch"]):
             float(r["iteration_time_s"]) for r in rows}
    assert times[("200 GB/s", "8")] <= times[("50 GB/s", "8")]
    definition = json.loads((out / "sweep.json").read_text())
    assert definition["grids"][1] == ["training.global_batch", [8, 16]]
    pytest.importorskip("matplotlib")
    assert "sweep.png" in result.files
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zip_pairs_values(scenario: Path, tmp_path: Path) -> None:
    result = run_sweep(scenario, ["parallelism.tp=2,4", "parallelism.dp=4,2"], zip_=True,
                       out_dir=tmp_path / "out", workers=1, progress=False,
                       metric="samples_per_s")
    assert [dict(p.overrides) for p in result.points] == [
        {"parallelism.tp": 2, "parallelism.dp": 4}, {"parallelism.tp": 4, "parallelism.dp": 2}]
    for point in result.points:
        assert point.summary["config"]["parallelism"]["tp"] == dict(point.overrides)[
            "parallelism.tp"]
    with pytest.raises(ConfigError, match="same length"):
        run_sweep(scenario, ["parallelism.tp=2,4", "parallelism.dp=4"], zip_=True,
                  out_dir=tmp_path / "other", workers=1, progress=False)


def test_resume_runs_only_missing_points(scenario: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    grids = [f"cluster.{BANDWIDTHS}", "training.global_batch=8,16"]
    first = run_sweep(scenario, grids, out_dir=out, workers=1, progress=False)
    before = _rows(out)
    # A crash: two points and results.csv lost.
    for point in first.points[1:3]:
        (out / "points" / point.id / "summary.json").unlink()
    (out / "results.csv").unlink()
    calls = _count_runs(monkeypatch)
    again = run_sweep(scenario, grids, out_dir=out, workers=1, progress=False)
    assert len(calls) == 2 and again.ran == 2 and again.reused == 4
    after = _rows(out)
    drop = ("wall_time_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in after] == [
        {k: v for k, v in r.items() if k not in drop} for r in before]
    # Nothing left to do.
    calls.clear()
    assert run_sweep(scenario, grids, out_dir=out, workers=1, progress=False).ran == 0
    assert calls == []


def test_resume_with_other_arguments_is_refused(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_sweep(scenario, ["training.global_batch=8,16"], out_dir=out, workers=1,
              progress=False)
    with pytest.raises(ConfigError, match=r"training.global_batch: 8,16 -> 8,24"):
        run_sweep(scenario, ["training.global_batch=8,24"], out_dir=out, workers=1,
                  progress=False)
    with pytest.raises(ConfigError, match=r"--grid model\.layers added"):
        run_sweep(scenario, ["training.global_batch=8,16", "model.layers=2,4"], out_dir=out,
                  workers=1, progress=False)
    scenario.write_text(SCENARIO.replace("layers: 4", "layers: 2"), encoding="utf-8")
    with pytest.raises(ConfigError, match="content changed"):
        run_sweep(scenario, ["training.global_batch=8,16"], out_dir=out, workers=1,
                  progress=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a sweep"):
        run_sweep(scenario, ["training.global_batch=8,16"], out_dir=foreign, workers=1,
                  progress=False)


def test_invalid_point_fails_before_anything_runs(scenario: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_runs(monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_sweep(scenario, ["training.global_batch=8,7,16"], out_dir=out, workers=1,
                  progress=False)
    message = str(info.value)
    assert "training.global_batch" in message and "--grid" in message
    assert "grid point training.global_batch=7" in message
    assert calls == [] and not out.exists()
    with pytest.raises(ConfigError, match=r"parallelism\.tpp"):
        run_sweep(scenario, ["parallelism.tpp=1,2"], out_dir=out, workers=1, progress=False)
    with pytest.raises(ConfigError, match="did you mean 'mfu'"):
        run_sweep(scenario, ["model.layers=2,4"], out_dir=out, workers=1, progress=False,
                  metric="mfuu")


def test_every_invalid_point_is_named_in_one_error(scenario: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A product grid with several invalid combinations names each of them at once (the
    first with its file and key), so one try shows what to drop or pair with --zip."""
    calls = _count_runs(monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_sweep(scenario, ["training.global_batch=8,7,16,9"], out_dir=out, workers=1,
                  progress=False)
    message = str(info.value)
    assert "grid point training.global_batch=7" in message
    assert "2 of the 4 points do not validate" in message
    assert "training.global_batch=9: " in message and "--zip" in message
    assert "training.global_batch=8:" not in message and "=16:" not in message
    assert calls == [] and not out.exists()
    with pytest.raises(ConfigError) as info:  # none valid: the scenario's error, once
        run_sweep(scenario, ["training.global_batch=7,9"], out_dir=out, workers=1,
                  progress=False)
    assert "points do not validate" not in str(info.value) and "--zip" not in str(info.value)


def test_each_points_notes_are_reported_not_only_stored(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A point's notes (the assumptions that move its answer, as `run` prints them) are
    in results.csv, in --json and in the summary, with the points each holds at."""
    from distsim_gpu.scenarios.cli.main import main

    out = tmp_path / "s"
    grid = ["--grid", "compute.gpu=a100-80gb,b200"]
    assert main(["sweep", str(scenario), *grid, "--out", str(out), "--workers", "1",
                 "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    summaries = [json.loads((out / "points" / r["id"] / "summary.json").read_text())
                 for r in data["results"]]
    expected = [[f"{n['kind']} [{n['key']}]: {n['message']}" for n in s["notes"]]
                for s in summaries]
    # NCCL's SMs defaulted at both points (of each GPU's SMs); on Blackwell only, B200's
    # attention rate fitted on GB200 and GB300, its memory rate the generic one and NVLink's
    # efficiency borrowed: notes that the points' resolved configurations keep.
    assert len(expected[0]) == 1 and "communication.nccl_sms" in expected[0][0]
    assert [note.split("]")[0] for note in expected[1]] == [
        "defaulted [compute.attention_efficiency", "defaulted [compute.memory_efficiency",
        "defaulted [communication.nccl_sms", "defaulted [communication.link_efficiency.nvlink"]
    assert [r["notes"] for r in data["results"]] == expected
    assert [r["notes"].split(" | ") if r["notes"] else [] for r in _rows(out)] == expected
    assert main(["sweep", str(scenario), *grid, "--out", str(out), "--workers", "1",
                 "-q"]) == 0
    printed = capsys.readouterr().out
    assert f"note (1 of 2 points: compute.gpu=a100-80gb): {expected[0][0]}" in printed
    assert f"note (1 of 2 points: compute.gpu=b200): {expected[1][3]}" in printed


def test_a_points_notes_share_one_line_of_results_csv(tmp_path: Path) -> None:
    """Several notes of a point stay in its row's one line (tools read CSV by lines)."""
    from distsim_gpu.scenarios.study.sweep_folder import PointResult, write_results_csv

    notes = [{"kind": "defaulted", "key": "a.b", "message": "x, as 1; y"},
             {"kind": "ignored", "key": "c", "message": "z"}]
    point = PointResult("p0", {"k": 1}, "ok", summary={"notes": notes, "time_s": 2.0})
    path = tmp_path / "results.csv"
    write_results_csv(path, ["k"], [point])
    assert path.read_text().splitlines() == [
        "id,k,status,error,notes,time_s",
        "p0,1,ok,,\"defaulted [a.b]: x, as 1; y | ignored [c]: z\",2.0"]


def test_failing_point_is_recorded_and_the_sweep_goes_on(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    result = run_sweep(scenario, ["model.layers=2,100000,4"], out_dir=out, workers=1,
                       progress=False)
    assert [p.status for p in result.points] == ["ok", "failed", "ok"]
    assert "out of memory" in result.points[1].error
    rows = _rows(out)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert "out of memory" in rows[1]["error"] and rows[1]["iteration_time_s"] == ""
    assert (out / "points" / result.points[1].id / "failed.json").exists()
    # A deterministic failure is a result: a restart does not run it again.
    calls = _count_runs(monkeypatch)
    assert run_sweep(scenario, ["model.layers=2,100000,4"], out_dir=out, workers=1,
                     progress=False).failed == 1
    assert calls == []


def test_process_pool_matches_in_process(scenario: Path, tmp_path: Path) -> None:
    grids = ["parallelism.tp=2,4", "parallelism.dp=4,2"]
    local = run_sweep(scenario, grids, zip_=True, out_dir=tmp_path / "one", workers=1,
                      progress=False)
    pool = run_sweep(scenario, grids, zip_=True, out_dir=tmp_path / "pool", workers=2,
                     progress=False)
    assert pool.ran == 2
    assert [_without_wall(dict(p.summary)) for p in pool.points] == [
        _without_wall(dict(p.summary)) for p in local.points]


def test_dask_cluster_matches_local(scenario: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    grids = ["cluster.link_bandwidth=50 GB/s,100 GB/s", "model.layers=2,100000"]
    local = run_sweep(scenario, grids, out_dir=tmp_path / "local", workers=1, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        remote = run_sweep(scenario, grids, out_dir=tmp_path / "dask",
                           workers=Workers(scheduler=cluster.scheduler_address),
                           progress=False)
    assert remote.ran == 4
    assert [(p.id, p.status, p.error) for p in remote.points] == [
        (p.id, p.status, p.error) for p in local.points]
    assert [_without_wall(dict(p.summary or {})) for p in remote.points] == [
        _without_wall(dict(p.summary or {})) for p in local.points]


def test_dask_missing_is_a_clear_error(scenario: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_dask(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("distributed"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(ConfigError, match=r"distsim-gpu\[dask\]"):
        run_sweep(scenario, ["model.layers=2,4"], out_dir=tmp_path / "out",
                  workers=Workers(scheduler="tcp://127.0.0.1:1"), progress=False)


# --------------------------------------------------------------------------- the CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distsim")
    sweep_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_sweep(scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = _parser().parse_args(
        ["sweep", str(scenario), "--grid", 'cluster.link_bandwidth="50 GB/s,100 GB/s"',
         "--grid", "model.layers=2,100000", "--out", str(out), "--workers", "1",
         "--metric", "mfu"])
    assert args.handler(args) == 0
    printed = capsys.readouterr().out
    assert "4 point(s): 2 ok, 2 failed" in printed and "out of memory" in printed
    assert len(_rows(out)) == 4
    args = _parser().parse_args(["sweep", str(scenario), "--grid", "model.layers=2",
                                 "--out", str(out), "--workers", "0"])
    with pytest.raises(ConfigError, match="--workers"):
        args.handler(args)


def test_a_finished_sweep_leaves_no_lock_or_running_mark(scenario: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Through the CLI, without matplotlib: the folder holds the results alone, and the
    output says why sweep.png is missing."""
    from distsim_gpu.scenarios.cli.main import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario), "--grid", "training.global_batch=8,16", "--out",
                 str(out), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "plot skipped: matplotlib is not installed" in captured.err
    assert "sweep.png" not in captured.out
    names = {p.name for p in out.iterdir()}
    assert ".sweep.lock" not in names and ".sweep.running" not in names
    assert "sweep.png" not in names and "results.csv" in names
    # Resuming the finished sweep finds it as it was.
    assert run_sweep(scenario, ["training.global_batch=8,16"], out_dir=out, workers=1,
                     progress=False).ran == 0


def test_an_out_folder_below_a_file_names_the_file(scenario: Path, tmp_path: Path) -> None:
    """``sweep --out FILE/sub`` names the file in the way; it had said "Not a directory"."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match=f"{a_file} is a file, not a directory") as caught:
        run_sweep(scenario, ["training.global_batch=8,16"], out_dir=a_file / "sub",
                  workers=1, progress=False)
    assert caught.value.key == "--out" and a_file.read_text() == "x"


def test_sweep_json_is_one_object_with_every_point(scenario: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the counts and each point's overrides, status and headline metrics; -q
    draws no bar."""
    import json

    from distsim_gpu.scenarios.cli.main import main

    assert main(["sweep", str(scenario), "--grid", "model.layers=2,100000", "--out",
                 str(tmp_path / "s"), "--workers", "1", "--json", "-q"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert (data["points"], data["ran"], data["failed"]) == (2, 2, 1)
    ok, failed = data["results"]
    assert ok["status"] == "ok" and ok["iteration_time_s"] > 0
    assert failed["status"] == "failed" and failed["iteration_time_s"] is None
    assert ok["overrides"] == {"model.layers": 2}
    assert "sweep" not in captured.err  # no progress bar


def test_set_holds_at_every_point_and_is_part_of_the_sweep(scenario: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """--set fixes a key at every point (each point is what `run --set` gives); resuming
    with another --set is refused by name; --allow-oom runs the point memory refuses."""
    from distsim_gpu.scenarios.cli.main import main

    out = tmp_path / "s"
    grid = ["--grid", "model.hidden=512,65536"]  # 65536: 206B parameters
    assert main(["sweep", str(scenario), *grid, "--set", "training.global_batch=16",
                 "--out", str(out), "--workers", "1", "--json", "-q"]) == 0
    ok, failed = json.loads(capsys.readouterr().out)["results"]
    assert ok["iteration_time_s"] == pytest.approx(_single(
        scenario, [("training.global_batch", 16), ("model.hidden", 512)])["iteration_time_s"])
    assert failed["status"] == "failed" and "out of memory" in failed["error"]
    assert main(["sweep", str(scenario), *grid, "--out", str(out), "--workers", "1"]) == 2
    assert "--set training.global_batch=16 -> none" in capsys.readouterr().err
    assert main(["sweep", str(scenario), *grid, "--allow-oom", "--out",
                 str(tmp_path / "oom"), "--workers", "1", "--json", "-q"]) == 0
    statuses = [p["status"] for p in json.loads(capsys.readouterr().out)["results"]]
    assert statuses == ["ok", "ok"]


def test_workers_and_scheduler_together_are_refused(scenario: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    from distsim_gpu.scenarios.cli.main import main

    assert main(["sweep", str(scenario), "--grid", "model.layers=2", "--out",
                 str(tmp_path / "s"), "--workers", "2", "--scheduler", "tcp://h:1"]) == 2
    assert "--workers sizes the local pool" in capsys.readouterr().err


def test_scenario_file_is_read_as_run_reads_it(scenario: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep` names a missing scenario, a directory and an over-large file as `run` does
    (through simcore.fileio's bounded reader), never with a bare OS message; it had read
    the file whole with no bound, so `sweep /dev/zero` ran out of memory in a traceback."""
    from distsim_gpu.scenarios.cli.main import main
    from distsim_gpu.scenarios.study import sweep_folder

    def sweep(path: Path) -> str:
        assert main(["sweep", str(path), "--grid", "model.layers=2", "--out",
                     str(tmp_path / "s"), "--workers", "1", "-q"]) == 2
        return capsys.readouterr().err

    assert "no scenario file here: the path does not exist" in sweep(tmp_path / "none.yaml")
    assert "expected a scenario file, found a directory" in sweep(tmp_path)
    monkeypatch.setattr(sweep_folder, "MAX_YAML_BYTES", len(SCENARIO) - 1)
    assert "scenario file is larger than" in sweep(scenario)
    assert not (tmp_path / "s").exists()
