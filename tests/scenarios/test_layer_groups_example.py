"""The per-layer strategies example (``parallelism.layer_groups``): within its memory
budget, faster than its uniform strategy, named in the summary, read back from its
resolved configuration; a strategy search's candidates stay uniform over the layers."""

from __future__ import annotations

from dataclasses import replace

from distsim_gpu.scenarios.report import format_summary
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import Strategy, with_strategy


def test_the_example_mixes_within_its_budget_and_reads_back(examples_dir) -> None:
    """The example's mix fits its 10 GiB, beats uniform tp 2 and is named in the summary;
    its resolved configuration loads to the same groups; a strategy search's candidates
    are uniform over the layers."""
    scenario = load_scenario(examples_dir / "per-layer-strategies-8-v100.yaml")
    report = run_scenario(scenario)
    assert max(g.peak_memory_bytes for g in report.per_gpu) <= 10 * 2**30
    assert "layers 16×tp1 + 16×tp2" in format_summary(report)
    uniform = run_scenario(scenario.with_run(parallel=replace(scenario.parallel,
                                                              layer_groups=())))
    assert report.iteration_time_s < uniform.iteration_time_s
    again = scenario_from_mapping(scenario.resolved())
    assert again.parallel.layer_groups == scenario.parallel.layer_groups
    candidate = Strategy.on(scenario, tp=8, pp=1, dp=1, micro_batch=4)
    assert with_strategy(scenario, candidate).parallel.layer_groups == ()
