"""trace.json per GPU: a track per GPU and stream (each rank group's spans on each of its
GPUs), pipeline peers by GPU, and the file read back per GPU to the simulator's accounting;
past the cap, one track per rank group with a note."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest
from distsim_gpu.measured.summary import summarise
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.report import write_output_dir
from distsim_gpu.scenarios.report.perfetto import per_gpu_chrome_trace
from distsim_gpu.scenarios.report.timelines import Timeline
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.trace import Tracer


@pytest.fixture(scope="module")
def traced(tmp_path_factory, tiny, write_scenario):
    # tiny: 8 GPUs, tp 2 · pp 2 · dp 2 (4 rank groups of 2 GPUs), a straggler on n0.gpu3.
    path = write_scenario(tmp_path_factory.mktemp("perfetto") / "tiny.yaml",
                          tiny(stragglers={"n0.gpu3": 1.25}))
    return run_scenario(load_scenario(path), trace=True)


def _processes(trace):
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}


def test_every_gpu_is_a_process_with_its_groups_spans_on_its_streams(traced):
    trace, note = per_gpu_chrome_trace(traced.tracer, traced.timelines, traced.per_gpu)
    assert note == ""
    names = _processes(trace)
    gpus = [g.gpu for g in sorted(traced.per_gpu, key=lambda g: g.rank)]
    assert list(names.values())[:8] == gpus  # GPUs first, in rank order
    groups = traced.tracer.metadata["distsim"]["groups"]
    per_group = Counter(s.process for s in traced.tracer.spans)
    per_gpu = Counter(names[e["pid"]] for e in trace["traceEvents"] if e["ph"] == "X")
    computed = Counter(s.process for s in traced.tracer.spans
                       if s.thread == "compute" and s.end_s > s.start_s)
    for name, group in groups.items():
        for gpu in group["gpus"]:
            # The same spans, once per GPU; the straggler's TP peer waits after each
            # compute span (it runs 1/1.25 of it).
            waits = computed[name] if gpu == "n0.gpu2" else 0
            assert per_gpu[gpu] == per_group[name] + waits
    threads = {(names[e["pid"]], e["args"]["name"]) for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {("n0.gpu0", "compute"), ("n0.gpu0", "tp comm"), ("n0.gpu0", "pp send"),
            ("n0.gpu1", "dp comm")} <= threads
    # A send names the receiving GPU of the same tensor-parallel index.
    rank = {g.gpu: g for g in traced.per_gpu}
    for event in trace["traceEvents"]:
        if event["ph"] == "X" and "to" in event["args"]:
            sender, receiver = rank[names[event["pid"]]], rank[event["args"]["to"]]
            assert receiver.tp_rank == sender.tp_rank
            assert receiver.stage != sender.stage and receiver.replica == sender.replica


def test_the_per_gpu_file_reads_back_to_the_simulators_accounting(traced, tmp_path):
    result = write_output_dir(traced, tmp_path / "out", plots=False, html=False)
    assert result.notes == ()
    data = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert data["otherData"]["distsim"]["tracks"] == "per GPU"
    traces = load_traces([tmp_path / "out" / "trace.json"])
    assert [t.rank for t in traces] == list(range(8))
    accounted = {g.rank: g for g in traced.per_gpu}
    for step in summarise(traces):
        gpu = accounted[step.rank]
        assert step.compute_s == pytest.approx(gpu.compute_s, rel=1e-9)
        assert step.communication_s == pytest.approx(gpu.communication_s, rel=1e-9)
    for rank_trace in traces:  # sends and their receives land on both ends' GPUs
        assert rank_trace.nccl_counts()["send"] == 4 == rank_trace.nccl_counts()["recv"]


def test_past_the_cap_the_trace_keeps_one_track_per_rank_group(traced):
    spans = len(traced.tracer.spans)
    groups = traced.tracer.metadata["distsim"]["groups"]
    # Expanded: each rank group's span twice (tp 2), the critical path's once.
    expanded = sum(len(groups[s.process]["gpus"]) if s.process in groups else 1
                   for s in traced.tracer.spans)
    # ... and the straggler's peer n0.gpu2's wait after each of its compute spans
    expanded += sum(1 for s in traced.tracer.spans if "n0.gpu2" in groups.get(
        s.process, {}).get("gpus", ()) and s.thread == "compute" and s.end_s > s.start_s)
    assert spans < expanded < 2 * spans
    assert per_gpu_chrome_trace(traced.tracer, traced.timelines, traced.per_gpu,
                                max_events=expanded)[1] == ""
    trace, note = per_gpu_chrome_trace(traced.tracer, traced.timelines, traced.per_gpu,
                                max_events=expanded - 1)
    assert note == (f"trace.json has one track per rank group: one per GPU would hold "
                    f"{expanded:,} spans (over {expanded - 1:,})")
    assert trace["otherData"]["distsim"]["tracks"] == "per rank group"
    assert set(_processes(trace).values()) == {s.process for s in traced.tracer.spans} | {
        "links", "top links"}


def test_a_folded_groups_spans_are_written_on_its_images_gpus_too():
    # Rank group A (g0, g1) stands for its image (g4, g5); B (g2, g3) for (g6, g7).  A
    # sends to B: on each copy the peer is B's GPU of the same place.
    tracer = Tracer()
    tracer.span("A", "compute", "fwd", 0.0, 1e-3)
    tracer.span("A", "pp send", "F mb0", 1e-3, 2e-3, to="B")
    tracer.metadata["distsim"] = {"groups": {
        name: {"stage": s, "replica": 0, "gpus": list(g), "ranks": [int(x[1]) for x in g]}
        for name, s, g in (("A", 0, ("g0", "g1")), ("B", 1, ("g2", "g3")))}}
    timelines = [Timeline("A", 0, ("g0", "g1", "g4", "g5"), (), ()),
                 Timeline("B", 1, ("g2", "g3", "g6", "g7"), (), ())]
    per_gpu = [SimpleNamespace(gpu=f"g{r}", rank=r, stage=(r // 2) % 2, replica=r // 4)
               for r in range(8)]
    trace, note = per_gpu_chrome_trace(tracer, timelines, per_gpu)
    names = _processes(trace)
    assert note == "" and list(names.values()) == ["g0", "g1", "g4", "g5", "g2", "g3",
                                                   "g6", "g7"]
    sends = {names[e["pid"]]: e["args"]["to"] for e in trace["traceEvents"]
             if e["ph"] == "X" and e["name"] == "F mb0"}
    assert sends == {"g0": "g2", "g1": "g3", "g4": "g6", "g5": "g7"}
    groups = trace["otherData"]["distsim"]["groups"]
    assert groups["g5"] == {"stage": 0, "replica": 1, "gpus": ["g5"], "ranks": [5],
                            "slowdown": 1.0, "rank_group": "A"}
