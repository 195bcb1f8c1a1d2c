"""Hostile tables, maps and options of ``distsim validate runs`` end in one clear error.

A CSV field past the csv module's 131,072 characters, a cell that overflows when the map
transforms it, a scenario path longer than a file name may be, ``--workers`` below 1, a
device or a FIFO for the table, an empty time unit, and ``--set`` or ``fit`` on a key a
column already sets: each exits 2 with a ``distsim: error:`` line naming the file, key or
argument, and no traceback.
"""

from __future__ import annotations

import os

import pytest
import yaml

from tests.scenarios.fit.test_validate_runs import BASE, MAP, _write


def _runs(table, map_path, *more):
    return ("validate", "runs", str(table), "--map", str(map_path), "--workers", "1", *more)


def test_a_field_past_the_csv_limit(rejects, tmp_path):
    table, map_path = _write(tmp_path)
    table.write_text(table.read_text() + 'small,8,1,2,4,4,"' + "9" * 140_000 + '"\n')
    err = rejects(*_runs(table, map_path), names="runs.csv:7")
    assert "field larger than field limit" in err and len(err) < 400


@pytest.mark.parametrize(("cell", "says"), [
    ("1e308", "beyond a double's range"),  # * 1e9 (the map's multiply)
    ("9" * 4000, "is not a number"),  # an int with no float: read as inf
    ("9" * 5000, "is not a number"),  # past Python's digits: read as inf
    ("inf", "is not a number"),
])
def test_a_transformed_cell_that_overflows(rejects, tmp_path, cell, says):
    columns = dict(MAP["columns"], gpus=[{"key": "cluster.gpus", "multiply": 1e9,
                                          "round": "up"}])
    table, map_path = _write(tmp_path, map_changes={"columns": columns})
    lines = table.read_text().splitlines()
    lines[1] = lines[1].replace(",8,", f",{cell},", 1)
    table.write_text("\n".join(lines) + "\n")
    err = rejects(*_runs(table, map_path), names="runs.csv:2")
    assert says in err and "'gpus'" in err and len(err) < 400


def test_a_scenario_path_longer_than_a_file_name(rejects, tmp_path):
    table, map_path = _write(tmp_path, map_changes={"scenario": "x" * 300 + ".yaml"})
    err = rejects(*_runs(table, map_path), names="map.yaml:1: scenario")
    assert "cannot use the scenario path" in err and len(err) < 400


@pytest.mark.parametrize("workers", ["-1", "0"])
def test_workers_below_one(rejects, tmp_path, workers):
    table, map_path = _write(tmp_path)
    err = rejects("validate", "runs", str(table), "--map", str(map_path), "--workers",
                  workers, names="--workers")
    assert "must be a whole number >= 1" in err and "leave --workers out" in err


@pytest.mark.parametrize("command", [
    ("sweep", "{scenario}", "--grid", "training.micro_batch=1,2", "--out", "{out}"),
    ("search", "{scenario}", "--out", "{out}"),
])
@pytest.mark.parametrize("workers", ["-1", "0"])
def test_workers_below_one_in_every_command(rejects, tmp_path, command, workers):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    argv = [a.format(scenario=tmp_path / "base.yaml", out=tmp_path / "out") for a in command]
    rejects(*argv, "--workers", workers, names="--workers")
    assert not (tmp_path / "out").exists()


def test_the_table_is_read_with_the_bounded_reader(rejects, tmp_path):
    _table, map_path = _write(tmp_path)
    err = rejects(*_runs("/dev/zero", map_path), names="/dev/zero")
    assert "found a device, pipe or socket" in err
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)  # opening it would block until a writer came
    assert "found a device, pipe or socket" in rejects(*_runs(fifo, map_path), names="fifo.csv")


@pytest.mark.parametrize("unit", ["", "   ", None, 5])
def test_an_empty_or_absent_unit_is_not_seconds(rejects, tmp_path, unit):
    table, map_path = _write(tmp_path, map_changes={"measured": {"column": "time (ms)",
                                                                 "unit": unit}})
    assert "unknown time unit" in rejects(*_runs(table, map_path),
                                          names=": measured.unit")


def test_set_on_a_key_a_column_sets(rejects, tmp_path):
    table, map_path = _write(tmp_path)
    err = rejects(*_runs(table, map_path, "--set", "parallelism.tp=8"),
                  names="--set: parallelism.tp")
    assert "column 'tp'" in err
    err = rejects(*_runs(table, map_path, "--set", "parallelism={tp: 8}"),
                  names="--set: parallelism")
    assert "column 'tp'" in err


@pytest.mark.parametrize(("section", "value"), [
    ("fit", {"model.layers": {"low": 1, "high": 8}}),
    ("set", {"parallelism.tp": 4}),
])
def test_map_set_or_fit_on_a_key_a_column_sets(rejects, tmp_path, section, value):
    table, map_path = _write(tmp_path, map_changes={section: value})
    key = next(iter(value))
    err = rejects(*_runs(table, map_path), names="map.yaml:")
    assert f"{section}.{key}" in err and "would be ignored" in err


def test_keys_beside_the_columns_still_run(capsys, tmp_path):
    from distsim_gpu.scenarios.cli.main import main

    table, map_path = _write(tmp_path, map_changes={"set": {"training.recompute": "full"}})
    assert main([*_runs(table, map_path, "--set", "compute.matmul_efficiency=0.7",
                        "--json")]) == 0, capsys.readouterr().err


def test_a_row_with_fewer_samples_than_replicas_is_no_division_by_zero(rejects, tmp_path):
    # dp of 10**30 leaves no micro-batch per replica: the consistency check skips the row
    # (it divided by its zero slots) and the row's own simulation says what is wrong.
    table, map_path = _write(tmp_path)
    lines = table.read_text().splitlines()
    for i in range(1, len(lines)):
        cells = lines[i].split(",")
        cells[4] = "1" + "0" * 29  # the dp column
        lines[i] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    err = rejects(*_runs(table, map_path), names="runs.csv")
    assert "no row simulates" in err and "the cluster has 8 GPUs" in err
