"""The MoE recipe examples load and their strategies pass every check: Grok-1 as NVIDIA's
H100 recipe runs it (EP over CP, whole experts) and DeepSeek-V3 as its report does
(DeepEP's dispatch with node-limited routing, DualPipe's two directions)."""

from __future__ import annotations

from distsim_gpu.scenarios.scenario import load_scenario, spec_of


def test_grok1_recipe_folds_experts_over_cp_and_tp(examples_dir) -> None:
    scenario = load_scenario(examples_dir / "grok1-314b-512-h100.yaml")
    par = scenario.parallel
    assert (par.tp, par.cp, par.ep, par.etp, par.dp, par.pp) == (4, 2, 8, 1, 8, 8)
    grid = par.expert_grid()
    assert grid.expert_groups("ep")[0] == tuple(range(8))  # one node's 8 GPUs
    spec_of(scenario)  # every check of the strategy passes


def test_deepseek_recipe_runs_deepep_with_its_router(examples_dir) -> None:
    # The report's batch (15,360 sequences of 4,096 tokens) on DualPipe's two directions:
    # 120 micro-batches a pipeline, 60 each way.
    scenario = load_scenario(examples_dir / "deepseek-v3-2048-h800.yaml")
    spec = spec_of(scenario, allow_oom=True)
    assert (spec.parallel.schedule, scenario.microbatches) == ("dualpipe", 120)
    assert spec.comm.all_to_all == "deepep"
    assert (spec.comm.moe_experts, spec.comm.moe_top_k, spec.comm.deepep_max_nodes) == (
        256, 8, 4)
