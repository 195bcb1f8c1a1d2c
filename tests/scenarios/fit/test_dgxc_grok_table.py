"""NVIDIA's Grok-1 H100 table as ``distsim validate runs`` reads it: the README parser of
validation/dgxc/build_grok_table.py on a README written here, the shipped table against
the shared source, and the map turning its rows into accepted scenarios."""

from __future__ import annotations

import csv

import pytest
from distsim_gpu.scenarios.fit.runs_table import read_map, read_runs
from distsim_gpu.scenarios.fit.validate_runs import simulate_rows
from distsim_gpu.scenarios.scenario import scenario_from_mapping

from tests.conftest import REPO_ROOT, _shared_data_dir, load_script

TABLE = REPO_ROOT / "validation" / "dgxc" / "dgxc-grok-h100.csv"
MAP = REPO_ROOT / "scenarios" / "examples" / "validation" / "dgxc-grok-h100.yaml"

README = """\
**GB200**:

| GPUs | SeqLen | Layers | TP  | PP  | CP  | EP  | ETP | DP  | VP  | MBS | GBS  | GA  |
|------|:------:|:------:|:---:|:---:|:---:|:---:|:---:|:---:|:---:|:---:|:----:|:---:|
| 128  | 8192   | 64     | 4   | 1   | 1   | 8   | 4   | 32  | 1   | 1   | 256  | 8   |

**H100**:

| GPUs | SeqLen | Layers | TP | PP | CP | EP | DP | VP | MBS | GBS  | GA  |
|------|:------:|:------:|:--:|:--:|:--:|:--:|:--:|:--:|:---:|:----:|:---:|
| 8    | 4096   | 2      |  4 | 1  | 1  | 2  | 1  | NA | 1   | 1024 | 128 |
| 64   | 8192   | 8      |  4 | 1  | 2  | 8  | 1  | NA | 1   | 1024 | 128 |

| Grok1 314b BF16 | 128x GB200 GPUs |
|---|:---:|
| Training step time (seconds per step) | 7.325 |

| Grok 1 314b BF16 | Throughput on 8x H100 GPUs | Throughput on 64x H100 GPUs |
|---|:---:|:---:|
| Training step time (seconds per step) | 24.03 | 20.64
"""


build_grok_table = load_script("validation/dgxc/build_grok_table.py", "dgxc_build_grok_table")


def test_a_readme_becomes_h100_rows_with_dp_from_the_gpus(tmp_path) -> None:
    """The GB200 table is skipped; dp = GPUs/(tp·pp·cp), not the README's dp/ep column;
    no ETP column means Megatron-Core's default, tp."""
    path = tmp_path / "2025-05-21_v24.11.1__35a9aecc_grok1_README_314b.md"
    path.write_text(README, encoding="utf-8")
    rows = build_grok_table.rows_of(path, build_grok_table.release_of(path.name))
    assert [(r.gpus, r.dp, r.ep, r.expert_tp, r.cp, r.step_time_s) for r in rows] == [
        (8, 2, 2, 4, 1, 24.03), (64, 8, 8, 4, 2, 20.64)]
    assert {r.release for r in rows} == {"v24.11.1"}


def test_the_shipped_table_is_what_the_builder_gives() -> None:
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("needs ../shared/data")
    raw = data / "training" / "dgxc_benchmarking" / "raw"
    with open(TABLE, newline="", encoding="utf-8") as handle:
        shipped = list(csv.DictReader(handle))
    built = build_grok_table.build(raw)
    assert len(built) == len(shipped) == 40
    assert [float(r["step_time_s"]) for r in shipped] == [r.step_time_s for r in built]


def test_the_map_turns_every_row_into_its_strategy() -> None:
    """Every row's scenario has the row's GPUs, expert layout and recipe settings."""
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    with open(TABLE, newline="", encoding="utf-8") as handle:
        shipped = list(csv.DictReader(handle))
    assert len(rows) == 40
    for row, cells in zip(rows, shipped, strict=True):
        scenario = scenario_from_mapping(runs_map.base, source=runs_map.base_source,
                                         overrides=row.overrides, base_dir=runs_map.base_dir)
        par = scenario.parallel
        assert scenario.num_gpus == int(cells["gpus"])
        assert (par.cp, par.ep, par.etp) == (int(cells["cp"]), int(cells["ep"]),
                                             int(cells["expert_tp"]))
        assert (scenario.model.name, scenario.model.vocab) == ("grok-1", 128256)


def test_the_smallest_row_simulates() -> None:
    runs_map = read_map(MAP)
    (result,) = simulate_rows(runs_map, read_runs(TABLE, runs_map)[:1])
    assert result.predicted_s is not None and result.predicted_s > 0, result.failure
