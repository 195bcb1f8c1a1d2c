"""torchtitan's published Llama 3.1 throughput (shared/data/training/torchtitan) on a few
rows through validation/torchtitan/run_torchtitan.py's own row-to-scenario mapping: the
errors docs/validation.md reports, pinned so that a change to the Hopper compute model (the
FlashAttention-2 rate, the 500 W power limit, per-op checkpointing) that moves them shows."""

from __future__ import annotations

import importlib.util

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping

from tests.conftest import REPO_ROOT, _shared_data_dir

SCRIPT = REPO_ROOT / "validation" / "torchtitan" / "run_torchtitan.py"


@pytest.fixture(scope="module")
def predicted() -> dict[tuple[str, str, str], tuple[float, float]]:
    """(table, GPUs, technique) -> (measured, predicted) tokens/s per GPU."""
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    spec = importlib.util.spec_from_file_location("run_torchtitan", SCRIPT)
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    out = {}
    for row in runner.read_rows(data / "training" / "torchtitan", {"Table1", "h200"}):
        scenario = scenario_from_mapping(runner.scenario_for(row), source=str(SCRIPT),
                                         base_dir=SCRIPT.parent)
        report = run_scenario(scenario, allow_oom=True)
        out[(row["source_table"], row["gpus"], row["technique"])] = (
            float(row["tps_per_gpu"]), report.tokens_per_s / report.num_gpus)
    return out


def _error(pair: tuple[float, float]) -> float:
    measured, predicted = pair
    return 100 * (predicted / measured - 1)


@pytest.mark.parametrize("key, low, high", [
    (("Table1", "8", "FSDP"), 30, 40),
    (("Table1", "8", "FSDP+torch.compile"), 19, 29),
    (("Table1", "8", "FSDP+torch.compile+Float8"), 14, 24),
    (("h200", "32", "FSDP+torch.compile+Float8"), 11, 21),
])
def test_rows_stay_where_the_docs_put_them(predicted, key, low, high):
    assert low < _error(predicted[key]) < high


def test_float8_gains_over_bf16_and_the_700_w_h200_beats_the_500_w_h100(predicted):
    bf16 = predicted[("Table1", "8", "FSDP+torch.compile")][1]
    fp8 = predicted[("Table1", "8", "FSDP+torch.compile+Float8")][1]
    h200 = predicted[("h200", "32", "FSDP+torch.compile+Float8")][1]
    assert 1.1 < fp8 / bf16 < 1.3  # measured 1.28; the peaks' 2x is not what runs show
    assert h200 > 1.15 * fp8  # measured 1.28: 700 W clocks and HBM3e
