"""Bottlenecks: the critical path against closed forms, and link statistics (busy,
saturated, bytes, utilisation) against hand-computed flows."""

from __future__ import annotations

import itertools

import pytest
import simpy
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.report.bottlenecks import (
    bottlenecks,
    critical_path_summary,
    format_bottlenecks,
)
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.network import FlowNetwork
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.iteration.simulator import PathEntry
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig


def kind_seconds(result):
    summary = critical_path_summary(result.critical_path, result.iteration_time_s)
    return {kind: v["seconds"] for kind, v in summary["by_kind"].items()}


def assert_covers_the_iteration(result):
    path = result.critical_path
    assert path[0].start_s == pytest.approx(0.0, abs=1e-12)
    assert path[-1].end_s == pytest.approx(result.iteration_time_s, rel=1e-12)
    for before, after in itertools.pairwise(path):
        assert after.start_s == pytest.approx(before.end_s, rel=1e-12, abs=1e-15)
        assert after.end_s >= after.start_s
    total = sum(e.duration_s for e in path)
    assert total == pytest.approx(result.iteration_time_s, rel=1e-9)


def test_data_parallel_critical_path_is_compute_then_the_all_reduce(uniform):
    dp, m = 8, 3
    topo = build_cluster({"preset": "switch", "gpus": dp, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    params = CommParams(protocol="simple", algorithm="ring")
    result = uniform.run(topo, ParallelConfig(dp=dp, bucket_params=10**12),
                         TrainingConfig(micro_batch=1, global_batch=dp * m), comm=params)
    grad_bytes = uniform.model.total_params() * 4  # every parameter's fp32 gradient
    all_reduce = Communicator(Simulation(), topo, params).estimate_s(
        "all_reduce", list(topo.gpus), grad_bytes)
    compute = m * uniform.model.layers * (uniform.t_fwd_s + uniform.t_bwd_s)
    assert_covers_the_iteration(result)
    seconds = kind_seconds(result)
    assert seconds["compute"] == pytest.approx(compute, rel=1e-9)
    assert seconds["dp comm"] == pytest.approx(all_reduce, rel=1e-9)
    for kind in ("tp comm", "pp transfer", "ep comm", "bubble wait"):
        assert seconds[kind] == pytest.approx(0.0, abs=1e-12), kind
    kinds = [e.kind for e in result.critical_path]
    assert set(kinds[:-1]) == {"compute"} and kinds[-1] == "dp comm"
    assert result.critical_path[-1].start_s == pytest.approx(compute, rel=1e-9)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 4), (4, 8)])
def test_pipeline_critical_path_crosses_the_stages_and_sums_to_the_iteration(pp, m, uniform):
    result = uniform.run(uniform.fast_switch(pp), ParallelConfig(pp=pp, schedule="1f1b"),
                         TrainingConfig(micro_batch=1, global_batch=m))
    assert_covers_the_iteration(result)
    per_stage = uniform.model.layers // pp * (uniform.t_fwd_s + uniform.t_bwd_s)
    seconds = kind_seconds(result)
    # Ideal transfers: the path is the pipeline's (m + p - 1) stage times of compute.
    assert seconds["compute"] == pytest.approx((m + pp - 1) * per_stage, rel=1e-6)
    assert sum(e.kind == "pp transfer" for e in result.critical_path) >= 2 * (pp - 1)
    assert len({e.group for e in result.critical_path}) == pp


def test_slow_pipeline_links_put_transfers_on_the_critical_path(uniform):
    pp, m = 4, 4
    topo = build_cluster({"preset": "switch", "gpus": pp, "link_bandwidth": "1 GB/s",
                          "link_latency": "5 us"})
    result = uniform.run(topo, ParallelConfig(pp=pp, schedule="1f1b"),
                         TrainingConfig(micro_batch=1, global_batch=m),
                         comm=CommParams(protocol="simple"))
    assert_covers_the_iteration(result)
    seconds = kind_seconds(result)
    transfer = 512 * uniform.model.hidden * 2 / 1e9  # one activation over one 1 GB/s link
    assert seconds["pp transfer"] >= 2 * (pp - 1) * transfer * 0.99
    found = bottlenecks(result)
    assert found["critical_path"]["total_s"] == pytest.approx(result.iteration_time_s,
                                                              rel=1e-9)
    assert len(found["critical_path"]["top_entries"]) == 10
    for key in ("top_links_by_utilisation", "top_links_by_saturation"):
        links = found[key]
        assert 0 < len(links) <= 10
        for link in links:
            assert 0 <= link["utilisation"] <= 1 + 1e-9
            assert link["saturated_s"] <= link["busy_s"] + 1e-15
            assert link["busy_s"] <= result.iteration_time_s * (1 + 1e-12)
            assert set(link["bytes_by_traffic"]) <= {"pp", "dp", "tp", "ep"}
            assert link["kind"] is not None
        assert "pp" in links[0]["bytes_by_traffic"]


def test_utilisation_is_at_most_one_on_a_data_parallel_run(uniform):
    topo = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": "10 GB/s",
                          "link_latency": "1 us"})
    result = uniform.run(topo, ParallelConfig(dp=4, bucket_params=10**6),
                         TrainingConfig(micro_batch=1, global_batch=8),
                         comm=CommParams(protocol="simple", algorithm="ring"))
    links = bottlenecks(result)["top_links_by_utilisation"]
    assert links
    for link in links:
        assert 0 < link["utilisation"] <= 1 + 1e-9
        assert link["bytes_by_traffic"].keys() == {"dp"}


# ------------------------------------------------------------------ flow-network stats


def test_a_single_flow_at_full_rate_is_busy_and_saturated_for_its_duration():
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.add_link("link", 100.0)
    net.add_link("idle", 100.0)
    env.timeout(1.0).callbacks.append(lambda _e: net.transfer(["link"], 250.0, tag="dp"))
    env.run(until=10.0)
    stats = net.link_stats()
    assert stats["link"].bytes == 250.0
    assert stats["link"].busy_s == pytest.approx(2.5)
    assert stats["link"].saturated_s == pytest.approx(2.5)
    assert stats["link"].bytes_by_tag == {"dp": 250.0}
    assert stats["idle"].busy_s == 0.0 and stats["idle"].bytes == 0.0


def test_two_flows_sharing_saturate_and_a_wider_link_is_only_busy():
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.add_link("narrow", 100.0)
    net.add_link("wide", 1000.0)
    net.transfer({"narrow": 1, "wide": 1}, 100.0, tag="tp")
    net.transfer(["narrow"], 300.0, latency_s=0.5, tag="pp")
    env.run()
    stats = net.link_stats()
    # narrow: 0-0.5 one flow at 100; 0.5-1.5 both at 50 (first done); then 250 bytes at
    # 100: saturated from 0 to 4.0.
    assert stats["narrow"].bytes == pytest.approx(400.0)
    assert stats["narrow"].busy_s == pytest.approx(4.0)
    assert stats["narrow"].saturated_s == pytest.approx(4.0)
    assert stats["narrow"].bytes_by_tag == pytest.approx({"tp": 100.0, "pp": 300.0})
    assert stats["wide"].busy_s == pytest.approx(1.5)
    assert stats["wide"].saturated_s == 0.0


def test_stats_count_a_flow_still_in_flight_up_to_now():
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.add_link("link", 10.0)
    net.transfer(["link"], 100.0)
    env.run(until=4.0)
    stats = net.link_stats()["link"]
    assert stats.busy_s == pytest.approx(4.0) and stats.saturated_s == pytest.approx(4.0)
    assert stats.bytes == 0.0  # bytes count when a flow finishes


# ------------------------------------------------------------------ report and trace


def test_report_json_summary_and_trace_carry_the_bottlenecks(tmp_path, tiny, write_scenario):
    from distsim_gpu.scenarios.report import format_summary
    from distsim_gpu.scenarios.report.bottlenecks import CRITICAL_PATH_PROCESS, TOP_LINKS_PROCESS
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    path = write_scenario(tmp_path / "tiny.yaml", tiny(
        cluster={"preset": "switch", "gpus": 8, "link_bandwidth": "5 GB/s"}))
    report = run_scenario(load_scenario(path), trace=True)
    data = report.to_json_dict()["bottlenecks"]
    path_summary = data["critical_path"]
    assert path_summary["total_s"] == pytest.approx(report.iteration_time_s, rel=1e-9)
    shares = sum(v["percent"] for v in path_summary["by_kind"].values())
    assert shares == pytest.approx(100.0, rel=1e-9)
    assert 0 < len(path_summary["top_entries"]) <= 10
    assert data["top_links_by_utilisation"] and data["top_links_by_saturation"]
    assert "Bottlenecks" in format_summary(report)
    trace = report.tracer.to_chrome_trace()["traceEvents"]
    processes = {e["args"]["name"]: e["pid"] for e in trace if e["name"] == "process_name"}
    assert CRITICAL_PATH_PROCESS in processes and TOP_LINKS_PROCESS in processes
    spans = [e for e in trace if e["ph"] == "X" and e["pid"] == processes[CRITICAL_PATH_PROCESS]]
    assert len(spans) == path_summary["entries"]
    tops = {e["name"] for e in trace if e["ph"] == "C" and e["pid"] == processes[TOP_LINKS_PROCESS]}
    assert tops == {link["link"] for key in ("top_links_by_utilisation",
                                             "top_links_by_saturation") for link in data[key]}


def test_batched_integration_matches_integrating_every_solve(monkeypatch, uniform):
    import distsim_gpu.simcore.link_stats as link_stats_module

    def stats(batch):
        monkeypatch.setattr(link_stats_module, "_STATS_BATCH", batch)
        topo = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": "2 GB/s",
                              "link_latency": "1 us"})
        result = uniform.run(topo, ParallelConfig(pp=2, dp=2, bucket_params=10**6),
                             TrainingConfig(micro_batch=1, global_batch=8),
                             comm=CommParams(protocol="simple"))
        return result.simulation.network.link_stat_arrays()

    every, batched = stats(1), stats(7)
    for a, b in zip(every[2:], batched[2:], strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    assert every[3].max() > 0 and every[4].max() > 0


def test_entries_of_equal_length_and_label_are_told_apart_by_their_start():
    entry = {"duration_s": 0.02, "kind": "compute", "label": "L3 bwd", "group": "stage 1"}
    summary = {"critical_path": {
        "by_kind": {"compute": {"seconds": 0.04, "percent": 100.0}},
        "top_entries": [{**entry, "start_s": 0.0}, {**entry, "start_s": 0.03}]}}
    lines = format_bottlenecks(summary, 0.05)
    assert "20 ms compute from 0 s: L3 bwd (stage 1)" in lines[2]
    assert "20 ms compute from 30 ms: L3 bwd (stage 1)" in lines[3]


def test_a_repeated_entry_is_listed_once_with_its_count_and_starts():
    # Four micro-batches run the same 20 ms chain; a 30 ms one runs once; a 20 ms chain of
    # another group is a different entry.  The repeat is one entry (count 4), not four.
    same = [PathEntry(0.05 * i, 0.05 * i + 0.02, "compute", "L3 bwd", "stage 1", "g0")
            for i in range(4)]
    other = [PathEntry(0.2, 0.23, "compute", "L0 fwd", "stage 0", "g1"),
             PathEntry(0.23, 0.25, "compute", "L3 bwd", "stage 0", "g1")]
    summary = critical_path_summary([*same, *other], 0.25, top=10)
    top = summary["top_entries"]
    assert [(e["label"], e["group"], e["count"]) for e in top] == [
        ("L0 fwd", "stage 0", 1), ("L3 bwd", "stage 1", 4), ("L3 bwd", "stage 0", 1)]
    assert top[1]["starts_s"] == pytest.approx([0.0, 0.05, 0.1, 0.15])
    assert summary["entries"] == 6  # the path itself keeps every entry
    lines = format_bottlenecks({"critical_path": summary}, 0.25)
    assert "20 ms compute ×4 from 0 s, 50 ms, …: L3 bwd (stage 1)" in lines[3]
    assert sum("L3 bwd (stage 1)" in line for line in lines) == 1
