"""Multi-head latent attention and shared experts: hand counts of parameters, FLOPs and
activation bytes at DeepSeek-V3's shapes (its HF config.json: h 7168, 128 heads,
q_lora_rank 1536, kv_lora_rank 512, query-key heads 128 + 64, values 128; experts of
2048, 1 shared), the errors of bad configurations, and a MoE + MLA scenario end to end."""

from __future__ import annotations

import dataclasses

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import operators as ops
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer, layer_params_local
from distsim_gpu.workloads.specs.mla import MlaSpec
from distsim_gpu.workloads.specs.models import ModelSpec, get_model, model_from_mapping
from distsim_gpu.workloads.specs.recompute import op_sac_matmuls
from hypothesis import given, settings
from hypothesis import strategies as st

H, N, RQ, RKV, DN, DR, DV, F = 7168, 128, 1536, 512, 128, 64, 128, 2048
V3 = get_model("deepseek-v3")
MOE_LAYER = 3  # the first three are dense
S = 4096
T = S  # one sequence


def _mla_weights(tp: int) -> int:
    """One MLA block's matmul weights on one of tp ranks: the down projections whole,
    the up and output projections split by heads."""
    n = N // tp
    return H * RQ + H * (RKV + DR) + RQ * n * (DN + DR) + RKV * n * (DN + DV) + n * DV * H


def test_mla_parameters_by_hand():
    assert V3.attention_weight_params() == _mla_weights(1) == 187_105_280
    assert V3.attention_params() == _mla_weights(1) + RQ + RKV  # RMSNorm scales of latents
    moe = V3.layer_params(MOE_LAYER)
    assert moe == V3.attention_params() + 2 * H + H * 256 + (256 + 1) * 3 * H * F
    assert V3.layer_params(0) == V3.attention_params() + 2 * H + 3 * H * 18432
    for tp in (1, 8):
        dense, expert = layer_params_local(V3, MOE_LAYER, tp, ep=64)
        assert dense == _mla_weights(tp) + RQ + RKV + 2 * H + H * 256 + 3 * H * F / tp
        assert expert == 256 / 64 * 3 * H * F / tp


def test_deepseek_v3_totals_match_the_report():
    # §4.2 / the released weights' README: 671B total, 36.6B activated without the
    # input embedding (the output head's 0.9B included).
    assert V3.total_params() == pytest.approx(671e9, rel=0.001)
    assert V3.active_params() - V3.vocab * H == pytest.approx(36.6e9, rel=0.01)
    assert V3.moe_layers == 58 and not V3.is_moe_layer(2) and V3.is_moe_layer(3)


@pytest.mark.parametrize("tp", [1, 8])
def test_mla_forward_operators_by_hand(tp):
    work = ops.forward_layer_work(V3, LayerShard(micro_batch=1, seq_len=S, tp=tp,
                                                 layer_index=MOE_LAYER, ep=1))
    n = N // tp
    shapes = {"q_down": (T, RQ, H), "q_up": (T, n * (DN + DR), RQ),
              "kv_down": (T, RKV + DR, H), "kv_up": (T, n * (DN + DV), RKV),
              "attn_out": (T, H, n * DV), "shared_fc1": (T, 2 * F // tp, H),
              "shared_fc2": (T, H, F // tp)}
    for name, (m, width, k) in shapes.items():
        item = work.kernel(name)
        assert (item.m, item.n, item.k) == (m, width, k), name
        assert item.flops == 2.0 * m * width * k
    # Flash attention, causal: half of 2·s²·heads·(d_qk + d_v).
    assert work.kernel("attention").flops == 2.0 * S * S * n * (DN + DR + DV) / 2
    assert work.kernel("q_norm").bytes_moved == 2 * T * RQ * 2  # bf16 read + write
    assert "qkv" not in work.names()
    rope = work.kernel("attn_rope")
    assert rope.bytes_moved == 2 * T * (n * (DN + DR) + n * DN + DR + 2 * n * (DN + DR))
    assert rope.launches == 1


@pytest.mark.parametrize("tp", [1, 8])
def test_mla_rope_as_eager_kernels_by_hand(tp):
    """Unfused (DeepSeek's profile, eager torchtitan): the query's rotary part rotated into
    a tensor of its own, the key's likewise, then the two heads joined by copies — four
    kernels, each rotated element read and written once more than the fused pass does."""
    shard = LayerShard(micro_batch=1, seq_len=S, tp=tp, layer_index=MOE_LAYER)
    n = N // tp
    eager = ops.forward_layer_work(V3, shard, stack=ops.STACKS["deepseek"])
    rope = eager.kernel("attn_rope")
    rotations = n * DR + DR  # the query's rotary parts and the one shared rotary key
    query_cat, key_cat = 2 * n * (DN + DR), n * DN + DR + n * (DN + DR)
    assert rope.bytes_moved == 2 * T * (2 * rotations + query_cat + key_cat)
    assert rope.launches == 4 and rope.flops == 3.0 * T * rotations
    fused = ops.forward_layer_work(V3, shard).kernel("attn_rope")
    assert rope.bytes_moved - fused.bytes_moved == 2 * T * 2 * rotations
    assert eager.backward().kernel("attn_rope.bwd").bytes_moved == rope.bytes_moved


@pytest.mark.parametrize("q_lora", [RQ, 0])
def test_the_backward_sums_the_gradients_of_a_shared_input(q_lora):
    """The normed input feeds the query projection and kv_down, the post-attention norm's
    output the router and the dispatch: each sum one add over T·h (read two, write one),
    after the first reader's data gradient, where autograd has both; a dense layer's fused
    qkv reads its input once."""
    model = V3 if q_lora else dataclasses.replace(V3, mla=MlaSpec(RKV, DN, DR, DV))
    query = "q_down" if q_lora else "q_proj"
    backward = ops.forward_layer_work(model, LayerShard(micro_batch=1, seq_len=S, tp=1,
                                                        layer_index=MOE_LAYER)).backward()
    names = backward.names()
    for gemm in (query, "router"):
        add = backward.kernel(f"{gemm}.grad_sum")
        assert add.bytes_moved == 3 * T * H * 2 and add.flops == T * H
        assert names.index(f"{gemm}.grad_sum") == names.index(f"{gemm}.dgrad") + 2
    assert names.index("kv_down.dgrad") < names.index(f"{query}.dgrad")
    assert sum(name.endswith(".grad_sum") for name in names) == 2
    dense = ops.forward_layer_work(get_model("llama3-8b"), LayerShard(
        micro_batch=1, seq_len=S, tp=1)).backward()
    assert not any(name.endswith(".grad_sum") for name in dense.names())


def test_operator_flops_equal_the_model_count():
    # Non-causal, one rank, balanced routing: the layer's GEMM and attention FLOP per token
    # are Megatron's model count of that layer (router, top_k + shared experts, scores).
    model = ModelSpec(name="v3-4", layers=4, hidden=H, heads=N, seq_len=S, vocab=129280,
                      ffn_hidden=F, experts=256, top_k=8, shared_experts=1,
                      gated_mlp=True, attention_bias=False, mlp_bias=False, norm="rmsnorm",
                      mla=V3.mla)
    work = ops.forward_layer_work(model, LayerShard(micro_batch=1, seq_len=S), causal=False)
    per_layer = (model.flops_per_token_forward() - 2.0 * H * model.vocab) / model.layers
    assert work.matmul_flops == pytest.approx(T * per_layer, rel=1e-12)
    assert per_layer == 2.0 * (_mla_weights(1) + 9 * 3 * H * F + H * 256) + 2.0 * S * N * 320


@settings(max_examples=25, deadline=None)
@given(q=st.sampled_from([0, 32, 96]), kv=st.sampled_from([16, 64]),
       nope=st.sampled_from([16, 48]), rope=st.sampled_from([0, 8, 32]),
       v=st.sampled_from([16, 40]), tp=st.sampled_from([1, 2, 4]))
def test_any_mla_shape_matches_the_model_count(q, kv, nope, rope, v, tp):
    # Dense MLA layer, non-causal: per rank, the duplicated down projections whole and
    # everything else a tp-th of Megatron's count; without a query latent, q_proj (h -> q).
    mla = MlaSpec(q_lora_rank=q, kv_lora_rank=kv, qk_nope_head_dim=nope,
                  qk_rope_head_dim=rope, v_head_dim=v)
    model = ModelSpec(name="m", layers=1, hidden=256, heads=8, seq_len=64, vocab=100,
                      attention_bias=False, mla=mla)
    work = ops.forward_layer_work(model, LayerShard(micro_batch=2, seq_len=64, tp=tp), causal=False)
    down = 2.0 * 128 * 256 * (q + kv + rope)
    per_layer = (model.flops_per_token_forward() - 2.0 * 256 * 100) * 128
    assert work.matmul_flops == pytest.approx(down + (per_layer - down) / tp, rel=1e-12)
    assert ("q_proj" in work.names()) == (q == 0) == ("q_norm" not in work.names())


def test_shared_expert_flops_and_params():
    base = dict(name="m", layers=2, hidden=512, heads=8, seq_len=256, vocab=1000,
                ffn_hidden=256, experts=8, top_k=2, gated_mlp=True, mlp_bias=False)
    plain, shared = ModelSpec(**base), ModelSpec(**base, shared_experts=2)
    assert shared.layer_params(0) - plain.layer_params(0) == 2 * 3 * 512 * 256
    assert shared.active_params() - plain.active_params() == 2 * 2 * 3 * 512 * 256
    extra = shared.flops_per_token_forward() - plain.flops_per_token_forward()
    assert extra == 2 * 2.0 * 2 * 3 * 512 * 256  # 2 layers, 2 shared experts
    work = ops.forward_layer_work(shared, LayerShard(micro_batch=2, seq_len=256, tp=2))
    assert work.kernel("shared_fc1").flops == 2.0 * 512 * (2 * 2 * 256 // 2) * 512
    assert work.kernel("shared_fc2").flops == 2.0 * 512 * 512 * (2 * 256 // 2)
    assert "shared_fc1" not in ops.forward_layer_work(plain, LayerShard(micro_batch=2,
                                                                        seq_len=256)).names()


def test_mla_activation_bytes_by_hand():
    got = activation_bytes_per_layer(V3, LayerShard(micro_batch=1, seq_len=S,
                                                    layer_index=MOE_LAYER, ep=1, recompute="none"),
                                     flash_attention=True)
    sbh, e = float(T * H), 2
    replicated = 4 * e * sbh + 2 * sbh + 4.0 * T * 256  # + fp32 router logits
    attention = e * T * N * (2 * (DN + DR) + 2 * DV)
    routed = 8 * (e * T * F * 3 + e * sbh)
    shared = e * T * F * 3
    lse = 4.0 * N * T
    latents = e * T * (2 * RQ + 2 * RKV + DR)
    assert got == pytest.approx(replicated + attention + routed + shared + lse + latents,
                                rel=1e-12)
    # TP splits the heads' part only; the latents stay whole on every rank.
    tp8 = activation_bytes_per_layer(V3, LayerShard(micro_batch=1, seq_len=S,
                                                    layer_index=MOE_LAYER, ep=1, tp=8,
                                                    recompute="none"), flash_attention=True)
    assert tp8 == pytest.approx(replicated + (attention + routed + shared + lse) / 8
                                + latents, rel=1e-12)


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_mla_recompute_passes(mode):
    # Only op recompute needs the per-mm policy MLA does not have; the others re-run the
    # forward's operators (all of them, or core attention alone).
    shape = {"micro_batch": 1, "seq_len": 512, "layer_index": MOE_LAYER}
    again = ops.layer_work("recompute", V3, LayerShard(recompute=mode, **shape))
    forward = ops.forward_layer_work(V3, LayerShard(**shape))
    expected = forward.names() if mode == "full" else ("attention",)
    assert again.names() == expected


def test_dense_layers_of_a_moe_model_use_their_width():
    work = ops.forward_layer_work(V3, LayerShard(micro_batch=1, seq_len=512, layer_index=0))
    assert work.kernel("mlp_fc1").n == 2 * 18432 and "router" not in work.names()


def test_to_dict_round_trip_and_old_models_unchanged():
    again = model_from_mapping(V3.to_dict())
    assert again == V3
    keys = set(get_model("mixtral-8x7b").to_dict())
    assert not keys & {"mla", "shared_experts", "first_dense_layers", "dense_ffn_hidden"}


_MLA = {"kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
_SMALL = {"layers": 2, "hidden": 256, "heads": 8, "seq_len": 128, "vocab": 1000,
          "attention_bias": False}


@pytest.mark.parametrize(("changes", "key"), [
    ({"mla": {**_MLA, "kv_lora_rank": 0}}, "model.mla.kv_lora_rank"),
    ({"mla": {**_MLA, "rank": 3}}, "model.mla.rank"),
    ({"mla": {"kv_lora_rank": 32}}, "model.mla"),
    ({"mla": {**_MLA, "v_head_dim": 1.5}}, "model.mla.v_head_dim"),
    ({"mla": [1, 2]}, "model.mla"),
    ({"mla": _MLA, "kv_heads": 2}, "model.kv_heads"),
    ({"mla": _MLA, "attention_bias": True}, "model.attention_bias"),
    ({"shared_experts": 1}, "model.shared_experts"),
    ({"first_dense_layers": 1}, "model.first_dense_layers"),
    ({"dense_ffn_hidden": 512}, "model.dense_ffn_hidden"),
    ({"experts": 4, "first_dense_layers": 2}, "model.first_dense_layers"),
    ({"experts": 4, "dense_ffn_hidden": 0}, "model.dense_ffn_hidden"),
])
def test_bad_configs_name_the_key(changes, key):
    with pytest.raises(ConfigError) as caught:
        model_from_mapping({**_SMALL, **changes})
    assert caught.value.key == key


def test_mla_heads_must_split_over_tp_and_op_recompute_is_refused():
    model = model_from_mapping({**_SMALL, "heads": 6, "hidden": 252, "mla": _MLA})
    with pytest.raises(ConfigError, match="heads"):
        ops.forward_layer_work(model, LayerShard(micro_batch=1, seq_len=128, tp=4))
    with pytest.raises(ConfigError, match="recompute op") as caught:
        op_sac_matmuls(model)
    assert caught.value.key == "recompute"


def test_moe_mla_scenario_runs_end_to_end(tiny):
    model = {"name": "tiny-deepseek", "layers": 4, "hidden": 256, "heads": 8,
             "seq_len": 128, "vocab": 1024, "ffn_hidden": 128, "dense_ffn_hidden": 512,
             "experts": 4, "top_k": 2, "first_dense_layers": 1, "gated_mlp": True,
             "attention_bias": False, "mlp_bias": False,
             "mla": {**_MLA, "q_lora_rank": 64}}
    parallel = {"tp": 2, "pp": 2, "dp": 2, "ep": 2, "schedule": "1f1b"}
    times = []
    for shared in (0, 1):
        scenario = scenario_from_mapping(tiny(model={**model, "shared_experts": shared},
                                              parallelism=parallel,
                                              training={"recompute": "selective"}))
        result = run_scenario(scenario)
        times.append(result.iteration_time_s)
    assert 0 < times[0] < times[1]  # the shared expert is work on every rank
