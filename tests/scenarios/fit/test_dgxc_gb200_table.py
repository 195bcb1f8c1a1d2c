"""NVIDIA's GB200 NVL72 tables as ``distsim validate runs`` reads them: the table builder
(validation/dgxc/build_gb200_table.py) against the shared source, the shipped table's
invariants, and the map (scenarios/examples/validation/dgxc-gb200.yaml) turning its rows into
scenarios."""

from __future__ import annotations

import csv

import pytest
from distsim_gpu.scenarios.fit.runs_table import read_map, read_runs
from distsim_gpu.scenarios.fit.validate_runs import simulate_rows
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.workloads.specs.models import get_model

from tests.conftest import REPO_ROOT, _shared_data_dir, load_script

TABLE = REPO_ROOT / "validation" / "dgxc" / "dgxc-gb200.csv"
MAP = REPO_ROOT / "scenarios" / "examples" / "validation" / "dgxc-gb200.yaml"


build_gb200_table = load_script("validation/dgxc/build_gb200_table.py", "dgxc_build_gb200_table")


def _shipped() -> list[dict[str, str]]:
    with open(TABLE, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_every_shipped_row_splits_its_gpus_and_batch_whole_64_per_rack():
    rows = _shipped()
    assert len(rows) == 24
    for row in rows:
        n = {k: int(row[k]) for k in ("gpus", "tp", "pp", "cp", "ep", "vp", "dp", "mbs",
                                      "gbs", "layers")}
        assert n["gpus"] == n["tp"] * n["pp"] * n["cp"] * n["dp"], row
        assert n["gpus"] % 64 == 0 and n["dp"] % n["ep"] == 0, row
        assert n["gbs"] % (n["mbs"] * n["dp"]) == 0, row
        chunks = n["pp"] * n["vp"]
        assert (n["layers"] + (2 if row["partition"] == "embedding" else 0)) % chunks == 0
        assert n["layers"] == get_model(row["model"]).layers
        assert int(row["seq_len"]) == get_model(row["model"]).seq_len


def test_the_shipped_table_has_both_precisions_of_every_model_at_three_scales():
    rows = _shipped()
    cells = {(r["model"], r["precision"], int(r["gpus"]), int(r["gbs"])) for r in rows}
    assert len(cells) == len(rows)
    for model in ("llama3.1-405b", "grok-1", "nemotron4-340b"):
        for precision in ("bf16", "fp8"):
            assert {g for m, p, g, _ in cells if (m, p) == (model, precision)} == {
                128, 256, 512}


def test_the_shipped_table_is_what_the_builder_makes_of_the_source(tmp_path):
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    out = tmp_path / "table.csv"
    source = data / "training" / "dgxc_benchmarking"
    assert build_gb200_table.main(["--data", str(source), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")


def _scenario(runs_map, row):
    return scenario_from_mapping(runs_map.base, source=runs_map.base_source,
                                 overrides=row.overrides, base_dir=runs_map.base_dir)


def test_the_map_turns_every_row_into_a_gb200_scenario_of_64_gpus_per_rack():
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    assert len(rows) == 24
    for row, shipped in zip(rows, _shipped(), strict=True):
        scenario = _scenario(runs_map, row)
        assert scenario.num_gpus == int(shipped["gpus"])
        assert scenario.topology.config["nvlink_domain"] == 64
        assert scenario.topology.config["preset"] == "gb200-nvl72"
        assert scenario.parallel.ep == int(shipped["ep"])
    grok = _scenario(runs_map, rows[0])
    assert (grok.model.name, grok.model.experts, grok.parallel.tp, grok.parallel.ep,
            grok.parallel.dp) == ("grok-1", 8, 4, 8, 32)


def test_the_smallest_gb200_row_simulates():
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    smallest = next(r for r, s in zip(rows, _shipped(), strict=True)
                    if (s["model"], s["precision"], s["gpus"], s["gbs"]) == (
                        "nemotron4-340b", "fp8", "128", "32"))
    (result,) = simulate_rows(runs_map, [smallest])
    assert result.predicted_s is not None and result.predicted_s > 0, result.failure
