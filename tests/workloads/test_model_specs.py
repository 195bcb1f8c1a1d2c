"""Model presets match published parameter counts; FLOPs match Narayanan et al.'s closed form."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.models import (
    MODEL_PRESETS,
    ModelSpec,
    get_model,
    list_models,
    model_from_mapping,
)

# (preset, published total parameters, source).  Tolerance 2 % unless stated.
PUBLISHED_TOTALS = [
    ("gpt3-175b", 175e9, "Brown et al. 2020, Table 2.1"),
    ("llama2-70b", 70e9, "Touvron et al. 2023 (Llama 2), Table 1"),
    ("llama3-8b", 8.03e9, "Meta Llama 3 model card"),
    ("llama3-70b", 70.6e9, "Meta Llama 3 model card"),
    ("llama3.1-8b", 8.03e9, "Meta Llama 3.1 model card"),
    ("llama3.1-70b", 70.6e9, "Meta Llama 3.1 model card"),
    ("nemotron4-15b", 15.7e9, "Parmar et al. 2024 (arXiv 2402.16819), §2: 3.2B + 12.5B"),
    ("nemotron4-340b", 340e9, "Nemotron-4 340B Technical Report (arXiv 2406.11704)"),
    ("llama3.1-405b", 405e9, "Llama Team 2024, The Llama 3 Herd of Models, Table 3"),
    ("bert-large", 340e6, "Devlin et al. 2019, §3 (BERT-large 340M)"),
    ("mixtral-8x7b", 46.7e9, "Jiang et al. 2024 (Mixtral of Experts)"),
    ("grok-1", 314e9, "xai-org/grok-1 README (314B)"),
    ("megatron-1t", 1008e9, "Narayanan et al. 2021, Table 1 (1008.0 billion)"),
    ("bloom-176b", 176e9, "BigScience BLOOM model card"),
    ("deepseek-v3", 671e9, "DeepSeek-V3 technical report, §4.2 (671B, without MTP)"),
    ("mixtral-8x22b", 141e9, "Mistral AI, Mixtral 8x22B announcement (141B)"),
    ("qwen3-235b-a22b", 235e9, "Qwen3 Technical Report (arXiv 2505.09388), Table 2"),
    ("gpt-oss-120b", 116.83e9, "OpenAI gpt-oss model card, Table 1 (116.83B)"),
    ("qwen3-30b-a3b", 30.5e9, "Qwen3-30B-A3B model card (30.5B)"),
    ("llama4-scout", 109e9, "Meta Llama 4 model card (109B with the vision encoder)"),
    ("llama4-maverick", 400e9, "Meta Llama 4 model card (400B)"),
    ("kimi-k2", 1.04e12, "Kimi K2 report (arXiv 2507.20534): 1.04 trillion"),
]

# (preset, published activated parameters per token, source).  Tolerance 3 %.
PUBLISHED_ACTIVE = [
    ("deepseek-v3", 37e9, "DeepSeek-V3 technical report, §4.2 (37B)"),
    ("qwen3-30b-a3b", 3.3e9, "Qwen3-30B-A3B model card (3.3B)"),
    ("qwen3-235b-a22b", 22e9, "Qwen3 Technical Report, Table 2 (22B)"),
    ("llama4-scout", 17e9, "Meta Llama 4 model card (17B)"),
    ("llama4-maverick", 17e9, "Meta Llama 4 model card (17B)"),
    ("kimi-k2", 32e9, "Kimi K2 report: 32 billion activated"),
]

# Exact counts of the released checkpoints (Hugging Face model cards / configs); our
# layer-by-layer count reproduces them to the parameter.
EXACT_CHECKPOINT_COUNTS = {
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "mixtral-8x7b": 46_702_792_704,
    "bloom-176b": 176_247_271_424,
}


def test_every_preset_is_checked():
    assert sorted(p for p, _, _ in PUBLISHED_TOTALS) == list_models()


@pytest.mark.parametrize(("preset", "published", "source"), PUBLISHED_TOTALS)
def test_total_params_match_published(preset, published, source):
    total = get_model(preset).total_params()
    assert total == pytest.approx(published, rel=0.02), source


@pytest.mark.parametrize(("preset", "count"), sorted(EXACT_CHECKPOINT_COUNTS.items()))
def test_total_params_match_checkpoints_exactly(preset, count):
    assert get_model(preset).total_params() == count


def test_llama31_405b_closed_form():
    # Per layer: Q and O (h·h each), K and V (h·kv_heads·head_dim each, head_dim 128),
    # three SwiGLU matrices (h·ffn), two RMSNorm scales (h); then untied input and output
    # embeddings (vocab·h each) and the final norm (h).
    h, ffn, layers, vocab, kv_width = 16384, 53248, 126, 128256, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv_width + 3 * h * ffn + 2 * h
    closed = layers * per_layer + 2 * vocab * h + h
    assert closed == 405_853_388_800
    assert get_model("llama3.1-405b").total_params() == closed


def test_nemotron4_closed_form():
    # Per layer: Q and O (h·h each), K and V (8 KV heads of h/heads = 128 each), the
    # squared-ReLU MLP's two matrices (h·4h), two LayerNorms (scale and bias, 2h each); no
    # linear biases; untied input and output embeddings and the final LayerNorm.
    for preset, h, heads, layers in (("nemotron4-15b", 6144, 48, 32),
                                     ("nemotron4-340b", 18432, 96, 96)):
        kv_width = 8 * (h // heads)
        per_layer = 2 * h * h + 2 * h * kv_width + 2 * h * 4 * h + 2 * 2 * h
        closed = layers * per_layer + 2 * 256000 * h + 2 * h
        model = get_model(preset)
        assert model.total_params() == closed
        assert not model.gated_mlp and model.kv_heads == 8


def test_bert_large_matches_hf_bertmodel_within_half_percent():
    # HF BertModel (bert-large-uncased): 335,141,888, incl. token types and the pooler
    # (~1.05M) that we do not model.
    assert get_model("bert-large").total_params() == pytest.approx(335_141_888, rel=0.005)


@pytest.mark.parametrize(("preset", "published", "source"), PUBLISHED_ACTIVE)
def test_active_params_match_published(preset, published, source):
    assert get_model(preset).active_params() == pytest.approx(published, rel=0.03), source


def test_maverick_alternates_dense_and_moe_layers():
    """Llama 4 Maverick: experts in layers 1, 3, 5, ... (interleave_moe_layer_step 2), dense
    SwiGLU layers of 16384 between them; each MoE layer 128 routed experts of 8192 and a
    shared one: 3·h·f (SwiGLU) each, and the router's h·E."""
    model = get_model("llama4-maverick")
    assert [model.is_moe_layer(i) for i in range(6)] == [False, True] * 3
    assert [model.mlp_width(i) for i in range(2)] == [16384, 8192]
    h = 5120
    attention = 2 * h * h + 2 * h * 8 * 128 + 2 * h  # Q, O; K, V of 8 heads; two norms
    dense = 3 * h * 16384
    moe = (128 + 1) * 3 * h * 8192 + h * 128
    embeddings = 2 * 202048 * h + h  # untied input and output, final norm
    assert model.total_params() == 48 * attention + 24 * (dense + moe) + embeddings


def test_mixtral_active_params():
    # Jiang et al. 2024: 12.9B active parameters per token (top-2 of 8 experts).
    model = get_model("mixtral-8x7b")
    assert model.active_params() == pytest.approx(12.9e9, rel=0.01)
    assert model.active_params() == 12_879_925_248


def test_dense_active_equals_total():
    for model in MODEL_PRESETS.values():
        if not model.is_moe:
            assert model.active_params() == model.total_params()


def test_gpt3_params_match_narayanan_formula():
    # Narayanan et al. 2021 §5.1: P = 12 l h² (1 + 13/(12h) + (V+s)/(12 l h)); we add the
    # final LayerNorm (2h) the formula leaves out.
    m = get_model("gpt3-175b")
    n_layers, h, v, s = m.layers, m.hidden, m.vocab, m.seq_len
    closed = 12 * n_layers * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * n_layers * h))
    assert m.total_params() - 2 * h == pytest.approx(closed, rel=1e-12)
    assert m.params_per_layer() == 12 * h**2 + 13 * h


def test_llama_layer_breakdown():
    m = get_model("llama2-70b")
    h, kv = 8192, 8 * 128
    assert m.kv_dim == kv
    assert m.attention_params() == 2 * h * h + 2 * h * kv
    assert m.mlp_params() == 3 * h * 28672
    assert m.layer_params(0) == m.attention_params() + m.mlp_params() + 2 * h
    assert m.output_params() == 32000 * h


def test_gpt3_flops_match_narayanan_closed_form():
    # Narayanan et al. 2021 eq. (3): F = 96 B s l h² (1 + s/(6h) + V/(16 l h)) with full
    # recomputation; 72 B s l h² (1 + s/(6h) + V/(12 l h)) without (the model FLOPs).
    m = get_model("gpt3-175b")
    batch, s, n_layers, h, v = 1536, m.seq_len, m.layers, m.hidden, m.vocab
    without = 72 * batch * s * n_layers * h**2 * (1 + s / (6 * h) + v / (12 * n_layers * h))
    with_full = 96 * batch * s * n_layers * h**2 * (1 + s / (6 * h) + v / (16 * n_layers * h))
    assert m.model_flops_per_iteration(batch) == pytest.approx(without, rel=1e-12)
    assert m.hardware_flops_per_iteration(batch, recompute="full") == pytest.approx(
        with_full, rel=1e-12)
    assert m.hardware_flops_per_iteration(batch) == m.model_flops_per_iteration(batch)


def test_forward_flops_per_token_gpt_layer():
    m = get_model("gpt3-175b")
    h, s, n_layers, v = m.hidden, m.seq_len, m.layers, m.vocab
    assert m.flops_per_token_forward() == pytest.approx(
        n_layers * (24 * h * h + 4 * s * h) + 2 * h * v, rel=1e-12)


def test_selective_recompute_adds_attention_scores_only():
    m = get_model("gpt3-175b")
    extra = (m.hardware_flops_per_iteration(8, recompute="selective")
             - m.model_flops_per_iteration(8))
    assert extra == pytest.approx(8 * m.seq_len * m.layers * 4 * m.seq_len * m.hidden)


def test_moe_flops_count_top_k_experts():
    m = get_model("mixtral-8x7b")
    per_layer = 2 * (m.attention_weight_params() + 2 * m.mlp_weight_params()
                     + m.router_params()) + 4 * m.seq_len * m.hidden
    assert m.flops_per_token_forward() == pytest.approx(
        m.layers * per_layer + 2 * m.hidden * m.vocab)


def test_flops_approximately_six_n():
    # The familiar 6·N·tokens estimate (Kaplan et al. 2020) holds within ~15 % for GPT-3.
    m = get_model("gpt3-175b")
    six_n = 6 * m.total_params() * m.seq_len
    assert m.model_flops_per_iteration(1) == pytest.approx(six_n, rel=0.15)


def test_moe_every_other_layer():
    m = ModelSpec("m", layers=4, hidden=64, heads=4, seq_len=16, vocab=100, experts=4,
                  top_k=1, moe_every=2)
    assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert m.moe_layers == 2
    assert m.transformer_params() == sum(m.layer_params(i) for i in range(4))
    assert m.layer_expert_params(1) == 4 * m.mlp_params()
    assert m.layer_expert_params(0) == 0


def test_defaults_are_resolved():
    m = ModelSpec("m", layers=2, hidden=64, heads=8, seq_len=16, vocab=100)
    assert m.ffn_hidden == 256 and m.kv_heads == 8


# ------------------------------------------------------------------ from mapping / errors
def test_mapping_preset_with_override():
    m = model_from_mapping({"preset": "llama3-8b", "seq_len": 2048})
    assert m.seq_len == 2048 and m.hidden == 4096 and m.name == "llama3-8b"


def test_override_of_hidden_rederives_default_ffn():
    m = model_from_mapping({"preset": "gpt3-175b", "hidden": 1024, "heads": 16})
    assert m.ffn_hidden == 4096


def test_mapping_written_out():
    m = model_from_mapping({"name": "tiny", "layers": 2, "hidden": 128.0, "heads": 4,
                            "seq_len": 64, "vocab": 1000, "norm": "RMSNorm"})
    assert m.hidden == 128 and m.norm == "rmsnorm"


def test_unknown_preset_suggests():
    with pytest.raises(ConfigError) as info:
        model_from_mapping({"preset": "llama3-8"}, source="run.yaml")
    text = str(info.value)
    assert "unknown model preset 'llama3-8'" in text
    assert "did you mean 'llama3-8b'" in text
    assert text.startswith("run.yaml: model.preset:")


def test_get_model_unknown():
    with pytest.raises(ConfigError, match="did you mean 'gpt3-175b'"):
        get_model("gpt3-175")


def test_unknown_key_suggests():
    with pytest.raises(ConfigError) as info:
        model_from_mapping({"preset": "gpt3-175b", "layrs": 3}, source="s.yaml")
    assert str(info.value).startswith("s.yaml: model.layrs: unknown key")
    assert "did you mean 'layers'" in str(info.value)


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(ConfigError) as info:
        model_from_mapping({"preset": "llama3-8b", "kv_heads": 5})
    text = str(info.value)
    assert "model.kv_heads" in text
    assert "heads 32 is not divisible by kv_heads 5" in text
    assert "1, 2, 4, 8, 16, 32" in text


def test_negative_layers():
    with pytest.raises(ConfigError) as info:
        model_from_mapping({"preset": "gpt3-175b", "layers": -2})
    assert str(info.value) == "model.layers: must be a whole number >= 1, got -2"
    with pytest.raises(ConfigError) as info:
        model_from_mapping({"preset": "gpt3-175b", "kv_heads": -1})
    assert str(info.value) == ("model.kv_heads: must be a whole number >= 0, got -1 "
                               "(0 takes the default)")


def test_top_k_above_experts():
    with pytest.raises(ConfigError, match="top_k 3 exceeds experts 2"):
        ModelSpec("m", layers=2, hidden=64, heads=4, seq_len=8, vocab=10, experts=2, top_k=3)


@pytest.mark.parametrize(("data", "needle"), [
    ({"preset": "gpt3-175b", "layers": "96"}, "model.layers: must be a whole number"),
    ({"preset": "gpt3-175b", "layers": True}, "model.layers: must be a whole number"),
    ({"preset": "gpt3-175b", "gated_mlp": "yes"}, "model.gated_mlp: must be true or false"),
    ({"preset": "gpt3-175b", "position": "rope"}, "model.position: unknown position"),
    ({"preset": "gpt3-175b", "norm": "rms"}, "did you mean 'rmsnorm'"),
    ({"preset": "gpt3-175b", "hidden": 1000}, "hidden 1000 is not divisible by heads 96"),
    ({"layers": 2, "hidden": 8}, "model: missing heads, seq_len, vocab"),
])
def test_bad_values(data, needle):
    with pytest.raises(ConfigError) as info:
        model_from_mapping(data)
    assert needle in str(info.value)


def test_not_a_mapping():
    with pytest.raises(ConfigError) as info:
        model_from_mapping(["gpt3"], source="s.yaml")  # type: ignore[arg-type]
    assert str(info.value) == ("s.yaml: model: expected a mapping, got list ['gpt3'] "
                               "(e.g. {preset: llama3-8b} or layers/hidden/...)")


def test_get_model_ignores_case_and_spaces():
    assert get_model(" GPT3-175B ") is get_model("gpt3-175b")


def test_unknown_recompute_mode():
    with pytest.raises(ConfigError) as info:
        get_model("gpt3-175b").hardware_flops_per_iteration(8, recompute="ful")
    assert str(info.value).startswith("recompute: unknown recompute mode 'ful' "
                                      "(did you mean 'full'?")


def test_layer_index_checked():
    with pytest.raises(ConfigError, match=r"outside 0\.\.95"):
        get_model("gpt3-175b").layer_params(96)


def test_to_dict_round_trip():
    m = get_model("mixtral-8x7b")
    assert ModelSpec(**m.to_dict()) == m
