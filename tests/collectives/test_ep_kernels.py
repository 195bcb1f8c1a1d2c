"""The kernels a two-hop expert exchange runs on (communication.ep_kernels): each family's
figures are the defaults of the three keys that override them, HybridEP's copies are not
bound by their SMs where DeepEP's are, its NVLink fraction is what its own rows give, and a
run says what it took."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.deepep import nvlink_copy_rate, sm_bound_factor
from distsim_gpu.collectives.ep_kernels import EP_KERNELS
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import comm_params_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster

from tests.conftest import load_script

B200_NODE = build_cluster({"preset": "dgx-b200", "nodes": 1})


@pytest.mark.parametrize("name", sorted(EP_KERNELS))
def test_every_family_has_physical_figures(name) -> None:
    kernels = EP_KERNELS[name]
    assert kernels.name == name and kernels.label and kernels.source and kernels.fit_rows
    assert kernels.caveat.key.startswith("communication.") and kernels.caveat.message
    assert 0 < kernels.nvlink_efficiency <= 1
    assert kernels.sm_bytes_per_s >= 0 and kernels.sm_token_s >= 0
    assert kernels.fit_architecture in ("ampere", "hopper", "blackwell")


def test_a_family_sets_the_defaults_and_a_key_beside_it_wins() -> None:
    hybrid = comm_params_from_mapping({"all_to_all": "deepep", "ep_kernels": "hybridep"})
    assert (hybrid.deepep_nvlink_efficiency, hybrid.deepep_sm_bytes_per_s,
            hybrid.deepep_sm_token_s) == (0.90, 0.0, 0.0)
    assert hybrid.to_dict()["ep_kernels"] == "hybridep"
    mine = comm_params_from_mapping({"all_to_all": "deepep", "ep_kernels": "HybridEP",
                                     "deepep_nvlink_efficiency": 0.7,
                                     "deepep_sm_rate": "20 GB/s"})
    assert (mine.ep_kernels, mine.deepep_nvlink_efficiency,
            mine.deepep_sm_bytes_per_s) == ("hybridep", 0.7, 20e9)
    assert comm_params_from_mapping({"all_to_all": "deepep"}) == CommParams(all_to_all="deepep")
    with pytest.raises(ConfigError, match=r"communication\.ep_kernels: unknown ep_kernels "
                                          r"'nccl' \(valid: deepep, hybridep\)"):
        comm_params_from_mapping({"ep_kernels": "nccl"}, prefix="communication")


@pytest.mark.parametrize("sms", [4, 16, 32])
def test_hybrideps_copies_are_not_bound_by_their_sms(sms) -> None:
    """On a B200 node an EP 8 exchange of 7,168-wide 16-bit tokens on ``sms`` SMs: DeepEP's
    copies are bound (18.4 GB/s an SM, below NVLink's 620 for fewer than 34), HybridEP's
    run at its NVLink fraction whatever the SMs, 0.90 / 0.84 of DeepEP's unbound rate."""
    token = 7168 * 2

    def exchange(kernels: str) -> float:
        params = replace(comm_params_from_mapping(
            {"all_to_all": "deepep", "ep_kernels": kernels}, architecture="blackwell"),
            moe_experts=64, moe_top_k=8, deepep_sms=sms, moe_tokens=4096, moe_hidden=7168)
        (row,) = run_benchmark(B200_NODE, "alltoall", [4096 * 8 * token], params=params,
                               dtype="int8")
        # DeepEP: NVLink's copy rate over what its SMs move, t + B/rate a token each.
        per_sm = token / (0.4e-6 + token / 38e9) if kernels == "deepep" else float("inf")
        assert sm_bound_factor(B200_NODE, params, token) == pytest.approx(
            max(1.0, nvlink_copy_rate(B200_NODE, params) / (sms * per_sm)))
        return row.time_s

    deepep, hybrid = exchange("deepep"), exchange("hybridep")
    unbound = replace(comm_params_from_mapping({"all_to_all": "deepep"},
                                               architecture="blackwell"),
                      moe_experts=64, moe_top_k=8, deepep_sms=0)
    assert sm_bound_factor(B200_NODE, unbound, 7168 * 2) == 1.0
    (free,) = run_benchmark(B200_NODE, "alltoall", [4096 * 8 * 7168 * 2], params=unbound,
                            dtype="int8")
    assert hybrid < deepep
    assert hybrid == pytest.approx(free.time_s * 0.84 / 0.90, rel=0.02)


def test_hybrideps_fraction_is_its_eight_rank_rows_fit(shared_data) -> None:
    """The default is what HybridEP's 8-rank B200 and GB200 rows give
    (compare_rack_a2a.py --fit), so a change that moves the fit shows here."""
    compare = load_script("validation/deepep/compare_rack_a2a.py", "compare_rack_a2a")
    assert compare.fit_hybridep(shared_data / "kernels" / "deepep") == \
        EP_KERNELS["hybridep"].nvlink_efficiency


def test_a_hybridep_run_says_its_sms_were_not_counted_against_its_copies(
        write_scenario, tmp_path, b200_moe_scenario) -> None:
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    base = b200_moe_scenario
    results = {}
    for kernels in ("deepep", "hybridep"):
        path = write_scenario(tmp_path / f"{kernels}.yaml", {**base, "communication": {
            "all_to_all": "deepep", "ep_kernels": kernels}})
        results[kernels] = run_scenario(load_scenario(path))
    assert results["hybridep"].iteration_time_s < results["deepep"].iteration_time_s
    keys = {kernels: {n.key for n in result.notes} for kernels, result in results.items()}
    assert "communication.deepep_sm_rate" in keys["deepep"]
    assert "communication.deepep_sm_rate" not in keys["hybridep"]
    (said,) = [n for n in results["hybridep"].notes if n.key == "communication.ep_kernels"]
    assert said == EP_KERNELS["hybridep"].caveat and "unbound by the SMs" in said.message
    assert "communication.deepep_nvlink_efficiency" not in keys["hybridep"]  # Blackwell's
    flat = write_scenario(tmp_path / "flat.yaml", {**base, "communication": {
        "all_to_all": "flat", "ep_kernels": "hybridep"}})
    (idle,) = [n for n in run_scenario(load_scenario(flat)).notes
               if n.key == "communication.ep_kernels"]
    assert "this run's all-to-alls are flat, so it changes nothing" in idle.message


@pytest.mark.parametrize("kernels", ["deepep", "hybridep"])
def test_a_deepep_runs_resolved_configuration_reads_back_to_the_same_run(
        write_scenario, tmp_path, b200_moe_scenario, kernels) -> None:
    """``resolved()`` writes the exchange's figures under their scenario keys (an SM's rate
    with its unit, HybridEP's 0 among them) and leaves the SMs to ``compute.comm_sms``:
    written back, it loads (a sweep's points are such files) and reproduces the run."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    first = load_scenario(write_scenario(tmp_path / "moe.yaml", {
        **b200_moe_scenario, "communication": {"all_to_all": "deepep",
                                               "ep_kernels": kernels}}))
    comm = first.resolved()["communication"]
    assert "deepep_sms" not in comm and comm["ep_kernels"] == kernels
    assert comm["deepep_sm_rate"].endswith(" B/s")
    again = load_scenario(write_scenario(tmp_path / "again.yaml", first.resolved()))
    assert again.comm == first.comm and again.resolved() == first.resolved()
    assert run_scenario(again).iteration_time_s == run_scenario(first).iteration_time_s
