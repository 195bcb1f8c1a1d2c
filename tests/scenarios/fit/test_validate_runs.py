"""``distsim validate runs``: a table of measured runs and a map -> every row simulated,
errors, Spearman within groups, and a cross-validated fit of the compute knobs.  Malformed
maps and tables are file:line errors."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.fitting import k_folds
from distsim_gpu.scenarios.fit.validate_runs import (
    ColumnRule,
    read_map,
    read_runs,
    spearman,
    summarise,
    validate_runs,
    validate_scenarios,
)
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.simcore.yamlfile import key_lines, line_of
from hypothesis import given, settings
from hypothesis import strategies as st

# A small job on one switch of A100s: each row simulates in a few hundredths of a second.
BASE = {"cluster": {"preset": "switch", "gpus": 8},
        "model": {"name": "gpt", "layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024,
                  "vocab": 32000},
        "parallelism": {"tp": 2, "pp": 1, "dp": 4},
        "training": {"micro_batch": 1, "global_batch": 16, "recompute": "none"},
        "compute": {"gpu": "a100-80gb"}}
MAP = {"scenario": "base.yaml",
       "measured": {"column": "time (ms)", "unit": "ms"},
       "group_by": "size",
       "columns": {"gpus": [{"key": "cluster.gpus", "at_least": 1}],
                   "mb": "training.micro_batch", "tp": "parallelism.tp",
                   "dp": "parallelism.dp", "layers": "model.layers"},
       "fit": {"compute.matmul_efficiency": {"low": 0.3, "high": 1.0}}}
ROWS = [(8, 1, 2, 4, 4), (8, 2, 2, 4, 4), (8, 1, 4, 2, 4), (4, 1, 2, 2, 8), (8, 2, 1, 8, 8)]


def _write(tmp_path: Path, rows=ROWS, times_ms=None, map_changes=None, header=None) -> tuple:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    data = {**MAP, **(map_changes or {})}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    times_ms = times_ms or [100.0 + i for i in range(len(rows))]
    lines = [header or "size,gpus,mb,tp,dp,layers,time (ms)"]
    lines += [f"{'small' if r[4] == 4 else 'big'},{','.join(map(str, r))},{t}"
              for r, t in zip(rows, times_ms)]
    (tmp_path / "runs.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "runs.csv", tmp_path / "map.yaml"


def _scenario(row, **compute) -> dict:
    """BASE with one row's GPUs, micro-batch, tp, dp and layers (and compute knobs)."""
    gpus, mb, tp, dp, layers = row
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["cluster"]["gpus"] = gpus
    data["training"]["micro_batch"] = mb
    data["parallelism"].update(tp=tp, dp=dp)
    data["model"]["layers"] = layers
    data["compute"].update(compute)
    return data


def _simulated_s(row, **compute) -> float:
    return run_scenario(scenario_from_mapping(_scenario(row, **compute))).iteration_time_s


def test_every_row_is_its_scenario_simulated(tmp_path) -> None:
    table, map_path = _write(tmp_path)
    report = validate_runs(table, map_path, workers=1)
    assert [r.row.line for r in report.results] == [2, 3, 4, 5, 6]
    for r, row, ms in zip(report.results, ROWS, [100, 101, 102, 103, 104]):
        assert r.row.measured_s == pytest.approx(ms / 1e3)
        assert r.predicted_s == pytest.approx(_simulated_s(row), rel=1e-12)
        assert r.error_pct == pytest.approx(100 * (r.predicted_s - ms / 1e3) / (ms / 1e3))
    summary = summarise(report.results)
    errors = [abs(r.error_pct) for r in report.results]
    assert summary["mean_abs_error_pct"] == pytest.approx(sum(errors) / 5)
    assert summary["max_abs_error_pct"] == pytest.approx(max(errors))
    assert set(summary["spearman"]) == {"small", "big"}
    assert summary["spearman"]["big"] is None  # two rows: no rank correlation (JSON null)
    json.loads(json.dumps(summary), parse_constant=_no_nan)  # strict JSON: no NaN


def _no_nan(name: str) -> None:
    raise AssertionError(f"{name} in the JSON")


def test_rows_carry_their_overrides_and_groups(tmp_path) -> None:
    table, map_path = _write(tmp_path)
    rows = read_runs(table, read_map(map_path))
    assert dict(rows[3].overrides)["cluster.gpus"] == 4
    assert dict(rows[4].overrides)["training.micro_batch"] == 2
    assert rows[0].group == "small" and rows[3].group == "big"


@pytest.mark.parametrize(("rule", "cell", "value"), [
    (ColumnRule("g", "cluster.nodes", divide=8, round="up"), 12, 2),
    (ColumnRule("g", "cluster.nodes", divide=8, round="up", at_least=1), 2, 1),
    (ColumnRule("g", "cluster.nodes", divide=8, round="down", at_least=1), 12, 1),
    (ColumnRule("g", "x", multiply=1e-3), 1500, 1.5),
    (ColumnRule("g", "x", at_most=8), 16, 8),
    (ColumnRule("s", "parallelism.schedule", values={"PipeDream": "1f1b"}), "PipeDream",
     "1f1b"),
    (ColumnRule("s", "model.name"), "gpt", "gpt"),
])
def test_column_transforms(rule, cell, value) -> None:
    assert rule.apply(cell, "t.csv:2") == value


def test_a_value_the_lookup_lacks_is_an_error() -> None:
    rule = ColumnRule("s", "parallelism.schedule", values={"PipeDream": "1f1b"})
    with pytest.raises(DistsimError, match=r"t\.csv:2: column 's': no value for 'GPipe'"):
        rule.apply("GPipe", "t.csv:2")


def test_a_fit_recovers_the_gemm_efficiency_the_runs_were_made_with(tmp_path) -> None:
    """Measured times simulated at matmul_efficiency 0.6: the fit, from the default 0.8,
    finds 0.6 and its cross-validated predictions match."""
    rows = ROWS[:4]
    times_ms = [1e3 * _simulated_s(row, matmul_efficiency=0.6) for row in rows]
    table, map_path = _write(tmp_path, rows, times_ms)
    report = validate_runs(table, map_path, fit=True, folds=2, workers=1)
    assert report.fit is not None
    assert report.fit.start == {"compute.matmul_efficiency": 0.8}
    assert report.fit.values["compute.matmul_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert summarise(report.fit.fitted)["max_abs_error_pct"] < 1.0
    assert summarise(report.fit.cross_validated)["max_abs_error_pct"] < 1.0
    assert summarise(report.results)["mean_abs_error_pct"] > 5.0  # the fit did something


def test_a_fit_starts_a_defaulted_figure_at_its_default(tmp_path) -> None:
    """NVLink's efficiency and NCCL's SMs stay out of a resolved scenario where it left
    them out (so that its runs say they assumed them); a fit of one still starts at the
    figure the run used, A100's NVLink 0.78 and NCCL's 16 SMs."""
    fit = {"communication.link_efficiency.nvlink": {"low": 0.5, "high": 0.9},
           "communication.nccl_sms": {"low": 0, "high": 32}}
    table, map_path = _write(tmp_path, ROWS[:2], map_changes={"fit": fit})
    report = validate_runs(table, map_path, fit=True, folds=2, workers=1)
    assert report.fit is not None
    assert report.fit.start == {"communication.link_efficiency.nvlink": 0.78,
                                "communication.nccl_sms": 16}


def test_scenarios_a_script_built_validate_and_fit_as_a_tables_rows(tmp_path) -> None:
    """validate_scenarios (the torchtitan and BLOOM runners): whole scenario mappings
    with their measured seconds, the same recovery of the efficiency they were made with."""
    runs = [(f"mb{row[1]} tp{row[2]}", "small" if row[4] == 4 else "big", _scenario(row),
             _simulated_s(row, matmul_efficiency=0.6)) for row in ROWS[:4]]
    plain = validate_scenarios(runs, source="script", base_dir=str(tmp_path))
    assert plain.fit is None and plain.results[0].row.label == "mb1 tp2"
    assert summarise(plain.results)["mean_abs_error_pct"] > 5.0
    fitted = validate_scenarios(runs, source="script", base_dir=str(tmp_path), folds=2,
                                fit={"compute.matmul_efficiency": (0.3, 1.0, False)})
    assert fitted.fit is not None
    assert fitted.fit.values["compute.matmul_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert summarise(fitted.fit.cross_validated)["max_abs_error_pct"] < 1.0
    for folds in (1, 0, True, 2.5):  # refused before any row runs
        with pytest.raises(DistsimError, match=r"folds: must be a whole number >= 2"):
            validate_scenarios(runs, source="script", base_dir=str(tmp_path), folds=folds,
                               fit={"compute.matmul_efficiency": (0.3, 1.0, False)})


def test_the_cli_prints_the_table_and_writes_the_fragment(tmp_path, capsys) -> None:
    rows = ROWS[:3]
    times_ms = [1e3 * _simulated_s(row, matmul_efficiency=0.7) for row in rows]
    table, map_path = _write(tmp_path, rows, times_ms)
    out = tmp_path / "fitted.yaml"
    status = main(["validate", "runs", str(table), "--map", str(map_path), "--workers", "1",
                   "--fit", "--folds", "3", "-o", str(out)])
    text = capsys.readouterr().out
    assert status == 0
    assert "uncalibrated: 3/3 rows" in text and "3-fold cross-validated" in text
    fragment = yaml.safe_load(out.read_text())
    assert fragment["compute"]["matmul_efficiency"] == pytest.approx(0.7, rel=0.03)
    status = main(["validate", "runs", str(table), "--map", str(map_path), "--workers", "1",
                   "--json", "--every", "2"])
    data = json.loads(capsys.readouterr().out)
    assert [row["line"] for row in data["rows"]] == [2, 4]


def test_out_needs_fit(tmp_path, capsys) -> None:
    table, map_path = _write(tmp_path)
    status = main(["validate", "runs", str(table), "--map", str(map_path), "--out", "x.yaml"])
    assert status != 0
    assert "-o: -o writes the fitted knobs: it needs --fit" in capsys.readouterr().err


def _error(tmp_path, **kwargs) -> str:
    table, map_path = _write(tmp_path, **kwargs)
    with pytest.raises(DistsimError) as info:
        read_runs(table, read_map(map_path))
    return str(info.value)


@pytest.mark.parametrize(("change", "key", "expected"), [
    ({"columns": {"gpus": {"key": "cluster.gpus", "divde": 8}}}, "columns.gpus.divde",
     "columns.gpus.divde: unknown key (did you mean 'divide'?"),
    ({"columns": {"gpus": {"key": "cluster.gpus", "round": "sideways"}}},
     "columns.gpus.round", "columns.gpus.round: unknown round 'sideways' (valid: down, "
     "nearest, up)"),
    ({"columns": {"gpus": {"key": "cluster.gpus", "divide": 0}}}, "columns.gpus.divide",
     "columns.gpus.divide: must be a "),
    ({"columns": {"gpus": {"divide": 8}}}, "columns.gpus", "columns.gpus: needs 'key'"),
    ({"measured": {"column": "time (ms)", "unit": "fortnights"}}, "measured.unit",
     "measured.unit: unknown time unit 'fortnights'"),
    ({"fit": {"compute.matmul_efficiency": {"low": 1.0, "high": 0.3}}},
     "fit.compute.matmul_efficiency",
     "fit.compute.matmul_efficiency: bounds [1.0, 0.3] are empty"),
    ({"scenario": "nowhere.yaml"}, "scenario", "scenario: no scenario file 'nowhere.yaml'"),
    ({"colums": {}}, "colums", "colums: unknown key (did you mean 'columns'?"),
    ({"group_by": "model"}, "group_by", "group_by: column 'model' is not in"),
    ({"fit": {"compute.launch_overhead": {"low": 1e-7, "high": 1e-4, "log": "no"}}},
     "fit.compute.launch_overhead.log", "fit.compute.launch_overhead.log: must be true or"),
    ({"columns": {"nodes": "cluster.nodes"}}, "columns.nodes",
     "columns.nodes: column 'nodes' is not in"),
])
def test_a_malformed_map_names_its_line(tmp_path, change, key, expected) -> None:
    message = _error(tmp_path, map_changes=change)
    line = line_of(key, key_lines((tmp_path / "map.yaml").read_text()))
    assert line is not None
    assert message.startswith(f"{tmp_path / 'map.yaml'}:{line}: {expected}")


@pytest.mark.parametrize(("table", "expected"), [
    ("size,gpus,mb,tp,dp,layers,time (ms)\nsmall,8,1,2,4,4\n",
     "runs.csv:2: 6 cells, the header has 7"),
    ("size,gpus,mb,tp,dp,layers,time (ms)\nsmall,8,1,2,4,4,fast\n",
     "runs.csv:2: column 'time (ms)': the measured time must be a positive number, got "
     "'fast'"),
    ("size,gpus,mb,tp,dp,layers,time (ms)\nsmall,8,1,2,4,4,100\nbig,eight,1,2,4,4,100\n",
     "runs.csv:3: column 'gpus': 'eight' is not a number"),
    ("size,gpus,mb,tp,dp,layers,time (ms)\nsmall,inf,1,2,4,4,100\n",
     "runs.csv:2: column 'gpus': inf is not a number"),
    ("size,gpus,mb,tp,dp,layers,time (ms)\nsmall,8,,2,4,4,100\n",
     "runs.csv:2: column 'mb' is empty"),
    ("size,gpus,mb,tp,dp,layers,time (ms)\n", "runs.csv: the table has a header but no runs"),
    ("", "runs.csv: the table is empty"),
    ("size,gpus,mb,tp,tp,layers,time (ms)\n", "runs.csv:1: column 'tp' appears twice"),
])
def test_a_malformed_table_names_its_line(tmp_path, table, expected) -> None:
    csv_path, map_path = _write(tmp_path)
    csv_path.write_text(table)
    with pytest.raises(DistsimError) as info:
        read_runs(csv_path, read_map(map_path))
    assert str(info.value).startswith(str(tmp_path / expected))


def test_blank_lines_before_the_header_are_skipped(tmp_path) -> None:
    """A blank first line had made the whole table "empty"; rows keep their file lines."""
    csv_path, map_path = _write(tmp_path)
    body = csv_path.read_text()
    csv_path.write_text("\n \n" + body)
    runs_map = read_map(map_path)
    shifted = read_runs(csv_path, runs_map)
    csv_path.write_text(body)
    plain = read_runs(csv_path, runs_map)
    assert [r.line for r in shifted] == [r.line + 2 for r in plain]
    assert [(r.overrides, r.measured_s) for r in shifted] == [
        (r.overrides, r.measured_s) for r in plain]
    csv_path.write_text("\nsize,gpus,mb,tp,tp,layers,time (ms)\n")
    with pytest.raises(DistsimError, match=r"runs\.csv:2: column 'tp' appears twice"):
        read_runs(csv_path, runs_map)


def test_a_row_that_fails_is_reported_and_the_rest_run(tmp_path) -> None:
    rows = [*ROWS[:2], (8, 1, 3, 4, 4)]  # tp 3 does not make 8 GPUs with dp 4
    table, map_path = _write(tmp_path, rows)
    report = validate_runs(table, map_path, workers=1)
    failed = report.results[2]
    assert failed.predicted_s is None and "tp·pp·dp = 3·1·4 = 12" in failed.failure
    assert summarise(report.results)["simulated"] == 2


def test_a_bad_cell_is_named_by_its_column(tmp_path) -> None:
    """A cell the scenario refuses names the table's column; it was called "--set"."""
    table, map_path = _write(tmp_path, ROWS[:2])
    table.write_text(table.read_text().replace("small,8,2,", "small,8,two,"))
    failed = validate_runs(table, map_path, workers=1).results[1]
    assert failed.predicted_s is None
    assert failed.failure.startswith("column 'mb': training.micro_batch: ")
    assert "--set" not in failed.failure


@pytest.fixture(scope="module")
def vtrain_dir(repo_root) -> Path:
    """vTrain's measured tables (shared/data/training/vtrain); skipped where absent."""
    found = repo_root.parent / "shared" / "data" / "training" / "vtrain"
    if not (found / "ground_truth_multi.csv").is_file():
        pytest.skip("shared/data/training/vtrain is not present")
    return found


def test_the_vtrain_map_reads_the_real_table(repo_root, vtrain_dir) -> None:
    runs_map = read_map(repo_root / "scenarios/examples/validation/vtrain-multi.yaml")
    rows = read_runs(vtrain_dir / "ground_truth_multi.csv", runs_map)
    assert len(rows) == 109
    assert {row.group for row in rows} == {"3.6", "18.4", "39.1", "175"}
    first = dict(rows[0].overrides)
    assert (first["cluster.nodes"], first["parallelism.dp"], rows[0].measured_s) == (
        8, 64, pytest.approx(3.5665))


def test_spearman_by_hand() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ranks 1, 2.5, 2.5, 4 against 1, 2, 3, 4: 4.5 / sqrt(4.5 · 5).
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.1, 100, allow_nan=False), min_size=3, max_size=12, unique=True))
def test_spearman_sees_only_the_order(values) -> None:
    """An increasing transform leaves it 1, a decreasing one -1 (exact ones: a power of
    two and a sign, so that no two values round together), and a reversed pairing of
    the sorted values -1."""
    assert spearman(values, [4.0 * v for v in values]) == pytest.approx(1.0)
    assert spearman(values, [-v for v in values]) == pytest.approx(-1.0)
    ordered = sorted(values)
    assert spearman(ordered, ordered[::-1]) == pytest.approx(-1.0)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 10))
def test_k_folds_test_every_sample_once(n, k) -> None:
    if k > n:
        with pytest.raises(ValueError):
            k_folds(list(range(n)), k)
        return
    folds = k_folds(list(range(n)), k)
    tested = sorted(i for _train, test in folds for i in test)
    assert tested == list(range(n))
    for train, test in folds:
        assert sorted(train + test) == list(range(n)) and not set(train) & set(test)


def test_spearman_under_three_rows_says_why_there_is_none(tmp_path, capsys) -> None:
    table, map_path = _write(tmp_path)  # small: 3 rows, big: 2
    assert main(["validate", "runs", str(table), "--map", str(map_path), "--workers",
                 "1"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "Spearman" in x]
    assert "big n/a (2 rows)" in line and "nan" not in line
    assert re.search(r"small -?[01]\.\d\d", line)



def test_validate_runs_counts_the_rows_on_a_terminal_and_is_quiet_otherwise(
        tmp_path, monkeypatch, capsys) -> None:
    """A table of many rows runs for minutes: on a terminal the progress line counts the
    rows done; with -q (or in a pipe) nothing but the report is written."""
    from distsim_gpu.simcore import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    drawn: list[str] = []
    real = progress.Reporter.stage

    def stage(self, done: int, total: int, what: str = "") -> None:
        drawn.append(f"{done}/{total} {what}")
        real(self, done, total, what)

    monkeypatch.setattr(progress.Reporter, "stage", stage)
    monkeypatch.setattr("sys.stderr", Terminal())
    table, map_path = _write(tmp_path)
    argv = ["validate", "runs", str(table), "--map", str(map_path), "--workers", "1"]
    assert main(argv) == 0
    assert drawn[-1] == f"{len(ROWS)}/{len(ROWS)} rows"
    drawn.clear()
    assert main([*argv, "-q"]) == 0
    assert drawn == []
