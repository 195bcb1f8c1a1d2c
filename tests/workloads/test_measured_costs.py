"""``distsim trace costs``: cost tables from Kineto traces (a synthetic one with known
times, the real corpus) and from distsim's own trace.json, round-tripped through a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from distsim_gpu.measured.distsim_trace import DistsimTrace
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import TableCosts, read_cost_table
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.traces.measured_costs import (
    ExtractOptions,
    costs_from_distsim,
    extract_costs,
)

US = 1e-6


class KinetoBuilder:
    """Kineto trace events (µs) with launch correlations, as the PyTorch profiler writes."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.correlation = 0

    def cpu(self, name: str, cat: str, ts: float, dur: float, tid: int,
            **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid,
                            "ts": ts, "dur": dur, "args": args})

    def op(self, name: str, ts: float, dur: float, tid: int, seq: int | None = None,
           fwd_tid: int | None = None) -> None:
        args: dict[str, Any] = {}
        if seq is not None:
            args["Sequence number"] = seq
        if fwd_tid is not None:
            args["Fwd thread id"] = fwd_tid
        self.cpu(name, "cpu_op", ts, dur, tid, **args)

    def launch(self, ts: float, tid: int, gpu_dur: float, name: str = "sm80_gemm",
               cat: str = "kernel", gpu_ts: float | None = None, stream: int = 7) -> None:
        """A cudaLaunchKernel at ``ts`` on ``tid`` and the GPU event it launched (at
        ``gpu_ts`` on ``stream``; by default 1 ms after the previous one's start)."""
        self.correlation += 1
        self.cpu("cudaLaunchKernel", "cuda_runtime", ts, 1.0, tid,
                 correlation=self.correlation)
        start = 10_000.0 + self.correlation * 1000.0 if gpu_ts is None else gpu_ts
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                            "ts": start, "dur": gpu_dur,
                            "args": {"correlation": self.correlation, "stream": stream,
                                     "device": 0}})

    def write(self, path: Path) -> Path:
        data = {"schemaVersion": 1, "traceEvents": self.events,
                "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
                "distributedInfo": {"rank": 0, "world_size": 1}}
        path.write_text(json.dumps(data), encoding="utf-8")
        return path


def two_layer_trace(path: Path) -> Path:
    """Two GPT-2 blocks, forward and backward, and a second step with block 0 alone.

    Forward GPU time per instance: block 0 10 + 5 µs (an NCCL kernel launched in it does
    not count), block 1 20 µs + a 5 µs memcpy (counts), block 0 in step 2 70 µs; the loss
    kernel outside any block does not count.  Block 1 is wrapped in a matching
    ``ParallelTransformerLayer`` record_function: only the outer scope counts.
    Backward (autograd thread 2): ops with block 0's sequence numbers 10 and 11 launch
    7 + 13 + 10 µs (the evaluate_function wrapper and the node op nest, counted once);
    sequence 20 (block 1) 44 µs; sequence 99 (no forward in a block) 1000 µs, not counted.
    Block 0 of step 2 ran without grad (no sequence numbers): no backward instance.
    """
    t = KinetoBuilder()
    t.cpu("ProfilerStep#1", "user_annotation", 0, 1000, 1)
    t.cpu("nn.Module: GPT2Block_0", "python_function", 10, 100, 1)
    t.op("aten::mm", 12, 20, 1, seq=10)
    t.launch(14, 1, 10)
    t.op("aten::gelu", 40, 20, 1, seq=11)
    t.launch(42, 1, 5)
    t.cpu("nccl:all_reduce", "user_annotation", 70, 10, 1)
    t.launch(72, 1, 40, name="ncclKernel_AllReduce_RING_LL_Sum_bfloat16")
    t.cpu("ParallelTransformerLayer", "user_annotation", 195, 110, 1)
    t.cpu("nn.Module: GPT2Block_1", "python_function", 200, 100, 1)
    t.op("aten::mm", 210, 20, 1, seq=20)
    t.launch(212, 1, 20)
    t.launch(220, 1, 5, name="Memcpy DtoD (Device -> Device)", cat="gpu_memcpy")
    t.op("aten::cross_entropy", 400, 20, 1, seq=21)
    t.launch(405, 1, 100)
    t.op("autograd::engine::evaluate_function: GeluBackward0", 500, 30, 2, seq=11, fwd_tid=1)
    t.op("GeluBackward0", 502, 20, 2, seq=11, fwd_tid=1)
    t.launch(505, 2, 7)
    t.op("autograd::engine::evaluate_function: MmBackward0", 540, 30, 2, seq=10, fwd_tid=1)
    t.launch(545, 2, 13)
    t.launch(550, 2, 10)
    t.op("autograd::engine::evaluate_function: MmBackward0", 600, 30, 2, seq=20, fwd_tid=1)
    t.launch(605, 2, 44)
    t.op("autograd::engine::evaluate_function: CrossEntropyBackward0", 650, 30, 2, seq=99,
         fwd_tid=1)
    t.launch(655, 2, 1000)
    t.cpu("ProfilerStep#2", "user_annotation", 1000, 1000, 1)
    t.cpu("nn.Module: GPT2Block_0", "python_function", 1010, 100, 1)
    t.op("aten::mm", 1012, 20, 1)
    t.launch(1014, 1, 70)
    return t.write(path)


SHAPE = {"micro_batch": 2, "seq_len": 1024, "hidden": 768}


def test_kineto_layer_times_are_medians_of_scope_instances(tmp_path):
    extracted = extract_costs([two_layer_trace(tmp_path / "rank0.json")], ExtractOptions(**SHAPE))
    rows = {r.pass_: r for r in extracted.rows}
    assert set(rows) == {"fwd", "bwd"}
    assert rows["fwd"].time_s == pytest.approx(25 * US, rel=1e-12)  # median of 15, 25, 70
    assert rows["bwd"].time_s == pytest.approx(37 * US, rel=1e-12)  # median of 30, 44
    for row in rows.values():
        assert (row.gpu, row.kind, row.micro_batch, row.seq_len, row.hidden, row.tp,
                row.sequence_parallel) == ("a100-80gb", "transformer_layer", 2, 1024, 768,
                                           1, False)
    assert [len(s.times_s) for s in extracted.samples] == [3, 2]
    assert "transformer_layer fwd: 3 instance(s), 0.015..0.07 ms" in extracted.header.notes
    assert extracted.warnings == ()


def test_cli_writes_a_table_a_scenario_reads(tmp_path, capsys):
    trace = two_layer_trace(tmp_path / "rank0.json")
    out = tmp_path / "costs.yaml"
    status = main(["trace", "costs", str(trace), "-o", str(out), "--model", "bert-large",
                   "--micro-batch", "2", "--seq-len", "1024", "--tp", "1", "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["output"] == str(out)
    assert [(r["pass"], r["instances"]) for r in printed["rows"]] == [("fwd", 3), ("bwd", 2)]
    header, rows = read_cost_table(out)
    assert header.gpu == "a100-80gb" and header.model == "bert-large"
    assert header.software == "PyTorch profiler (Kineto) trace"
    assert str(trace) in header.source
    costs = TableCosts(header, rows)
    assert costs.lookup("transformer_layer", "bwd", micro_batch=2, seq_len=1024,
                        hidden=1024) == pytest.approx(37 * US, rel=1e-12)


def test_recomputed_scope_inside_backward_is_the_recompute_pass(tmp_path):
    """Reentrant checkpointing: block 0 runs without grad (10 µs), then again inside
    CheckpointFunctionBackward on the autograd thread (12 µs: recompute), whose ops'
    backward (sequence 40) launches 24 µs."""
    t = KinetoBuilder()
    t.cpu("nn.Module: LlamaDecoderLayer_0", "python_function", 10, 100, 1)
    t.op("aten::mm", 12, 20, 1)
    t.launch(14, 1, 10)
    t.op("autograd::engine::evaluate_function: CheckpointFunctionBackward", 500, 200, 2,
         seq=5, fwd_tid=1)
    t.cpu("nn.Module: LlamaDecoderLayer_0", "python_function", 510, 50, 2)
    t.op("aten::mm", 512, 10, 2, seq=40)
    t.launch(514, 2, 12)
    t.op("autograd::engine::evaluate_function: MmBackward0", 600, 30, 2, seq=40, fwd_tid=2)
    t.launch(605, 2, 24)
    extracted = extract_costs([t.write(tmp_path / "ckpt.json")], ExtractOptions(**SHAPE))
    times = {r.pass_: r.time_s for r in extracted.rows}
    assert times == pytest.approx({"fwd": 10 * US, "bwd": 24 * US, "recompute": 12 * US},
                                  rel=1e-12)


def test_no_backward_writes_forward_rows_with_a_warning(tmp_path, capsys):
    t = KinetoBuilder()
    t.cpu("nn.Module: BertLayer_0", "python_function", 10, 100, 1)
    t.op("aten::addmm", 12, 20, 1)
    t.launch(14, 1, 9)
    out = tmp_path / "costs.csv"
    status = main(["trace", "costs", str(t.write(tmp_path / "bert.json")), "-o", str(out),
                   "--micro-batch", "8", "--seq-len", "512", "--hidden", "1024",
                   "--gpu", "h100-sxm"])
    captured = capsys.readouterr()
    assert status == 0
    assert "distsim: warning: no backward found" in captured.err
    header, rows = read_cost_table(out)
    assert [(r.gpu, r.pass_, r.hidden) for r in rows] == [("h100-sxm", "fwd", 1024)]
    assert rows[0].time_s == pytest.approx(9 * US, rel=1e-12)
    assert "no backward found" in header.notes


def test_missing_shape_options_are_named(tmp_path, capsys):
    trace = two_layer_trace(tmp_path / "rank0.json")
    with pytest.raises(ConfigError, match=r"give --micro-batch, --hidden or --model") as err:
        extract_costs([trace], ExtractOptions(seq_len=1024))
    assert err.value.key == "--micro-batch"
    out = tmp_path / "costs.yaml"
    assert main(["trace", "costs", str(trace), "-o", str(out)]) == 2
    assert "does not say its shape" in capsys.readouterr().err and not out.exists()


def test_unknown_layer_kind_is_named(tmp_path):
    trace = two_layer_trace(tmp_path / "rank0.json")
    with pytest.raises(ConfigError) as err:
        extract_costs([trace], ExtractOptions(kind="transformer", **SHAPE))
    assert str(err.value).startswith("--kind: unknown layer kind 'transformer' (did you mean "
                                     "'transformer_layer'? valid: moe_layer, transformer_layer)")


def test_unmatched_layer_pattern_lists_the_annotations(tmp_path):
    trace = two_layer_trace(tmp_path / "rank0.json")
    with pytest.raises(ConfigError, match=r"no layer scope matches --layer 'MyBlock'") as err:
        extract_costs([trace], ExtractOptions(layer="MyBlock", **SHAPE))
    assert err.value.hint is not None
    assert "'nn.Module: GPT2Block_0' ×2" in err.value.hint


@pytest.mark.parametrize("option, value", [("layer", "("), ("operators", "(")])
def test_an_invalid_regex_is_named_by_its_option(tmp_path, option, value):
    trace = two_layer_trace(tmp_path / "rank0.json")
    with pytest.raises(ConfigError, match=r"not a regular expression") as err:
        extract_costs([trace], ExtractOptions(**{option: value}, **SHAPE))
    assert err.value.key == f"--{option}"


@pytest.mark.parametrize("name, annotation", [
    ("HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz",
     "'nccl:all_reduce' ×15"),
    ("param/et_replay/tests/inputs/dlrm_kineto.tar.gz", "'nccl:all_to_all' ×40"),
])
def test_corpus_traces_have_no_transformer_layer(tmp_path, capsys, trace_corpus, name,
                                                 annotation):
    out = tmp_path / "costs.yaml"
    status = main(["trace", "costs", str(trace_corpus.root / name), "-o", str(out), "--model",
                   "gpt3-175b", "--micro-batch", "1", "--seq-len", "2048"])
    err = capsys.readouterr().err
    assert status == 2 and not out.exists()
    assert "no layer scope matches the default --layer pattern" in err
    assert annotation in err and "Traceback" not in err


# ------------------------------------------------------------------ distsim round trip
VARIANTS = {
    "tp-pp-dp": {},
    "straggler-full-recompute": {"training": {"recompute": "full"},
                                 "stragglers": {"n0.gpu3": 1.25}},
    "selective-recompute-sp": {"training": {"recompute": "selective"},
                               "parallelism": {"sequence_parallel": True}},
    "moe": {"model": {"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8,
                      "seq_len": 128, "vocab": 1024, "experts": 4, "top_k": 2},
            "parallelism": {"tp": 2, "pp": 2, "dp": 2, "ep": 2}},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_costs_from_a_run_reproduce_the_run(tmp_path, capsys, name, tiny, write_scenario):
    """Run, extract the table from its trace.json, run again on the table: the same
    iteration.  Times pass through the trace as µs (×1e6, /1e6) and a layer's two halves
    are summed back, a few ulp per layer time; an iteration adds ~10² of them, so 1e-12
    relative is far above rounding and far below any modelling difference."""
    data = tiny(**VARIANTS[name])
    scenario = write_scenario(tmp_path / "run.yaml", data)
    original = load_scenario(scenario)
    first = run_scenario(original, trace=True)
    assert first.tracer is not None
    trace = tmp_path / "trace.json"
    trace.write_text(first.tracer.to_json(), encoding="utf-8")  # as 'distsim run --out'
    table = tmp_path / "costs.yaml"
    assert main(["trace", "costs", str(trace), "-o", str(table)]) == 0
    capsys.readouterr()

    header, rows = read_cost_table(table)
    assert header.gpu == "a100-80gb" and header.model == data["model"]["name"]
    model, train, par = original.model, original.training, original.parallel
    shard = {"micro_batch": train.micro_batch, "seq_len": train.seq_len or model.seq_len,
             "tp": par.tp, "sequence_parallel": par.sequence_parallel}
    kind = "moe_layer" if name == "moe" else "transformer_layer"
    recompute = {"full": "recompute", "selective": "recompute_selective"}.get(
        train.recompute)
    # The roofline's MoE time depends on ep, which a table does not key: the extracted
    # table holds this run's ep.
    layer = LayerShard(ep=par.ep, **shard)
    expected = {(kind, "fwd"): original.costs.layer_time_s("fwd", model, layer),
                (kind, "bwd"): original.costs.layer_time_s("bwd", model, layer)}
    if recompute:
        expected[(kind, recompute)] = original.costs.layer_time_s(
            "recompute", model, LayerShard(recompute=train.recompute, ep=par.ep, **shard))
    for edge in ("embedding", "loss"):
        method = getattr(original.costs, f"{edge}_time_s")
        for pass_ in ("fwd", "bwd"):
            expected[(edge, pass_)] = method(pass_, model, **shard)
    assert {(r.kind, r.pass_): r.time_s for r in rows} == pytest.approx(expected, rel=1e-12)

    data["compute"] = {**data["compute"], "costs": str(table)}
    again = run_scenario(load_scenario(write_scenario(tmp_path / "again.yaml", data)))
    assert again.iteration_time_s == pytest.approx(first.iteration_time_s, rel=1e-12)
    for gpu, before in zip(again.per_gpu, first.per_gpu, strict=True):
        assert gpu.compute_s == pytest.approx(before.compute_s, rel=1e-12)


def test_a_distsim_trace_records_its_own_shape(tmp_path, tiny, write_scenario):
    scenario = write_scenario(tmp_path / "run.yaml", tiny())
    report = run_scenario(load_scenario(scenario), trace=True)
    assert report.tracer is not None
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trace.json").write_text(report.tracer.to_json(), encoding="utf-8")
    # A directory (a 'distsim run --out' folder): its trace.json is found and read whole.
    extracted = extract_costs([tmp_path / "out"], ExtractOptions(seq_len=4096, gpu="h100-sxm"))
    assert {(r.gpu, r.micro_batch, r.seq_len, r.hidden, r.tp) for r in extracted.rows} == {
        ("h100-sxm", 1, 128, 256, 2)}
    assert extracted.warnings == ("--seq-len ignored: a distsim trace records its shape",)
    # 4 layers × 4 micro-batches × 2 replicas per pass; edges once per micro-batch and replica.
    assert [(s.kind, s.pass_, len(s.times_s)) for s in extracted.samples] == [
        ("transformer_layer", "fwd", 32), ("transformer_layer", "bwd", 32),
        ("embedding", "fwd", 8), ("embedding", "bwd", 8), ("loss", "fwd", 8),
        ("loss", "bwd", 8)]


def test_a_distsim_trace_without_a_whole_shape_names_the_metadata_key():
    meta = {"micro_batch": 2, "seq_len": 8, "hidden": 16, "tp": 0, "microbatches": 1}
    trace = DistsimTrace("run.json", meta, (), ())
    with pytest.raises(ConfigError) as err:
        costs_from_distsim([trace])
    assert str(err.value).startswith("run.json: otherData.distsim.tp: must be a whole number "
                                     ">= 1, got 0 (the trace's run metadata;")


def test_a_gpu_the_scenario_cannot_select_is_refused_by_name(tmp_path, capsys):
    """The trace spells its GPU 'NVIDIA H20' (no preset, nor an alias of one), so a table
    keyed by it would be refused by every scenario; --gpu names the GPU, and then the
    scenario reads it.  An H800 is an H100 SXM to the cost model (the alias)."""
    trace = two_layer_trace(tmp_path / "rank0.json")
    data = json.loads(trace.read_text())
    data["deviceProperties"][0]["name"] = "NVIDIA H20"
    trace.write_text(json.dumps(data))
    out = tmp_path / "costs.yaml"
    shape = ["--micro-batch", "2", "--seq-len", "1024", "--hidden", "768"]
    assert main(["trace", "costs", str(trace), "-o", str(out), *shape]) == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and "'nvidia h20' is not a GPU preset" in err
    assert "h100-sxm" in err and not out.exists()
    assert main(["trace", "costs", str(trace), "-o", str(out), *shape,
                 "--gpu", "h100-sxm"]) == 0
    header, rows = read_cost_table(out)
    assert TableCosts(header, rows, gpu="h100-sxm").gpu == "h100-sxm"
    data["deviceProperties"][0]["name"] = "NVIDIA H800"
    trace.write_text(json.dumps(data))
    assert main(["trace", "costs", str(trace), "-o", str(out), *shape]) == 0
    header, rows = read_cost_table(out)
    assert {row.gpu for row in rows} == {"h100-sxm"}


def test_a_model_that_is_no_preset_is_refused(tmp_path, capsys):
    trace = two_layer_trace(tmp_path / "rank0.json")
    out = tmp_path / "costs.yaml"
    assert main(["trace", "costs", str(trace), "-o", str(out), "--micro-batch", "2",
                 "--seq-len", "1024", "--hidden", "768", "--model", "bert-larg"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "bert-large" in err and not out.exists()
