"""torchtitan's per-operator checkpointing (``recompute: op``): the mms it keeps, its
recompute pass against a hand count, its time and memory between ``selective`` and
``full``, its TP collectives, cost-table pass and configuration."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute import (
    STACKS,
    CostRow,
    RooflineCosts,
    TableCosts,
    TableHeader,
    layer_work,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer, memory_per_gpu
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model, model_from_mapping
from distsim_gpu.workloads.specs.recompute import op_sac_matmuls, table_pass
from distsim_gpu.workloads.strategy.layer_groups import layer_groups_from
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

LLAMA = get_model("llama3-8b")  # h 4096, 32 heads of 128, 8 KV heads, SwiGLU FFN 14336
H, KV, F, HEADS = 4096, 1024, 14336, 32
H100 = get_gpu("h100-sxm")


def test_the_llama_layers_mms_in_torchtitans_order_every_second_one_recomputed():
    mms = op_sac_matmuls(LLAMA)
    assert [m.name for m in mms] == ["wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    assert [m.name for m in mms if not m.saved] == ["wk", "wo", "w3"]
    assert [(m.in_features, m.out_features) for m in mms] == [
        (H, H), (H, KV), (H, KV), (H, H), (H, F), (H, F), (F, H)]
    # On 2 tensor ranks the column-parallel outputs and wo / w2 inputs halve.
    assert [(m.in_features, m.out_features) for m in op_sac_matmuls(LLAMA, tp=2)] == [
        (H, H // 2), (H, KV // 2), (H, KV // 2), (H // 2, H), (H, F // 2), (H, F // 2),
        (F // 2, H)]


def test_a_moe_layer_counts_router_and_experts_after_wo():
    moe = get_model("mixtral-8x7b")
    mms = op_sac_matmuls(moe)
    assert [(m.name, m.saved, m.routed) for m in mms[4:]] == [
        ("router", True, False), ("w1", False, True), ("w3", True, True),
        ("w2", False, True)]


def test_the_op_recompute_pass_of_a_llama_layer_by_hand():
    t = 2048  # b 1, s 2048, tp 1
    fwd = layer_work("fwd", LLAMA, LayerShard(micro_batch=1, seq_len=t))
    op = layer_work("recompute", LLAMA, LayerShard(micro_batch=1, seq_len=t, recompute="op"))
    assert op.names() == ("input_norm", "qkv_wk", "attn_out", "attn_residual",
                          "post_attn_norm", "mlp_fc1_w3", "mlp_act", "mlp_residual")
    gemms = [k for k in op.kernels if k.kind == "gemm"]
    assert [(k.m, k.n, k.k) for k in gemms] == [(t, KV, H), (t, H, H), (t, F, H)]
    assert sum(k.flops for k in gemms) == 2 * t * H * (KV + H + F)
    # wk reads x and its weight, writes its 16-bit output.
    assert op.kernel("qkv_wk").bytes_moved == (t * H + H * KV + t * KV) * 2
    # Every element-wise operator of the forward is re-run, as it ran: RMSNorm reads and
    # writes T·h, SwiGLU reads 2·T·f and writes T·f (2 bytes each).
    elementwise = [k for k in op.kernels if k.kind == "elementwise"]
    assert elementwise == [k for k in fwd.kernels if k.kind == "elementwise"]
    assert op.kernel("input_norm").bytes_moved == 2 * t * H * 2
    assert op.kernel("mlp_act").bytes_moved == 3 * t * F * 2
    assert "attention" not in op.names()  # flash attention's output is kept


@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("name", ["llama3-8b", "bert-large", "mixtral-8x7b"])
def test_every_stack_re_runs_exactly_the_unsaved_mms(stack, name):
    model = get_model(name)
    tp, t = 2, 512
    for precision in ("bf16", "fp8") if STACKS[stack].fp8_linear else ("bf16",):
        op = layer_work("recompute", model, LayerShard(micro_batch=1, seq_len=t, tp=tp,
                                                       recompute="op"),
                        precision=precision, stack=STACKS[stack])
        tokens = {False: t, True: t * model.top_k}
        expected = sum(m.flops_per_token() * tokens[m.routed]
                       for m in op_sac_matmuls(model, tp=tp) if not m.saved)
        assert sum(k.total_flops for k in op.kernels if k.kind == "gemm") == pytest.approx(
            expected, rel=1e-12)


@pytest.mark.parametrize(("seq_len", "tp"), [(2048, 1), (8192, 1), (4096, 2)])
def test_op_recompute_time_is_between_selective_and_full(seq_len, tp):
    costs = RooflineCosts(H100, stack=STACKS["torch-eager"])
    times = {mode: costs.layer_time_s("recompute", LLAMA, LayerShard(
                 micro_batch=1, seq_len=seq_len, tp=tp, sequence_parallel=tp > 1, recompute=mode))
             for mode in ("selective", "op", "full")}
    assert times["selective"] < times["op"] < times["full"]


def test_op_keeps_the_input_saved_mms_and_attention_by_hand():
    t = 2 * 8192
    got = activation_bytes_per_layer(LLAMA, LayerShard(micro_batch=2, seq_len=8192,
                                                       recompute="op"), flash_attention=True)
    # input, wq, wv, w1, w2 outputs and the attention output at 2 B; fp32 log-sum-exp.
    assert got == 2 * t * (H + H + KV + F + H + H) + 4 * HEADS * t
    sp = activation_bytes_per_layer(LLAMA, LayerShard(micro_batch=2, seq_len=8192, recompute="op",
                                                      tp=2, sequence_parallel=True),
                                    flash_attention=True)
    # /2 where tensor parallel (w2's output is whole partial sums), + 2 reduce-scatters.
    assert sp == 2 * t * (H / 2 + H / 2 + KV / 2 + F / 2 + H + H / 2 + 2 * H / 2) \
        + 4 * HEADS / 2 * t


@pytest.mark.parametrize("flash", [True, False])
def test_op_memory_is_between_full_and_none(flash):
    memory = {mode: memory_per_gpu(LLAMA, ParallelConfig(dp=8, zero=3),
                                   TrainingConfig(micro_batch=2, seq_len=8192, recompute=mode),
                                   flash_attention=flash).activations_bytes
              for mode in ("none", "op", "full")}
    assert memory["full"] < memory["op"] < memory["none"]
    selective = memory_per_gpu(LLAMA, ParallelConfig(dp=8, zero=3),
                               TrainingConfig(micro_batch=2, seq_len=8192,
                                              recompute="selective"), flash_attention=flash)
    assert memory["op"] < selective.activations_bytes


def test_hardware_flops_add_the_recomputed_mms():
    batch, s = 8, 4096
    extra = (LLAMA.hardware_flops_per_iteration(batch, recompute="op", seq_len=s)
             - LLAMA.model_flops_per_iteration(batch, s))
    assert extra == pytest.approx(batch * s * LLAMA.layers * 2 * H * (KV + H + F),
                                  rel=1e-12)


def _tp_link_bytes(uniform, recompute: str, sequence_parallel: bool) -> float:
    tp = 4
    topo = build_cluster({"preset": "switch", "gpus": tp, "link_bandwidth": "100 GB/s",
                          "link_latency": "1 us"})
    result = uniform.run(topo, ParallelConfig(tp=tp, sequence_parallel=sequence_parallel),
                         TrainingConfig(recompute=recompute),
                         comm=CommParams(protocol="simple", algorithm="ring"),
                         fold_exclusive_tp=False)
    uplink = next(link for link in topo.links() if link.src == topo.gpus[0])
    return result.simulation.network.link_bytes(uplink.id)


def test_op_recompute_re_runs_the_all_gathers_not_the_reduce_scatters(uniform):
    # Per layer: forward all-gather + reduce-scatter per block (4), backward 4; the op
    # recompute adds the 2 all-gathers (a ring moves as much for each kind).
    without = _tp_link_bytes(uniform, "none", True)
    assert _tp_link_bytes(uniform, "op", True) / without == pytest.approx(10 / 8)
    assert _tp_link_bytes(uniform, "full", True) / without == pytest.approx(12 / 8)
    # Without sequence parallelism the all-reduces' outputs are not kept: all re-run.
    assert (_tp_link_bytes(uniform, "op", False) / _tp_link_bytes(uniform, "none", False)
            == pytest.approx(6 / 4))


def test_a_cost_table_reads_pass_recompute_op():
    assert table_pass("op") == "recompute_op" and table_pass("full") == "recompute"
    header = TableHeader(software="unit", date="2024-12-01", source="unit test",
                         gpu="h100-sxm")
    rows = [CostRow("h100-sxm", "transformer_layer", p, 1, 4096, 4096, 1, seconds)
            for p, seconds in (("fwd", 0.01), ("bwd", 0.02), ("recompute_op", 0.004))]
    costs = TableCosts(header, rows)
    assert costs.layer_time_s("recompute", LLAMA, LayerShard(micro_batch=1, seq_len=4096,
                                                             recompute="op")) == 0.004


def test_op_is_a_mode_everywhere_and_a_typo_lists_it():
    TrainingConfig(recompute="op")  # accepted
    (group,) = layer_groups_from([{"layers": 4, "tp": 1, "recompute": "op"}])
    assert group.recompute == "op"
    with pytest.raises(ConfigError, match=r"valid: full, none, op, selective"):
        layer_groups_from([{"layers": 4, "tp": 1, "recompute": "sac"}])


def test_a_scenario_with_recompute_op_runs_between_selective_and_full(tiny):
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping

    model = model_from_mapping({"name": "tiny-llama", "layers": 4, "hidden": 256,
                                "heads": 8, "kv_heads": 2, "ffn_hidden": 704,
                                "gated_mlp": True, "norm": "rmsnorm", "position": "rotary",
                                "seq_len": 256, "vocab": 1024})
    seconds = {}
    for mode in ("selective", "op", "full"):
        data = tiny(training={"recompute": mode, "micro_batch": 2},
                    model=model.to_dict())
        report = run_scenario(scenario_from_mapping(data, source=f"{mode}.yaml"))
        seconds[mode] = report.iteration_time_s
    assert seconds["selective"] < seconds["op"] < seconds["full"]


def test_op_recompute_does_not_run_the_cp_ring_again():
    """Core attention is kept, so the backward's CP ring carries what it does without
    recomputation; selective recomputation runs the forward ring once more."""
    from distsim_gpu.workloads.iteration.ops import Collective
    from distsim_gpu.workloads.iteration.streams import StreamBuilder

    costs = RooflineCosts(H100)

    def ring_bytes(mode: str) -> float:
        training = TrainingConfig(micro_batch=1, global_batch=1, recompute=mode)
        builder = StreamBuilder(LLAMA, ParallelConfig(tp=8, cp=2), training, costs,
                                microbatches=1)
        return sum(op.size_bytes for op in builder._backward(0, 0, True, False)
                   if isinstance(op, Collective) and op.group == "cp")

    assert 0 < ring_bytes("op") == ring_bytes("none") < ring_bytes("selective")


def test_the_lower_bound_stays_below_an_op_iteration(tiny):
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    from distsim_gpu.scenarios.study.search import iteration_bounds

    data = tiny(parallelism={"sequence_parallel": True}, training={"recompute": "op"})
    scenario = scenario_from_mapping(data)
    assert 0 < iteration_bounds(scenario).lower_bound_s <= run_scenario(
        scenario).iteration_time_s
