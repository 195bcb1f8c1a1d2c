"""``distsim calibrate trace``: known parameters are recovered from traces made with them.

Network: two-rank traces whose all-reduce transfers take exactly what distsim predicts
with NVLink efficiency 0.6 (and the default latencies); the fit on the same cluster,
started from the defaults (0.82), must find 0.6 again.  Compute: a run of the tiny scenario
with ``matmul_efficiency`` 0.45, traced and imported back, fits 0.45 from the default.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.measured.kineto import parse_trace
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.calibrate_trace import (
    calibrate_trace,
    fit_compute_efficiency,
    measured_compute_s,
)
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.traces.kineto_replay import replay_traces

SIZES = [2**k for k in range(16, 29, 2)]  # 64 KiB … 256 MiB


def switch():
    return build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": 100e9,
                          "link_latency": 1e-6})


def _event(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": args}


def documents_with(params: CommParams, sizes=SIZES) -> list[dict]:
    """Two ranks' Kineto documents: all-reduces of each size back to back, transfers as
    ``params`` predict on ``switch()`` (times in µs)."""
    comm = Communicator(Simulation(), switch(), params)
    documents = []
    for rank in (0, 1):
        events, t = [], 10.0
        for i, size in enumerate(sizes):
            duration = comm.estimate_s("all_reduce", ["n0.gpu0", "n0.gpu1"], size) * 1e6
            events.append(_event("cuda_runtime", "cudaLaunchKernel", t, 1, correlation=i + 1))
            events.append(_event("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", t + 2,
                                 duration, correlation=i + 1, stream=20, device=rank,
                                 **{"In msg nelems": size // 4, "Out msg nelems": size // 4,
                                    "dtype": "Float", "Process Group Ranks": "[0, 1]"}))
            t += duration + 10
        events.append(_event("user_annotation", "ProfilerStep#1", 0, t + 10))
        documents.append({"traceEvents": events,
                          "distributedInfo": {"rank": rank, "world_size": 2}})
    return documents


def traces_with(params: CommParams, sizes=SIZES):
    return [parse_trace(doc, f"rank{i}.json")
            for i, doc in enumerate(documents_with(params, sizes))]


def slow_nvlink() -> CommParams:
    base = CommParams()
    return replace(base, link_efficiency={**base.link_efficiency, "nvlink": 0.6})


def test_network_fit_recovers_the_efficiency_the_traces_were_made_with():
    result = calibrate_trace(traces_with(slow_nvlink()), switch())
    assert list(result.link_efficiency) == ["nvlink"]
    assert result.link_efficiency["nvlink"] == pytest.approx(0.6, rel=0.02)
    assert result.latency_scale == pytest.approx(1.0, rel=0.1)
    assert result.median_error_before_pct > 10.0
    assert result.median_error_after_pct < 1.0
    assert result.cross_validation_error_pct < 2.0
    assert result.samples == len(SIZES) and result.complete_groups


def test_traces_of_two_jobs_are_refused():
    """A rank of a two-rank job beside a rank of an eight-rank one: not one job's traces."""
    first, second = documents_with(slow_nvlink())
    second["distributedInfo"]["world_size"] = 8
    traces = [parse_trace(first, "rank0.json"), parse_trace(second, "rank1.json")]
    with pytest.raises(ConfigError, match=r"not of one job: rank0\.json says world size 2, "
                                          r"this one 8") as info:
        calibrate_trace(traces, switch())
    assert info.value.source == "rank1.json"
    with pytest.raises(ConfigError, match="not of one job"):
        replay_traces(traces, switch())


def test_a_scenario_of_another_size_than_the_traced_job_is_refused(tiny, write_scenario,
                                                                   tmp_path):
    plain = write_scenario(tmp_path / "plain.yaml", tiny())  # 8 GPUs
    with pytest.raises(ConfigError, match="job on 2 GPUs, the scenario runs on 8") as info:
        fit_compute_efficiency(str(plain), 1e-3, world_size=2)
    assert info.value.key == "--scenario"


def test_too_few_collectives_is_a_clear_error():
    with pytest.raises(ConfigError, match="a fit needs two or more"):
        calibrate_trace(traces_with(CommParams(), sizes=[2**20]), switch())


def test_cli_writes_a_communication_section_that_validate_trace_reads(tmp_path, capsys):
    paths = []
    for rank, document in enumerate(documents_with(slow_nvlink())):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    out = tmp_path / "comm.yaml"
    cluster = ["--cluster", "switch", "--set", "gpus=2", "--set", "link_bandwidth=100 GB/s"]
    assert main(["calibrate", "trace", *paths, *cluster, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "link_efficiency.nvlink" in text and "after" in text
    assert main(["validate", "trace", *paths, *cluster, "--comm", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective_transfer_error_pct"]["median_abs"] < 1.0


def test_compute_fit_recovers_the_gemm_efficiency_of_a_traced_run(tmp_path, tiny, write_scenario):
    made = write_scenario(tmp_path / "made.yaml",
                          tiny(compute={"gpu": "a100-80gb", "costs": "roofline",
                                        "matmul_efficiency": 0.45}))
    report = run_scenario(load_scenario(made), trace=True)
    assert report.tracer is not None
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(report.tracer.to_chrome_trace()))
    measured = measured_compute_s(load_traces([trace]))
    assert measured == pytest.approx(
        sum(g.compute_s for g in report.per_gpu) / len(report.per_gpu), rel=1e-9)
    plain = write_scenario(tmp_path / "plain.yaml", tiny())
    fit = fit_compute_efficiency(str(plain), measured)
    assert fit.matmul_efficiency == pytest.approx(0.45, rel=0.01)
    assert fit.predicted_after_s == pytest.approx(measured, rel=0.01)
    assert not fit.at_bound
