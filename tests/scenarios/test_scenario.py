"""Scenario files: loading, the resolved configuration and its round trip, --set overrides,
cluster files and cost tables relative to the scenario, stragglers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.simcore.units import parse_bandwidth
from distsim_gpu.workloads.cost.compute import (
    CostRow,
    RooflineCosts,
    TableCosts,
    TableHeader,
    write_cost_table,
)
from distsim_gpu.workloads.specs.gpus import get_gpu


def _sets(*texts: str) -> list[tuple[str, object]]:
    return [parse_assignment(text) for text in texts]


def test_loads_the_parts_of_a_tiny_scenario(tmp_path, tiny, write_scenario):
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", tiny()))
    assert scenario.name == "tiny"
    assert scenario.num_gpus == 8
    assert (scenario.parallel.tp, scenario.parallel.pp, scenario.parallel.dp) == (2, 2, 2)
    assert scenario.model.layers == 4
    assert scenario.model.ffn_hidden == 1024  # default 4·hidden, resolved
    assert scenario.microbatches == 8 // (1 * 2)
    assert scenario.gpu.name == "a100-80gb"
    assert scenario.seq_len == 128
    assert scenario.source.endswith("s.yaml")


def test_name_defaults_to_the_file_stem(tmp_path, tiny, write_scenario):
    data = tiny()
    del data["name"]
    assert load_scenario(write_scenario(tmp_path / "my-run.yaml", data)).name == "my-run"


def test_sections_may_be_left_out_and_shorthands_used(tmp_path, write_scenario):
    data = {"cluster": "dgx-a100", "model": "gpt3-175b", "parallelism": {"tp": 8}}
    scenario = load_scenario(write_scenario(tmp_path / "short.yaml", data))
    assert scenario.topology.config["preset"] == "dgx-a100"
    assert scenario.model.name == "gpt3-175b"
    assert scenario.gpu.name == "a100-80gb"  # from the cluster's GPU
    assert scenario.comm.fidelity == "coflow" and scenario.seed == 0


def test_resolved_fills_every_default_in_scenario_schema(tmp_path, tiny, write_scenario):
    resolved = load_scenario(write_scenario(tmp_path / "s.yaml", tiny())).resolved()
    assert list(resolved) == ["name", "cluster", "model", "parallelism", "training",
                              "compute", "communication", "simulation", "stragglers"]
    # the preset's default, in B/s with its unit (a bare number is no bandwidth)
    assert parse_bandwidth(resolved["cluster"]["link_bandwidth"]) > 0
    assert resolved["model"]["kv_heads"] == 8
    assert resolved["parallelism"]["bucket_params"] == 40_000_000
    assert resolved["training"]["seq_len"] == 128
    assert resolved["compute"]["gpu"]["peak_flops"]["bf16"] == 312e12
    assert resolved["compute"]["matmul_efficiency"] == RooflineCosts(
        get_gpu("a100-80gb")).resolved_matmul_efficiency == 0.8
    assert resolved["communication"]["base_latency"]["ring"]["simple"] == pytest.approx(8.4e-6)
    assert resolved["simulation"] == {"fidelity": "coflow", "seed": 0}
    json.dumps(resolved)  # JSON-ready


@pytest.mark.parametrize("dump", [yaml.safe_dump, json.dumps])
def test_resolved_config_written_back_reproduces_the_run(tmp_path, dump, tiny, write_scenario):
    data = tiny(stragglers={"n0.gpu5": 1.25}, communication={"algorithm": "ring"})
    first = load_scenario(write_scenario(tmp_path / "s.yaml", data))
    again_path = tmp_path / "resolved.yaml"
    again_path.write_text(dump(first.resolved()), encoding="utf-8")
    again = load_scenario(again_path)
    assert again.resolved() == first.resolved()
    assert run_scenario(again).iteration_time_s == run_scenario(first).iteration_time_s


def test_resolved_config_keeps_the_gpus_generation_and_power_limit(tmp_path, tiny,
                                                                   write_scenario):
    # A power-limited Hopper under a FlashAttention-2 stack: the reloaded scenario must
    # compute at the same clock and attention rate, or the resolved file lies.
    data = tiny(compute={"gpu": {"preset": "h100", "power_limit": "500 W"},
                         "stack": "torch-compile"})
    first = load_scenario(write_scenario(tmp_path / "s.yaml", data))
    gpu = first.resolved()["compute"]["gpu"]
    assert (gpu["architecture"], gpu["tdp"], gpu["power_limit"]) == ("hopper", 700.0, 500.0)
    again = load_scenario(write_scenario(tmp_path / "again.yaml", first.resolved()))
    assert again.gpu.clock_fraction == first.gpu.clock_fraction < 1
    assert run_scenario(again).iteration_time_s == run_scenario(first).iteration_time_s


def test_a_custom_gpu_without_generation_or_power_resolves_and_reloads(tmp_path, tiny,
                                                                       write_scenario):
    gpu = {"peak_flops": {"bf16": "100 TFLOP/s", "fp32": "20 TFLOP/s"}, "memory": "16 GiB",
           "memory_bandwidth": "1 TB/s", "sm_count": 40}
    first = load_scenario(write_scenario(tmp_path / "s.yaml", tiny(compute={"gpu": gpu})))
    resolved = first.resolved()
    assert not {"architecture", "tdp", "power_limit"} & set(resolved["compute"]["gpu"])
    again = load_scenario(write_scenario(tmp_path / "again.yaml", resolved))
    assert again.gpu.architecture == "" and again.gpu.tdp_w is None
    assert run_scenario(again).iteration_time_s == run_scenario(first).iteration_time_s


@pytest.mark.parametrize(("gpu", "nvlink"), [("a100", 0.78), ("h100", 0.82), ("b200", 0.82)])
def test_nvlink_efficiency_follows_the_gpus_generation_unless_given(tmp_path, tiny,
                                                                    write_scenario, gpu, nvlink):
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", tiny(compute={"gpu": gpu})))
    assert scenario.comm.efficiency_of("nvlink") == nvlink
    # Borrowed from H100 (Blackwell), it stays out of the resolved file, which resolves it
    # again the same way, so that a run of the file notes it as the first run did.
    resolved = scenario.resolved()
    assert resolved["communication"]["link_efficiency"].get("nvlink") == (
        None if gpu == "b200" else nvlink)
    again = load_scenario(write_scenario(tmp_path / "again.yaml", resolved))
    assert again.comm.efficiency_of("nvlink") == nvlink
    assert [str(n) for n in run_scenario(again).notes] == [
        str(n) for n in run_scenario(scenario).notes]
    given = tiny(compute={"gpu": gpu}, communication={"link_efficiency": {"nvlink": 0.5}})
    chosen = load_scenario(write_scenario(tmp_path / "given.yaml", given))
    assert chosen.comm.efficiency_of("nvlink") == 0.5
    assert chosen.resolved()["communication"]["link_efficiency"]["nvlink"] == 0.5
    assert chosen.comm.efficiency_of("network") == scenario.comm.efficiency_of("network")


def test_comm_sms_is_a_whole_number_knob_that_resolves_and_is_checked(tmp_path, tiny,
                                                                      write_scenario):
    data = tiny(compute={"gpu": "h100", "comm_sms": 20})
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", data))
    assert scenario.roofline.compute_sms == 112
    assert scenario.resolved()["compute"]["comm_sms"] == 20
    again = load_scenario(write_scenario(tmp_path / "again.yaml", scenario.resolved()))
    assert run_scenario(again).iteration_time_s == run_scenario(scenario).iteration_time_s
    data["compute"]["comm_sms"] = 132
    with pytest.raises(DistsimError, match=r"compute\.comm_sms: 132 SMs for communication"):
        load_scenario(write_scenario(tmp_path / "bad.yaml", data))


def test_host_overhead_is_a_duration_knob_and_resolves_to_the_stacks(tmp_path, tiny,
                                                                      write_scenario):
    data = tiny(compute={"gpu": "a100", "stack": "megatron-deepspeed",
                         "host_overhead": "30 us"})
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", data))
    assert scenario.roofline.resolved_stack.host_overhead_s == pytest.approx(30e-6)
    assert scenario.resolved()["compute"]["host_overhead"] == pytest.approx(30e-6)
    plain = load_scenario(write_scenario(tmp_path / "p.yaml", tiny(
        compute={"gpu": "a100", "stack": "megatron-deepspeed"})))
    assert plain.resolved()["compute"]["host_overhead"] == pytest.approx(20e-6)
    data["compute"]["host_overhead"] = "-3 us"
    with pytest.raises(DistsimError, match=r"compute\.host_overhead: duration must be"):
        load_scenario(write_scenario(tmp_path / "bad.yaml", data))


def test_overrides_apply_before_validation_with_units(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny())
    base = load_scenario(path)
    scenario = load_scenario(path, _sets(
        "parallelism.tp=4", "parallelism.dp=1", "model.layers=8",
        'cluster.link_bandwidth="100 Gbps"', "cluster.link_latency=2 us",
        "training.global_batch=16", "simulation.seed=7"))
    assert (scenario.parallel.tp, scenario.parallel.dp) == (4, 1)
    assert scenario.model.layers == 8
    assert scenario.topology.config["link_bandwidth"] == pytest.approx(100e9 / 8)
    assert scenario.topology.config["link_latency"] == pytest.approx(2e-6)
    assert scenario.seed == 7
    assert base.parallel.tp == 2  # the file is not changed


def test_override_into_a_preset_cluster_group(tmp_path, tiny, write_scenario):
    data = tiny(cluster={"preset": "dgx-a100", "nodes": 1, "fabric": "single-switch"},
                parallelism={"tp": 2, "pp": 2, "dp": 2})
    data["cluster"].pop("gpus")
    path = write_scenario(tmp_path / "s.yaml", data)
    scenario = load_scenario(path, _sets('cluster.nic.bandwidth="200 Gbps"',
                                         "cluster.fabric.kind=fat-tree",
                                         "cluster.nvlink.bandwidth=150 GB/s"))
    config = scenario.topology.config
    assert config["nic"]["bandwidth"] == pytest.approx(25e9)
    assert config["nvlink"]["bandwidth"] == pytest.approx(150e9)
    assert config["fabric"]["kind"] == "fat-tree"  # the shorthand string became a mapping


def test_slower_links_by_override_make_a_slower_iteration(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny())
    fast = run_scenario(load_scenario(path)).iteration_time_s
    slow = run_scenario(load_scenario(path, _sets('cluster.link_bandwidth="10 Gbps"')))
    assert slow.iteration_time_s > fast


def test_cluster_file_is_found_relative_to_the_scenario(tmp_path, tiny, write_scenario):
    write_scenario(tmp_path / "clusters" / "c.yaml",
                   "preset: switch\ngpus: 4\nlink_bandwidth: 100 GB/s\n")
    data = tiny(cluster="clusters/c.yaml", parallelism={"tp": 2, "pp": 2, "dp": 1},
                training={"global_batch": 4})
    path = write_scenario(tmp_path / "scenarios" / "s.yaml", data)
    path.rename(tmp_path / "s.yaml")
    scenario = load_scenario(tmp_path / "s.yaml")
    assert scenario.num_gpus == 4
    assert scenario.topology.config["link_bandwidth"] == 100e9
    bigger = load_scenario(tmp_path / "s.yaml", _sets("cluster.gpus=8", "parallelism.dp=2"))
    assert bigger.num_gpus == 8


def test_stragglers_slow_the_iteration_and_accept_dotted_gpu_names(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny())
    base = run_scenario(load_scenario(path)).iteration_time_s
    scenario = load_scenario(path, _sets("stragglers.n0.gpu6=1.5"))
    assert scenario.stragglers == {"n0.gpu6": 1.5}
    assert run_scenario(scenario).iteration_time_s > base


def test_cost_table_relative_to_the_scenario_with_roofline_fallback(tmp_path, tiny, write_scenario):
    header = TableHeader(software="unit test", date="2024-01-01", source="made up",
                         gpu="a100-80gb", precision="bf16")
    rows = [CostRow("a100-80gb", "transformer_layer", p, 1, 128, 256, 2, t)
            for p, t in (("fwd", 1e-3), ("bwd", 2e-3), ("recompute", 1e-3))]
    write_cost_table(tmp_path / "tables" / "costs.yaml", header, rows)
    # recompute: full, since the iteration simulator passes recompute="none" to the cost model
    # for every pass and TableCosts accepts only full/selective (a known issue).
    data = tiny(compute={"costs": "tables/costs.yaml"}, training={"recompute": "full"})
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", data))
    assert isinstance(scenario.costs, TableCosts)
    assert scenario.resolved()["compute"]["costs"] == str((tmp_path / "tables" /
                                                           "costs.yaml").resolve())
    roofline = run_scenario(load_scenario(write_scenario(
        tmp_path / "r.yaml", tiny(training={"recompute": "full"}))))
    table = run_scenario(scenario)
    # 2 layers per stage, 4 micro-batches, 4 ms per layer and micro-batch at least.
    assert table.iteration_time_s > 2 * 4 * 4e-3 > roofline.iteration_time_s


def test_roofline_knobs_change_compute_time(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny())
    base = run_scenario(load_scenario(path)).iteration_time_s
    slow = load_scenario(path, _sets("compute.matmul_efficiency=0.2",
                                     "compute.launch_overhead=50 us"))
    assert slow.roofline.launch_overhead_s == pytest.approx(50e-6)
    assert run_scenario(slow).iteration_time_s > base


def test_scenario_from_mapping_without_a_file(tiny):
    scenario = scenario_from_mapping(tiny(), source="<test>")
    assert scenario.source == "<test>"
    assert run_scenario(scenario).iteration_time_s > 0


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_memory_follows_the_attention_implementation(tmp_path, attention, tiny, write_scenario):
    # Unfused attention keeps every s×s softmax output for backward (Korthikanti et al.
    # 2022's 5·a·s/h term); the simulator and the search's memory check count the same.
    from distsim_gpu.scenarios.study.search_prune import stage_memory

    def memory(kind: str) -> tuple[float, float]:
        path = write_scenario(tmp_path / f"{kind}.yaml", tiny(compute={
            "gpu": "a100-80gb", "costs": "roofline", "attention": kind}))
        scenario = load_scenario(path)
        report = run_scenario(scenario, allow_oom=True)
        counted = stage_memory(scenario, scenario.parallel, scenario.training,
                               report.microbatches)
        return max(g.peak_memory_bytes for g in report.per_gpu), counted

    simulated, counted = memory(attention)
    assert simulated == pytest.approx(counted, rel=1e-12)
    if attention == "unfused":
        assert simulated > memory("flash")[0]


_EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"
_SCENARIO_EXAMPLES = sorted([*_EXAMPLES.glob("*.yaml"), *_EXAMPLES.glob("faults/*.yaml")])


@pytest.mark.parametrize("path", _SCENARIO_EXAMPLES, ids=lambda path: path.stem)
def test_every_examples_resolved_configuration_reads_back(tmp_path, path):
    """``resolved()`` promises a file that loads to the same scenario: for every shipped
    example (a DeepEP exchange's figures, NVMe drives, stragglers, faults and jobs among
    them) the resolved configuration written as YAML loads and resolves alike."""
    first = load_scenario(path).resolved()
    again = tmp_path / "resolved.yaml"
    again.write_text(yaml.safe_dump(first), encoding="utf-8")
    assert load_scenario(again).resolved() == first
