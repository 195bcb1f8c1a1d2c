"""Trace replay (``distsim validate trace``): synthetic traces with closed-form answers,
then the real corpus.

The synthetic job: two ranks each run a GEMM (rank 0: 100 µs, rank 1: 300 µs), then an
all-reduce of S bytes on an NCCL stream that waits for the GEMM (cudaEventRecord +
cudaStreamWaitEvent), then the CPU blocks in cudaDeviceSynchronize and launches a 50 µs
tail kernel.  Measured, the all-reduce's transfer takes 40 µs after rank 1 arrives.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.measured.kineto import parse_trace
from distsim_gpu.measured.summary import summarise
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.validate_trace import default_cluster
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.traces.kineto_graph import communicator_op
from distsim_gpu.workloads.traces.kineto_replay import predicted_step_s, replay_traces
from distsim_gpu.workloads.traces.replay import place_ranks

S = 64 * 2**20  # all-reduce bytes
B = 50e9
L = 1e-6
MEASURED_TRANSFER_US = 40.0
GEMM_US = {0: 100.0, 1: 300.0}
LAUNCH_US = 5.0  # launch call start -> kernel start


def switch(n: int = 2, bandwidth: float = B):
    return build_cluster({"preset": "switch", "gpus": n, "link_bandwidth": bandwidth,
                          "link_latency": L})


def ideal() -> CommParams:
    return CommParams(protocol="simple").ideal()


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}


def synthetic_rank(rank: int, *, skew_us: float = 0.0, world: int = 2) -> dict:
    """One rank's Kineto document (times in µs; ``skew_us`` shifts its clock)."""
    gemm = GEMM_US[rank]
    last_arrival = max(10 + LAUNCH_US + g for g in GEMM_US.values())
    nccl_start = 10 + LAUNCH_US + gemm
    nccl_end = last_arrival + MEASURED_TRANSFER_US
    sync_end = nccl_end + 3
    tail_launch = sync_end + 10
    tail_end = tail_launch + LAUNCH_US + 50
    events = [
        _x("user_annotation", "ProfilerStep#7", 0, tail_end + 5),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        _x("kernel", "ampere_sgemm_128x64_tn", 10 + LAUNCH_US, gemm, correlation=1,
           stream=7, device=rank),
        _x("cuda_runtime", "cudaEventRecord", 15, 1, correlation=2),
        _x("cuda_runtime", "cudaStreamWaitEvent", 17, 1, correlation=3),
        _x("user_annotation", "nccl:all_reduce", 19, 4),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 2, correlation=4),
        _x("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", nccl_start,
           nccl_end - nccl_start, correlation=4, stream=20, device=rank,
           **{"Collective name": "allreduce", "In msg nelems": S // 4,
              "Out msg nelems": S // 4, "dtype": "Float", "Group size": 2,
              "Process Group Ranks": "[0, 1]"}),
        _x("cuda_runtime", "cudaDeviceSynchronize", 25, sync_end - 25, correlation=5),
        _x("cuda_runtime", "cudaLaunchKernel", tail_launch, 3, correlation=6),
        _x("kernel", "vectorized_elementwise_kernel", tail_launch + LAUNCH_US, 50,
           correlation=6, stream=7, device=rank),
    ]
    for event in events:
        event["ts"] += skew_us
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world},
            "deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}]}


def synthetic(skew_us: float = 0.0):
    return [parse_trace(synthetic_rank(0), "rank0.json"),
            parse_trace(synthetic_rank(1, skew_us=skew_us), "rank1.json")]


def closed_form_transfer_s(n: int = 2, bandwidth: float = B) -> float:
    # Ring all-reduce: 2(n-1)/n·S/B + 2(n-1)·α, α = two links of latency L on ``switch``.
    return 2 * (n - 1) / n * S / bandwidth + 2 * (n - 1) * 2 * L


def test_measured_mode_reproduces_the_trace_exactly():
    result = replay_traces(synthetic(), switch(), ideal(), mode="measured")
    (step,) = result.steps
    for rank in step.ranks:
        assert rank.predicted_s == pytest.approx(rank.measured_s, abs=1e-12)
    assert step.measured_s == pytest.approx((max(GEMM_US.values()) + 10 + LAUNCH_US
                                             + MEASURED_TRANSFER_US + 3 + 10 + LAUNCH_US
                                             + 50 + 5) * 1e-6, rel=1e-12)


EPOCH_US = 1694128201429646.0  # DLRM's timestamps: µs since 1970, as Kineto writes them


def test_busy_times_at_epoch_timestamps_are_the_kernels_durations():
    """Per-rank compute is each kernel's own duration, in ``validate trace`` (measured and
    replayed) as in ``trace summary``: near 1.7e9 s a double keeps ~0.24 µs, and ends
    taken there had read DLRM's measured compute up to 1 % off the replay's."""
    traces = [parse_trace(synthetic_rank(r, skew_us=EPOCH_US), f"rank{r}.json")
              for r in (0, 1)]
    (step,) = replay_traces(traces, switch(), ideal(), mode="measured").steps
    for rank, row in zip(step.ranks, summarise(traces), strict=True):
        closed_form_s = (GEMM_US[rank.rank] + 50) * 1e-6
        assert rank.measured_compute_s == pytest.approx(closed_form_s, rel=1e-9)
        assert rank.predicted_compute_s == pytest.approx(closed_form_s, rel=1e-9)
        assert row.compute_s == pytest.approx(closed_form_s, rel=1e-9)
        assert row.communication_s == pytest.approx(rank.measured_communication_s, rel=1e-9)


def test_simulated_transfer_is_the_closed_form_and_shifts_everything_after_it():
    result = replay_traces(synthetic(), switch(), ideal())
    (step,) = result.steps
    (call,) = step.collectives
    transfer = closed_form_transfer_s()
    assert call.op == "all_reduce" and call.size_bytes == S and call.simulated
    assert call.predicted_transfer_s == pytest.approx(transfer, rel=1e-9)
    assert call.measured_transfer_s == pytest.approx(MEASURED_TRANSFER_US * 1e-6, rel=1e-9)
    # The blocking sync and the tail launched after it move by exactly the difference.
    delta = transfer - MEASURED_TRANSFER_US * 1e-6
    for rank in step.ranks:
        assert rank.predicted_s == pytest.approx(rank.measured_s + delta, rel=1e-9)
    # Waiting: rank 0 arrived 200 µs before rank 1, measured and predicted alike.
    assert call.measured_wait_s[0] == pytest.approx(200e-6, rel=1e-9)
    assert call.predicted_wait_s[0] == pytest.approx(200e-6, rel=1e-9)
    assert call.predicted_wait_s[1] == pytest.approx(0.0, abs=1e-12)


def test_deepep_kernels_count_as_communication_as_trace_summary_counts_them():
    """DeepEP's dispatch and combine kernels replay at their measured time (no collective to
    re-simulate them as) but count as communication in both columns, as ``trace summary``
    counts them; they had counted as compute, so the two commands disagreed on the same
    trace. Here the 50 µs tail kernel is DeepEP's combine."""
    docs = [synthetic_rank(0), synthetic_rank(1)]
    for doc in docs:
        tail = doc["traceEvents"][-1]
        assert tail["name"] == "vectorized_elementwise_kernel"
        tail["name"] = "void deep_ep::intranode::combine<8>(int)"
    traces = [parse_trace(doc, f"rank{r}.json") for r, doc in enumerate(docs)]
    (step,) = replay_traces(traces, switch(), ideal(), mode="measured").steps
    for rank, summary in zip(step.ranks, summarise(traces), strict=True):
        assert rank.measured_compute_s == pytest.approx(GEMM_US[rank.rank] * 1e-6, rel=1e-9)
        assert rank.measured_compute_s == pytest.approx(summary.compute_s, rel=1e-9)
        assert rank.measured_communication_s == pytest.approx(summary.communication_s,
                                                              rel=1e-9)
        assert rank.predicted_compute_s == pytest.approx(rank.measured_compute_s, rel=1e-9)
        assert rank.predicted_communication_s == pytest.approx(
            rank.measured_communication_s, rel=1e-9)


def test_replay_matches_the_communicator_with_default_parameters():
    result = replay_traces(synthetic(), switch(), CommParams())
    sim = Simulation()
    expected = Communicator(sim, switch(), CommParams()).estimate_s(
        "all_reduce", ["n0.gpu0", "n0.gpu1"], S)
    assert result.steps[0].collectives[0].predicted_transfer_s == pytest.approx(expected,
                                                                                rel=1e-9)


def test_a_slower_network_makes_the_iteration_longer_by_the_transfer_difference():
    fast = replay_traces(synthetic(), switch(bandwidth=B), ideal())
    slow = replay_traces(synthetic(), switch(bandwidth=B / 4), ideal())
    grown = slow.predicted_s - fast.predicted_s
    assert grown == pytest.approx(closed_form_transfer_s(bandwidth=B / 4)
                                  - closed_form_transfer_s(bandwidth=B), rel=1e-9)


def test_clock_skew_between_ranks_is_removed():
    skewed = replay_traces(synthetic(skew_us=5e6), switch(), ideal())
    plain = replay_traces(synthetic(), switch(), ideal())
    assert skewed.clock_offsets_s[1] == pytest.approx(5.0, abs=1e-9)
    assert skewed.predicted_s == pytest.approx(plain.predicted_s, rel=1e-9)
    assert skewed.measured_s == pytest.approx(plain.measured_s, rel=1e-9)


def test_a_missing_rank_arrives_with_the_present_ones_and_is_noted():
    result = replay_traces(synthetic()[:1], switch(), ideal())
    (call,) = result.steps[0].collectives
    assert call.predicted_wait_s == {0: 0.0}
    assert call.predicted_transfer_s == pytest.approx(closed_form_transfer_s(), rel=1e-9)
    assert any("1 of 2 ranks have no trace" in note for note in result.notes)


def _with_unlaunched_kernel(rank: int) -> dict:
    """Rank ``rank``'s document with a 3 µs kernel whose launching call the profiler lost
    (a correlation no runtime call has), 2 µs after the GEMM on its stream."""
    document = synthetic_rank(rank)
    gemm_end = 10 + LAUNCH_US + GEMM_US[rank]
    document["traceEvents"].append(_x("kernel", "vectorized_elementwise_kernel<add>",
                                      gemm_end + 2, 3, correlation=99, stream=7, device=rank))
    return document


def test_a_kernel_without_its_launch_is_replayed_as_the_steps_work():
    """The summary counts such a kernel as the GPU's compute; the replay must too (it had
    dropped it, so a DLRM rank read 1.255 ms of compute in one and 1.051 in the other)."""
    traces = [parse_trace(_with_unlaunched_kernel(r), f"rank{r}.json") for r in (0, 1)]
    measured = replay_traces(traces, switch(), ideal(), mode="measured")
    simulated = replay_traces(traces, switch(), ideal())
    for rank, summary in zip(measured.steps[0].ranks, summarise(traces), strict=True):
        assert rank.predicted_s == pytest.approx(rank.measured_s, abs=1e-12)
        assert rank.measured_compute_s == pytest.approx(summary.compute_s, abs=1e-12)
        assert rank.measured_compute_s == pytest.approx(
            (GEMM_US[rank.rank] + 3 + 50) * 1e-6, rel=1e-9)
    plain = replay_traces(synthetic(), switch(), ideal())
    assert simulated.predicted_s == pytest.approx(plain.predicted_s, rel=1e-12)
    assert any("2 GPU ops have no launching call" in note for note in simulated.notes)
    assert not any("launching call" in note for note in plain.notes)


def test_stream_wait_event_ties_the_nccl_kernel_to_the_gemm():
    # cudaEventRecord after the GEMM's launch, cudaStreamWaitEvent before the NCCL launch:
    # the all-reduce depends on the GEMM, and that wait explains its whole measured start
    # (no fixed delay is left to pin it in a what-if).
    from distsim_gpu.workloads.traces.kineto_graph import build_rank_step

    trace = synthetic()[0]
    graph = build_rank_step(trace, trace.steps[0], 0.0, trace.steps[0].start_s)
    (nccl,) = [op for op in graph.ops if "nccl" in op.kernel.name]
    (gemm,) = [op for op in graph.ops if "sgemm" in op.kernel.name]
    assert nccl.deps == [gemm]
    assert nccl.delay_s == pytest.approx(0.0, abs=1e-12)
    result = replay_traces(synthetic(), switch(), ideal())
    spans = {s.name.split("_")[0]: s for s in result.predicted_spans
             if s.process == "rank 0 · replayed"}
    assert spans["ncclKernel"].start_s == pytest.approx(spans["ampere"].end_s, abs=1e-12)


def test_communicator_op_names():
    from distsim_gpu.measured.records import GpuEvent

    def kernel(**kw):
        return GpuEvent("ncclKernel", "communication", 0.0, 1.0, **kw)

    assert communicator_op(kernel(collective="all_gather", comm_op="_allgather_base")) \
        == "all_gather"
    assert communicator_op(kernel(collective="reduce_scatter",
                                  comm_op="_reduce_scatter_base")) == "reduce_scatter"
    assert communicator_op(kernel(collective="sendrecv")) is None


def test_bad_inputs_give_clear_errors():
    with pytest.raises(ConfigError, match="two traces of rank 0"):
        replay_traces([synthetic()[0], synthetic()[0]], switch())
    document = synthetic_rank(0)
    document["traceEvents"] = [e for e in document["traceEvents"]
                               if not e["name"].startswith("ProfilerStep")]
    with pytest.raises(ConfigError, match="no ProfilerStep"):
        replay_traces([parse_trace(document, "r0.json")], switch())
    with pytest.raises(ConfigError, match="has 1 nodes"):
        replay_traces(synthetic(), switch(1))
    with pytest.raises(ConfigError, match="no step 3 in every trace"):
        replay_traces(synthetic(), switch(), steps=[3])
    with pytest.raises(ConfigError, match="unknown replay mode"):
        replay_traces(synthetic(), switch(), mode="guess")
    with pytest.raises(ConfigError, match=r"ranks per node must be 1\.\.2"):
        place_ranks(switch(), 2, 3)


def test_place_ranks_fills_nodes_in_order():
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    assert place_ranks(topo, 2, 1) == ["n0.gpu0", "n1.gpu0"]
    assert place_ranks(topo, 3) == ["n0.gpu0", "n0.gpu1", "n0.gpu2"]


# --------------------------------------------------------------------------- CLI


def _write(tmp_path: Path) -> list[str]:
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json.gz"
        with gzip.open(path, "wt") as handle:
            json.dump(synthetic_rank(rank), handle)
        paths.append(str(path))
    return paths


def test_cli_json_has_iteration_and_ranks(tmp_path, capsys):
    paths = _write(tmp_path)
    code = main(["validate", "trace", *paths, "--cluster", "switch", "--set", "gpus=2",
                 "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["iteration"]) == {"measured_s", "predicted_s", "error_pct"}
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for row in data["ranks"]:
        assert set(row) >= {"rank", "measured_s", "predicted_s", "error_pct"}
        assert row["compute"]["error_pct"] == pytest.approx(0.0, abs=1e-9)  # as measured
        assert set(row["comm_wait"]) == {"measured_s", "predicted_s", "error_pct"}
    assert data["collectives"][0]["op"] == "all_reduce"
    assert data["collectives"][0]["size_bytes"] == S


def test_cli_out_writes_report_summary_and_side_by_side_trace(tmp_path, capsys):
    paths = _write(tmp_path)
    out = tmp_path / "out"
    assert main(["validate", "trace", *paths, "--cluster", "switch", "--set", "gpus=2",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Iteration" in text and "Collectives" in text
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "summary.txt",
                                                     "trace.json"]
    trace = json.loads((out / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"rank 0 · measured", "rank 0 · replayed", "rank 1 · measured",
                     "rank 1 · replayed"}


def test_cli_errors_are_one_line_not_tracebacks(tmp_path, capsys):
    paths = _write(tmp_path)
    assert main(["validate", "trace", paths[0], paths[0], "--cluster", "switch",
                 "--set", "gpus=2"]) == 2
    err = capsys.readouterr().err
    assert "two traces of rank 0" in err and "Traceback" not in err


# --------------------------------------------------------------------------- corpus


@pytest.fixture(scope="module")
def dlrm(trace_corpus):
    return load_traces([trace_corpus.dlrm])


def test_dlrm_measured_replay_reproduces_every_rank(dlrm):
    topo = build_cluster({"preset": "dgx1-v100"})
    result = replay_traces(dlrm, topo, mode="measured")
    (step,) = result.steps
    assert [r.rank for r in step.ranks] == list(range(8))
    for rank in step.ranks:
        assert abs(rank.error_pct) < 0.05, rank
    assert all(abs(v) < 1e-5 for v in result.clock_offsets_s.values())


def test_dlrm_simulated_iteration_within_five_percent(dlrm):
    topo = build_cluster({"preset": "dgx1-v100"})
    result = replay_traces(dlrm, topo)
    assert result.measured_s == pytest.approx(19.901e-3, abs=1e-6)
    assert abs(result.error_pct) < 5.0
    (step,) = result.steps
    assert sorted(c.op for c in step.collectives) == ["all_reduce"] * 3 + ["alltoall"] * 5
    assert all(c.simulated for c in step.collectives)


def test_dlrm_on_a_slow_network_is_slower(dlrm):
    slow = build_cluster({"preset": "switch", "gpus": 8, "link_bandwidth": 1e8,
                          "link_latency": 1e-6})
    result = replay_traces(dlrm, slow)
    # 1.5 MiB all-reduce at 0.1 GB/s per link: ~26 ms of transfer the trace never saw.
    assert result.predicted_s > result.measured_s + 20e-3


def test_ddp_trace_replays_three_steps_with_a_mirrored_peer(trace_corpus):
    traces = load_traces([trace_corpus.hta / "nccl_parser_config/nccl_data.json.gz"])
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    result = replay_traces(traces, topo, ranks_per_node=1)
    assert [s.step for s in result.steps] == [4, 5, 6]
    assert sum(len(s.collectives) for s in result.steps) == 21
    assert abs(result.error_pct) < 5.0
    measured = replay_traces(traces, topo, ranks_per_node=1, mode="measured")
    for step in measured.steps:
        assert abs(step.error_pct) < 0.01


def test_pipelined_steps_take_the_profiler_step_not_the_gpu_span(trace_corpus):
    # TorchRec pipelines steps over streams: one step's GPU work ends ~160 ms into the
    # next. The step time is the ProfilerStep length (SOURCES.txt: 209.7-216.5 ms).
    traces = load_traces([trace_corpus.hta / "negative_queue_length_values_check/rank0.json.gz"])
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    result = replay_traces(traces, topo, mode="measured")
    assert [round(s.measured_s * 1e3, 1) for s in result.steps] == [
        round(s.duration_s * 1e3, 1) for s in traces[0].steps]
    assert all(209.6e-3 <= s.measured_s <= 216.6e-3 for s in result.steps)
    assert all(abs(s.error_pct) < 0.01 for s in result.steps)


def test_predicted_step_moves_by_the_later_side():
    assert predicted_step_s(0.1, 0.002, -0.001) == pytest.approx(0.102)
    assert predicted_step_s(0.1, -0.003, -0.001) == pytest.approx(0.099)
    assert predicted_step_s(0.1, 0.0, 0.05) == pytest.approx(0.15)


def _cpu_bound_rank(rank: int) -> dict:
    """The synthetic rank with 5 ms of host work before its last kernel: the GPU idles
    most of the step."""
    doc = synthetic_rank(rank)
    events = doc["traceEvents"]
    for event in events[-2:]:
        event["ts"] += 5000
    events[0]["dur"] += 5000
    return doc


def test_validate_trace_headline_says_cpu_bound_and_collectives_off(tmp_path, capsys):
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(_cpu_bound_rank(rank)))
        paths.append(str(path))
    args = ["validate", "trace", *paths, "--cluster", "switch", "--set", "gpus=2"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kinds = [n["kind"] for n in data["run_notes"]]
    assert kinds == ["headline", "headline"]
    cpu, comm = (n["message"] for n in data["run_notes"])
    assert "CPU-bound" in cpu and "idle" in cpu
    # measured 40 us against the ring's closed form for 64 MiB at 50 GB/s
    median = data["collective_transfer_error_pct"]["median_abs"]
    assert median > 100 and f"off by {median:.1f} %" in comm
    assert main(args) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[1].startswith("note: headline: the step is CPU-bound")
    # The plain synthetic step keeps its GPU busy: no CPU-bound note.
    (tmp_path / "busy").mkdir()
    assert main(["validate", "trace", *_write(tmp_path / "busy"), "--cluster", "switch",
                 "--set", "gpus=2", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["run_notes"]
    assert not [n for n in notes if "CPU-bound" in n["message"]]


@pytest.mark.parametrize(("gpu", "box"), [
    ("NVIDIA H100 80GB HBM3", "dgx-h100"), ("NVIDIA H200", "dgx-h200"),
    ("NVIDIA GH200 480GB", "quad-gh200"), ("NVIDIA H800", "dgx-h100")])
def test_the_default_cluster_is_the_box_the_traces_gpu_comes_in(gpu, box):
    """An H200 trace replays on DGX H200 (it took DGX H100, before that preset existed);
    a GH200's name holds 'h200' too and still gets its own box."""
    doc = synthetic_rank(0)
    doc["deviceProperties"] = [{"name": gpu}]
    preset, why = default_cluster([parse_trace(doc, "rank0.json")])
    assert (preset, why) == (box, f"{box} (the box of the traces' {gpu})")
