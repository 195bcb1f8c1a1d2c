"""distsim's own trace.json imports back (measured.distsim_trace via load_traces) to the
per-GPU busy times the simulator accounted, for every GPU of runs that exercise every kind
of span: folded and simulated TP collectives, pipeline sends, DP buckets, the tied-embedding
all-reduce, expert all-to-alls, ZeRO-1 parameter gathers, FSDP, stragglers, recompute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distsim_gpu.measured.distsim_trace import is_distsim_trace, parse_distsim_trace
from distsim_gpu.measured.summary import summarise
from distsim_gpu.measured.traces import load_trace_file, load_traces
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.report import Report
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.trace import Tracer

MOE_MODEL = {"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128,
             "vocab": 1024, "experts": 4, "top_k": 2}

#: Scenario variants (changes to the tiny scenario: 8 GPUs, tp 2 × pp 2 × dp 2).
VARIANTS = {
    "tp-pp-dp": {},
    "straggler-full-recompute": {"training": {"recompute": "full"},
                                 "stragglers": {"n0.gpu3": 1.25}},
    "selective-recompute-sp": {"training": {"recompute": "selective"},
                               "parallelism": {"sequence_parallel": True}},
    "moe-ep-zero1": {"model": MOE_MODEL,
                     "parallelism": {"tp": 2, "pp": 2, "dp": 2, "ep": 2, "zero": 1}},
    "fsdp": {"parallelism": {"tp": 2, "pp": 1, "dp": 4, "fsdp": True}},
}


@pytest.fixture
def traced_run(tmp_path: Path, tiny, write_scenario):
    """``traced_run(name)``: run a variant with tracing; returns the report and its
    trace.json as ``distsim run --out`` writes it."""

    def run(name: str) -> tuple[Report, Path]:
        path = write_scenario(tmp_path / f"{name}.yaml", tiny(**VARIANTS[name]))
        report = run_scenario(load_scenario(path), trace=True)
        assert report.tracer is not None
        trace = tmp_path / f"{name}.trace.json"
        trace.write_text(json.dumps(report.tracer.to_chrome_trace()), encoding="utf-8")
        return report, trace

    return run


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_per_gpu_busy_times_equal_the_simulators_accounting(tmp_path, name, traced_run):
    report, trace = traced_run(name)
    traces = load_traces([trace])
    assert [t.rank for t in traces] == list(range(8))
    accounted = {g.rank: g for g in report.per_gpu}
    steps = summarise(traces)
    assert len(steps) == 8  # one ProfilerStep (the iteration) per GPU
    for trace_of_gpu, step in zip(traces, steps):
        gpu = accounted[step.rank]
        assert trace_of_gpu.source == f"{trace}:{gpu.gpu}"
        assert trace_of_gpu.world_size == 8 and trace_of_gpu.gpu_model == "a100-80gb"
        assert step.step_s == report.iteration_time_s
        assert step.compute_s == pytest.approx(gpu.compute_s, rel=1e-9)
        assert step.communication_s == pytest.approx(gpu.communication_s, rel=1e-9)
        assert gpu.communication_s > 0 and step.memcpy_s == 0.0


def test_collective_kinds_and_pipeline_transfers_on_both_ends(tmp_path, traced_run):
    # tiny: 4 layers over 2 stages, 4 micro-batches (global 8 / micro 1 / dp 2).  Stage 0
    # sends 4 activations and receives 4 gradients; stage 1 the other way round.  TP
    # all-reduces: 2 per layer pass (attention, MLP) × 2 layers × 4 micro-batches × (fwd,
    # bwd) = 32, plus one data-parallel bucket (the tiny model's gradients fit one) and
    # the tied-embedding all-reduce between the first and last stage.
    _report, trace = traced_run("tp-pp-dp")
    for rank_trace in load_traces([trace]):
        assert rank_trace.nccl_counts() == {"all_reduce": 34, "recv": 4, "send": 4}
        tied = [k for k in rank_trace.gpu_events if k.name == "tied embedding grads"]
        assert len(tied) == 1 and tied[0].collective == "all_reduce"


def test_trace_json_carries_the_marker_and_run_metadata(tmp_path, traced_run):
    report, trace = traced_run("tp-pp-dp")
    data = json.loads(trace.read_text())
    assert data["otherData"]["generator"] == "distsim" and is_distsim_trace(data)
    meta = data["otherData"]["distsim"]
    assert (meta["micro_batch"], meta["seq_len"], meta["hidden"], meta["tp"]) == (1, 128, 256, 2)
    assert meta["sequence_parallel"] is False and meta["microbatches"] == 4
    assert meta["iteration_time_s"] == report.iteration_time_s
    parsed = parse_distsim_trace(data, str(trace))
    assert sorted(r for g in parsed.groups for r in g.ranks) == list(range(8))
    layer_spans = [s for s in parsed.spans if s.args.get("layer") == "transformer_layer"]
    # 4 layers × 4 micro-batches × 2 halves × (fwd, bwd) per data-parallel replica
    assert len(layer_spans) == 4 * 4 * 2 * 2 * 2
    assert {s.args["pass"] for s in layer_spans} == {"fwd", "bwd"}
    # An empty tracer still says who wrote it.
    assert Tracer().to_chrome_trace()["otherData"] == {"generator": "distsim"}


def test_distsim_trace_without_run_metadata_is_a_clear_error(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(Tracer().to_json(), encoding="utf-8")
    with pytest.raises(ParseError, match=r"without run metadata") as caught:
        load_traces([path])
    assert caught.value.source == str(path)


def test_load_trace_file_points_a_many_gpu_trace_to_load_traces(tmp_path, traced_run):
    _report, trace = traced_run("tp-pp-dp")
    with pytest.raises(ParseError, match=r"holds 8 GPUs") as caught:
        load_trace_file(trace)
    assert caught.value.hint == "read it with load_traces"


def test_trace_summary_reads_a_run_out_directory(tmp_path, capsys, tiny, write_scenario):
    scenario = write_scenario(tmp_path / "tiny.yaml", tiny())
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["trace", "summary", str(tmp_path / "out" / "trace.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert data["num_traces"] == 8
    by_rank = {r["rank"]: r for r in data["ranks"]}
    for gpu in summary["per_gpu"]:
        step = by_rank[gpu["rank"]]["steps"][0]
        assert step["compute_s"] == pytest.approx(gpu["compute_s"], rel=1e-9)
        assert step["communication_s"] == pytest.approx(gpu["communication_s"], rel=1e-9)
    # The same trace twice is not a job of sixteen ranks.
    trace = str(tmp_path / "out" / "trace.json")
    assert main(["trace", "summary", trace, trace]) == 2
    assert "two traces of rank 0 (the same file given twice)" in capsys.readouterr().err


def test_a_run_with_a_timed_fault_writes_a_trace_that_reads_back(tmp_path):
    """A fault that strikes mid-run runs the iteration on the shared fabric, which wrote
    no run metadata: the trace now carries the job's rank groups as a plain run's does,
    and a trace of several jobs says it is one."""
    quickstart = Path(__file__).resolve().parents[2] / "scenarios/examples/quickstart.yaml"
    fault = ('faults=[{target: nic, name: n1.nic3, kind: degraded, bandwidth_factor: 0.5, '
             'at_s: 0.02}]')
    out = tmp_path / "faulted"
    assert main(["run", str(quickstart), "--set", "model.layers=2", "--set", fault,
                 "--out", str(out), "-q"]) == 0
    traces = load_traces([out / "trace.json"])
    assert len(traces) == 16  # one per GPU
    jobs = Tracer()
    jobs.metadata["distsim"] = {"format": 1, "jobs": 2}
    path = tmp_path / "jobs.json"
    path.write_text(jobs.to_json(), encoding="utf-8")
    with pytest.raises(ParseError, match=r"a trace of 2 jobs sharing a cluster"):
        load_traces([path])
