"""``validate trace --operators``: annotated scopes measured from a trace and predicted from
a scenario's roofline, operator by operator."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.validate_operators import validate_operators
from distsim_gpu.scenarios.scenario import load_scenario as load_scenario_file
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.traces.measured_costs import scope_gpu_times

from tests.workloads.test_measured_costs import KinetoBuilder

US = 1e-6
SCENARIO = {
    "name": "moe", "cluster": {"preset": "dgx-a100", "nodes": 1},
    "model": {"name": "m", "layers": 2, "hidden": 1024, "heads": 16, "seq_len": 512,
              "vocab": 1000, "experts": 8, "top_k": 2},
    "parallelism": {"tp": 1, "dp": 8, "ep": 8},
    "training": {"micro_batch": 1, "global_batch": 8},
    "compute": {"gpu": "a100-80gb"},
}


def dualpipe_trace(path):
    """attn(F) twice (20 and 40 µs of kernels), mlp(W) once (10 µs), dispatch(F) with a
    DeepEP kernel (30 µs, communication) and a 4 µs copy; attn(B) launched by the autograd
    thread (16 µs) while the main thread's scope launches nothing; mlp(B) (8 µs)."""
    t = KinetoBuilder()
    t.cpu("attn(F)", "user_annotation", 0, 50, 1)
    t.launch(5, 1, 20)
    t.cpu("attn(F)", "user_annotation", 100, 50, 1)
    t.launch(105, 1, 40)
    t.cpu("mlp(W)", "user_annotation", 200, 50, 1)
    t.launch(205, 1, 10)
    t.cpu("dispatch(F)", "user_annotation", 300, 50, 1)
    t.launch(305, 1, 30, name="void dpsk::ep::internode::dispatch<8>(int)")
    t.launch(310, 1, 4)
    t.cpu("attn(B)", "user_annotation", 400, 50, 1)
    t.launch(405, 2, 16)
    t.cpu("unrelated", "user_annotation", 500, 50, 1)
    t.launch(505, 1, 1000)
    t.cpu("mlp(B)", "user_annotation", 600, 50, 1)
    t.launch(605, 1, 8)
    return t.write(path)


def test_scope_times_split_communication_kernels(tmp_path):
    traces = load_traces([dualpipe_trace(tmp_path / "r0.json")])
    times = scope_gpu_times(traces, r"^(attn|mlp|dispatch)\(.\)$", exclude="dpsk::ep")
    assert times["attn(F)"] == [(pytest.approx(20 * US), 0.0), (pytest.approx(40 * US), 0.0)]
    assert times["mlp(W)"] == [(pytest.approx(10 * US), 0.0)]
    assert times["dispatch(F)"] == [(pytest.approx(4 * US), pytest.approx(30 * US))]
    assert times["attn(B)"] == [(pytest.approx(16 * US), 0.0)]  # the autograd thread's
    assert "unrelated" not in times


def test_a_scope_on_two_streams_counts_the_time_its_kernels_hold_the_gpu(tmp_path):
    """DeepSeek's expert weight gradients run on two streams at once: a scope is measured
    by the union of its kernels' intervals (a 30 µs kernel on stream 7 and a 20 µs one
    starting 10 µs later on stream 23: 30 µs, not 50), communication kernels apart and
    likewise (two overlapping DeepEP kernels, 5 + 10 µs from 0 to 12: 12 µs)."""
    t = KinetoBuilder()
    t.cpu("mlp(W)", "user_annotation", 0, 50, 1)
    t.launch(1, 1, 30, gpu_ts=1000.0)
    t.launch(2, 1, 20, gpu_ts=1010.0, stream=23)
    t.launch(3, 1, 4, gpu_ts=1100.0)
    t.launch(4, 1, 5, name="dpsk::ep::combine", gpu_ts=2000.0, stream=30)
    t.launch(5, 1, 10, name="dpsk::ep::notify", gpu_ts=2002.0, stream=31)
    traces = load_traces([t.write(tmp_path / "r0.json")])
    ((compute, comm),) = scope_gpu_times(traces, r"^mlp\(W\)$", exclude="dpsk::ep")["mlp(W)"]
    assert compute == pytest.approx(34 * US)
    assert comm == pytest.approx(12 * US)


def test_each_scope_predicted_from_its_operators(tmp_path):
    traces = load_traces([dualpipe_trace(tmp_path / "r0.json")])
    scenario = scenario_from_mapping(SCENARIO)
    data = validate_operators(traces, scenario)
    rows = {r["scope"]: r for r in data["rows"]}
    assert rows["attn(F)"]["measured_s"] == pytest.approx(30 * US)  # median of 20, 40
    # A MoE layer's norm and router run before its dispatch: the attention block's.
    assert rows["attn(F)"]["operators"] == ["input_norm", "qkv", "attention", "attn_out",
                                            "attn_residual", "post_attn_norm", "router"]
    # W is the weight gradients only; B everything else of the backward.
    assert rows["mlp(W)"]["operators"] == ["expert_fc2.wgrad", "expert_fc1.wgrad"]
    # The token copies around the all-to-alls are the MLP block's; the all-to-alls' own
    # scopes have no operator to predict, no error, and stay out of the mean.
    assert {"moe_combine.bwd", "moe_dispatch.bwd"} <= set(rows["mlp(B)"]["operators"])
    assert rows["dispatch(F)"]["operators"] == []
    assert rows["dispatch(F)"]["predicted_s"] == 0 and rows["dispatch(F)"]["error_pct"] is None
    assert data["mean_abs_error_pct"] == pytest.approx(statistics.fmean(
        abs(r["error_pct"]) for r in rows.values() if r["operators"]))
    assert not any(name.endswith(".wgrad") for name in rows["attn(B)"]["operators"])
    costs = scenario.roofline
    fwd = costs.layer_work("fwd", scenario.model, LayerShard(micro_batch=1, seq_len=512, ep=8))
    expected = sum(costs.kernel_time_s(fwd.kernel(n)) for n in rows["attn(F)"]["operators"])
    assert rows["attn(F)"]["predicted_s"] == pytest.approx(expected, rel=1e-12)
    assert rows["attn(F)"]["error_pct"] == pytest.approx(
        100 * (expected - 30 * US) / (30 * US))
    assert rows["dispatch(F)"]["excluded_s"] == pytest.approx(30 * US)


def test_cli_and_a_trace_without_scopes(tmp_path, capsys):
    trace = dualpipe_trace(tmp_path / "r0.json")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    assert main(["validate", "trace", str(trace), "--operators", str(scenario)]) == 0
    out = capsys.readouterr().out
    assert "attn(F)" in out and "mean |error|" in out
    # The operators column reads from the left: a short list is not padded to the longest.
    (dispatch,) = [line for line in out.splitlines() if line.startswith("  dispatch(F)")]
    assert dispatch.endswith("  -") and "   -" not in dispatch[-6:]
    empty = KinetoBuilder()
    empty.cpu("forward", "user_annotation", 0, 10, 1)
    empty.launch(1, 1, 5)
    with pytest.raises(ConfigError, match="no annotated operator scope"):
        validate_operators(load_traces([empty.write(tmp_path / "e.json")]),
                           scenario_from_mapping(SCENARIO))


def test_trace_costs_per_operator_fill_a_table_the_roofline_completes(tmp_path):
    from distsim_gpu.workloads.cost.compute import RooflineCosts, TableCosts, read_cost_table
    from distsim_gpu.workloads.specs.gpus import get_gpu
    from distsim_gpu.workloads.specs.models import ModelSpec

    t = KinetoBuilder()
    for start, (scope, gpu_us) in enumerate((("qkv(F)", 20), ("qkv(B)", 10), ("qkv(W)", 5),
                                             ("qkv(F)", 40), ("qkv(B)", 12), ("qkv(W)", 7),
                                             ("attn_softmax", 3))):
        t.cpu(scope, "user_annotation", 100 * start, 50, 1)
        t.launch(100 * start + 5, 1, gpu_us)
    out = tmp_path / "ops.yaml"
    assert main(["trace", "costs", str(t.write(tmp_path / "r0.json")), "-o", str(out),
                 "--operators", r"^(qkv|attn_softmax)", "--micro-batch", "1",
                 "--seq-len", "512", "--hidden", "1024"]) == 0
    header, rows = read_cost_table(out)
    times = {(r.kind, r.pass_): r.time_s for r in rows}
    assert times == {("qkv", "fwd"): pytest.approx(30 * US),       # median of 20, 40
                     ("qkv", "bwd"): pytest.approx(17 * US),       # B + W: 15 and 19
                     ("attn_softmax", "fwd"): pytest.approx(3 * US)}
    model = ModelSpec("m", layers=2, hidden=1024, heads=16, seq_len=512, vocab=1000)
    roofline = RooflineCosts(get_gpu("a100-80gb"), attention="unfused")
    table = TableCosts(header, rows, fallback=roofline)
    args = {"micro_batch": 1, "seq_len": 512}
    roof = roofline.operator_times_s(roofline.layer_work("fwd", model, LayerShard(**args)))
    assert table.layer_time_s("fwd", model, LayerShard(**args)) == pytest.approx(
        sum(roof.values()) - roof["qkv"] - roof["attn_softmax"] + 33 * US)


def test_a_backward_scope_holds_the_recomputed_forward_operators(tmp_path, capsys):
    """Recomputation runs inside the backward: a B scope predicts the block's recomputed
    forward operators too (core attention under selective; the norms with
    ``recompute_modules: [layernorm]``), its F and W scopes are unchanged; ``--set`` sets
    the scenario's keys."""
    traces = load_traces([dualpipe_trace(tmp_path / "r0.json")])

    def rows(training):
        data = validate_operators(traces, scenario_from_mapping(
            {**SCENARIO, "training": {**SCENARIO["training"], **training}}))
        return {r["scope"]: r for r in data["rows"]}

    plain = rows({})
    core = rows({"recompute": "selective"})
    assert core["attn(B)"]["operators"] == ["attention"] + plain["attn(B)"]["operators"]
    # The MoE layer's pre-MLP norm is a module of its own (the input norm is fused), and
    # the attention block's: it runs before the dispatch.
    norms = rows({"recompute": "selective", "recompute_modules": ["layernorm"]})
    assert norms["attn(B)"]["operators"] == ["post_attn_norm"] + plain["attn(B)"]["operators"]
    assert norms["mlp(B)"]["operators"] == plain["mlp(B)"]["operators"]
    for scope in ("attn(F)", "mlp(W)"):
        assert core[scope] == plain[scope]
    scenario = scenario_from_mapping(SCENARIO)
    roofline = scenario.roofline
    fwd = roofline.layer_work("fwd", scenario.model,
                              LayerShard(micro_batch=1, seq_len=512, ep=8))
    assert core["attn(B)"]["predicted_s"] == pytest.approx(
        plain["attn(B)"]["predicted_s"] + roofline.kernel_time_s(fwd.kernel("attention")))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["validate", "trace", str(tmp_path / "r0.json"), "--operators", str(path),
                 "--json", "--set", "training.recompute=selective"]) == 0
    printed = {r["scope"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert printed["attn(B)"]["operators"] == core["attn(B)"]["operators"]


def test_kernel_classes_of_deepseeks_trace(shared_data) -> None:
    """validation/deepseek/kernel_classes.py: the kernels' names sort into their classes,
    distsim's operators into the same, and both sides cover the six scopes — the classes
    add up to the scopes' measured and predicted sums."""
    from tests.conftest import load_script

    script = load_script("validation/deepseek/kernel_classes.py", "kernel_classes")
    assert script.kernel_class("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::"
                               "m_grouped_fp8_ptp128c::GemmKernel>") == "gemm"
    assert script.kernel_class("void cuda::per_token_cast_to_fp8_with_channels<>") == "cast"
    assert script.kernel_class("void cuda::cast_back_impl<__nv_fp8x2_e4m3>") == "cast back"
    assert script.kernel_class("cuda::expand_to_fused_with_scales_impl") == "permutation"
    trace = shared_data / "traces" / "deepseek" / "train.json.gz"
    measured = script.measured_classes(trace)
    predicted = script.predicted_classes(script.SCENARIO)
    scenario = load_scenario_file(script.SCENARIO)
    data = validate_operators(load_traces([trace]), scenario)
    rows = {r["scope"]: r for r in data["rows"]}
    assert sum(predicted.values()) == pytest.approx(
        sum(rows[s]["predicted_s"] for s in script.SCOPES))
    assert predicted["gemm"] > predicted["attention"] > predicted["cast"] > 0
    # Summed durations are at least the union the scopes are measured by.
    assert sum(measured.values()) >= 0.99 * sum(rows[s]["measured_s"] for s in script.SCOPES)
