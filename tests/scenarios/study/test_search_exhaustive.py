"""``distsim search`` against an exhaustive simulation of the same space, sharding's axes
(ZeRO-3 under a pipeline, HSDP, reshard_after_forward, expert_tp) in it: the search's
winner is the exhaustive optimum, each candidate it keeps for memory runs, and each it
prunes for memory is refused by ``distsim run`` of the same configuration."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import enumerate_strategies, search_strategies
from distsim_gpu.scenarios.study.search_prune import check_candidate
from distsim_gpu.simcore.errors import ConfigError

MODEL = {"name": "tiny-fsdp", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 256,
         "vocab": 1000}

# Sharding's axes wide open, the rest narrow enough to simulate every candidate.
SHARDING = {"schedule": ["1f1b", "interleaved"], "interleave": [2], "zero": [0, 1, 3],
            "dp_replicate": [1, 2], "reshard_after_forward": [None, False],
            "recompute": ["none"], "sequence_parallel": [False], "order": ["tp-dp-pp"],
            "micro_batch": [1, 2]}


def mapping(bandwidth: str, memory: int | None = None) -> dict:
    gpu: object = "a100-80gb" if memory is None else {"preset": "a100-80gb",
                                                       "memory": memory}
    return {"name": "tiny-fsdp",
            "cluster": {"preset": "switch", "gpus": 8, "link_bandwidth": bandwidth},
            "model": dict(MODEL), "parallelism": {"tp": 1, "pp": 1, "dp": 8},
            "training": {"micro_batch": 1, "global_batch": 16, "recompute": "none"},
            "compute": {"gpu": gpu}, "simulation": {"fidelity": "coflow"}}


def test_zero3_under_a_pipeline_hsdp_and_no_reshard_are_in_the_space():
    """ZeRO-3 with pp > 1 (FSDP2 under torchtitan's pipeline) is a default candidate on
    the one-direction schedules, and so is reshard_after_forward: false where it means
    something (ZeRO-3 without a pipeline: one more candidate for each); HSDP only when the
    space names it, with ZeRO-3."""
    scenario = scenario_from_mapping(mapping("100 GB/s"))
    default = enumerate_strategies(scenario)
    piped = {(s.parallel.pp, s.parallel.schedule) for s in default
             if s.parallel.zero == 3 and s.parallel.pp > 1}
    assert {(2, "1f1b"), (2, "gpipe"), (2, "interleaved"), (4, "1f1b")} <= piped
    assert all(s.parallel.dp_replicate == 1 for s in default)
    kept = [s for s in default if s.parallel.reshard_after_forward is False]
    resharded = [s for s in default if s.parallel.zero == 3 and s.parallel.pp == 1
                 and s.parallel.reshard_after_forward is None]
    assert len(kept) == len(resharded) > 0
    assert all(s.parallel.zero == 3 and s.parallel.pp == 1 for s in kept)
    wide = enumerate_strategies(scenario, space=SHARDING)
    hsdp = [s.parallel for s in wide if s.parallel.dp_replicate == 2]
    assert hsdp and all(p.zero == 3 and p.dp % 2 == 0 and p.dp > 2 for p in hsdp)
    two_chunks = enumerate_strategies(scenario, space={"schedule": ["dualpipev"]})
    assert two_chunks and all(s.parallel.zero != 3 for s in two_chunks)


def test_a_scenarios_own_hsdp_and_reshard_do_not_leak_into_the_candidates():
    """A scenario that runs HSDP without resharding searches the same space as one that
    does not: its keys would make every candidate but ZeRO-3 at pp 1 invalid."""
    data = mapping("100 GB/s")
    data["parallelism"] = {"tp": 1, "pp": 1, "dp": 8, "fsdp": True, "dp_replicate": 2,
                           "reshard_after_forward": False}
    space = dict(SHARDING, zero=[0, 1], dp_replicate=[1], reshard_after_forward=[None])
    result = search_strategies(scenario_from_mapping(data), top=1, workers=1, space=space)
    plain = search_strategies(scenario_from_mapping(mapping("100 GB/s")), top=1, workers=1,
                              space=space)
    # Only pp 4 × interleave 2 > 4 layers is invalid (× 2 micro-batches, zero 0 or 1 at
    # dp 2, zero 0 at dp 1), in both.
    assert result.invalid_reasons == plain.invalid_reasons == {"parallelism.pp": 6}
    assert result.best is not None and plain.best is not None
    assert result.best.strategy.parallel.dp_replicate == 1
    assert result.best.iteration_time_s == plain.best.iteration_time_s


def _exhaustive(data: dict, space: dict) -> tuple[list[float], int]:
    """Every candidate of ``space`` run from its own mapping (as ``distsim run --set``):
    the simulated times of those that run, and how many ``distsim run`` refused for memory.
    The search's memory check must agree candidate by candidate."""
    scenario = scenario_from_mapping(data)
    times, refused = [], 0
    for strategy in enumerate_strategies(scenario, space=space):
        kept, pruned = check_candidate(scenario, strategy)
        try:
            run = scenario_from_mapping(data, overrides=strategy.overrides().items())
            report = run_scenario(run)
        except ConfigError as error:
            if "out of memory" in str(error):
                refused += 1
                assert pruned is not None and pruned.reason == "memory", strategy.label()
            else:
                assert kept is None, f"{strategy.label()}: {error}"
            continue
        assert kept is not None, f"{strategy.label()} ran but was pruned: {pruned}"
        peak = max(g.peak_memory_bytes for g in report.per_gpu)
        assert peak <= scenario.gpu.memory_bytes
        times.append(report.iteration_time_s)
    return sorted(times), refused


@pytest.mark.parametrize(("bandwidth", "memory_share"), [
    ("2 GB/s", None), ("600 GB/s", None), ("20 GB/s", 0.55)])
def test_the_winner_is_the_exhaustive_optimum_with_sharding_in_the_space(bandwidth,
                                                                         memory_share):
    """Pruning (invalid, memory, the bound) never drops the true best of a space with
    ZeRO-3 under a pipeline and HSDP in it, on a slow, a fast and a memory-tight cluster
    (the GPU holding ``memory_share`` of what pure data parallelism at micro-batch 2
    needs, so that the memory check decides)."""
    memory = None
    if memory_share is not None:
        scenario = scenario_from_mapping(mapping(bandwidth))
        pure_dp = [s for s in enumerate_strategies(scenario, space=SHARDING)
                   if s.parallel.dp == 8 and s.parallel.zero == 0
                   and s.training.micro_batch == 2]
        need = check_candidate(scenario, pure_dp[0])[0]
        assert need is not None
        memory = int(need.memory_bytes * memory_share)
    data = mapping(bandwidth, memory)
    times, refused = _exhaustive(data, SHARDING)
    assert (refused > 0) == (memory is not None)
    result = search_strategies(scenario_from_mapping(data), top=2, workers=1, space=SHARDING)
    assert [r.iteration_time_s for r in result.top] == pytest.approx(times[:2], rel=1e-9)
    assert result.pruned_counts["memory"] == refused
    assert all(r.lower_bound_s <= r.iteration_time_s * (1 + 1e-9) for r in result.results)
    assert all(p.lower_bound_s >= result.top[-1].iteration_time_s
               for p in result.pruned if p.reason == "bound")


def test_expert_tp_widens_the_expert_groups_it_frees():
    """With expert_tp 1 the experts fold over tp·cp·dp ranks: at tp 2, dp 2 on 4 GPUs ep
    reaches 4 (2 at the dense tp); expert_tp equal to tp is the default's strategy."""
    data = mapping("100 GB/s")
    data["cluster"]["gpus"] = 4
    data["parallelism"]["dp"] = 4
    data["model"] = {**MODEL, "experts": 4, "top_k": 2}
    scenario = scenario_from_mapping(data)
    narrow = {"tp": [2], "pp": [1], "schedule": ["1f1b"], "zero": [0], "recompute": ["none"],
              "sequence_parallel": [False], "order": ["tp-dp-pp"], "micro_batch": [1]}
    dense = {(s.parallel.ep, s.parallel.expert_tp)
             for s in enumerate_strategies(scenario, space=narrow)}
    assert dense == {(1, None), (2, None)}
    wide = {(s.parallel.ep, s.parallel.expert_tp) for s in enumerate_strategies(
        scenario, space=dict(narrow, expert_tp=[None, 1, 2]))}
    assert wide == {(1, None), (2, None), (1, 1), (2, 1), (4, 1)}


def test_a_search_none_of_whose_strategies_fits_is_a_config_error_with_a_hint(tmp_path):
    data = mapping("100 GB/s", memory=2**20)  # 1 MiB a GPU: nothing fits
    with pytest.raises(ConfigError) as info:
        search_strategies(scenario_from_mapping(data), workers=1, space=SHARDING,
                          out_dir=tmp_path)
    error = info.value
    assert error.key == "compute.gpu"
    assert "can run (" in error.message and "out of memory" in error.message
    assert "the leanest" in error.message and "GiB of the 0.0 GiB" in error.message
    assert "more GPUs" in error.hint
    # pruned.csv says why each was dropped; no best.yaml (nor one left from before).
    assert (tmp_path / "pruned.csv").is_file() and not (tmp_path / "best.yaml").exists()


def test_an_empty_space_is_a_config_error():
    with pytest.raises(ConfigError, match="has no strategy for 8 GPUs") as info:
        search_strategies(scenario_from_mapping(mapping("100 GB/s")), workers=1,
                          space={"micro_batch": [3]})
    assert info.value.key == "space"
    assert "tp divides the 8 GPUs a node and the 8 heads, pp the 4 layers" in str(info.value)
    assert "--gpus" in info.value.hint

