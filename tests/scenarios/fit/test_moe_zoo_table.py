"""Megatron-Core's MoE model zoo's Qwen3-235B-A22B rows (validation/moe_zoo): the map turns
each measured strategy into its scenario (dispatcher, recomputation, overlap, FSDP), and
the shipped table holds the published figures."""

from __future__ import annotations

import csv

from distsim_gpu.scenarios.fit.runs_table import read_map, read_runs
from distsim_gpu.scenarios.scenario import scenario_from_mapping

from tests.conftest import REPO_ROOT

MAP = REPO_ROOT / "scenarios" / "examples" / "validation" / "moe-zoo-qwen3-h100.yaml"
TABLE = REPO_ROOT / "validation" / "moe_zoo" / "qwen3-235b-h100.csv"


def test_the_map_turns_every_row_into_its_strategy():
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    scenarios = [scenario_from_mapping(runs_map.base, source=runs_map.base_source,
                                       overrides=row.overrides, base_dir=runs_map.base_dir)
                 for row in rows]
    assert [r.measured_s for r in rows] == [19.7, 17.6, 17.6, 24.2, 29.0]
    for scenario in scenarios:
        assert scenario.num_gpus == 256 and scenario.model.name == "qwen3-235b-a22b"
        assert scenario.parallel.expert_tp == 1 and scenario.training.global_batch == 2048
    first, overlapped, fsdp, nccl, wide = scenarios
    assert first.training.recompute_modules == ("layernorm", "moe_act")
    assert first.comm.all_to_all == "deepep" and not first.parallel.fb_overlap
    assert overlapped.parallel.fb_overlap
    assert fsdp.parallel.fsdp and fsdp.training.recompute == "full"
    assert fsdp.training.micro_batch == 4 and fsdp.parallel.pp == 1
    assert nccl.comm.all_to_all == "flat" and (nccl.parallel.pp, nccl.parallel.interleave) == (
        32, 3)
    assert (wide.parallel.tp, wide.parallel.ep, wide.training.recompute) == (4, 8, "none")


def test_the_shipped_rows_are_the_published_configurations():
    with TABLE.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:  # tp·pp·dp = 256; ep (whole experts) divides a stage's tp·dp
        tp, pp, dp, ep = (int(row[k]) for k in ("tp", "pp", "dp", "ep"))
        assert tp * pp * dp == 256 and (tp * dp) % ep == 0
        # global batch = micro-batch · dp · gradient accumulation (the zoo's GA column)
        assert 2048 % (int(row["mbs"]) * dp) == 0
