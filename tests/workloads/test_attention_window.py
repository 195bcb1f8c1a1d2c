"""Local attention (``model.attention_window``): the query-key pairs of sliding windows and
chunks against exact counts, which layers attend locally, the flash kernels' FLOP and the
model FLOP it changes, what it leaves alone (unfused attention, models without it), and
the errors of a bad window or of context parallelism with one."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import forward_layer_work, get_stack
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.attention_window import (
    AttentionWindow,
    attention_window_from_mapping,
)
from distsim_gpu.workloads.specs.models import get_model, model_from_mapping
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _exact_pairs(seq_len: int, window: int, kind: str) -> int:
    """Query-key pairs counted one query at a time (itself included)."""
    if kind == "sliding":
        return sum(min(i + 1, window) for i in range(seq_len))
    return sum(i % window + 1 for i in range(seq_len))


@settings(max_examples=200, deadline=None)
@given(seq_len=st.integers(1, 3000), window=st.integers(1, 4000),
       kind=st.sampled_from(["sliding", "chunked"]))
def test_pairs_are_the_exact_count_in_the_continuous_convention(seq_len, window, kind):
    """Full causal attention is counted as s²/2 (the exact count less s/2); a window is
    counted the same way — each causal run of n queries as n²/2 — never above full
    attention, and exactly full attention once the window covers the sequence."""
    fraction = AttentionWindow(window, kind).pair_fraction(seq_len)
    exact = _exact_pairs(seq_len, window, kind)
    # A sliding window: the first min(w, s) queries form one causal run; chunks: all do.
    runs = min(window, seq_len) if kind == "sliding" else seq_len
    assert fraction * seq_len**2 == pytest.approx(exact - runs / 2, rel=1e-12, abs=1e-9)
    assert 0 < fraction <= 0.5
    if window >= seq_len:
        assert fraction == 0.5


def test_closed_forms():
    # GPT-OSS's 128-token window over 4096 tokens: s·w − w²/2 pairs.
    assert AttentionWindow(128).pair_fraction(4096) == (4096 * 128 - 128**2 / 2) / 4096**2
    # Llama 4's chunks of 8192 over 32768 tokens: four causal chunks, 4·c²/2 pairs.
    assert AttentionWindow(8192, "chunked").pair_fraction(32768) == 4 * 8192**2 / 2 / 32768**2
    # A remainder chunk: 10 tokens in chunks of 4 are 4, 4 and 2 tokens.
    assert AttentionWindow(4, "chunked").pair_fraction(10) == (16 + 16 + 4) / 2 / 100


def test_which_layers_attend_locally():
    gpt_oss = get_model("gpt-oss-120b")  # sliding in layers 0, 2, 4, ...; full in the rest
    assert [gpt_oss.attention_pair_fraction(i, 4096) == 0.5 for i in range(4)] == [
        False, True, False, True]
    maverick = get_model("llama4-maverick")  # chunks in three layers of four
    assert [maverick.attention_pair_fraction(i, 32768) == 0.5 for i in range(8)] == [
        False, False, False, True] * 2
    assert AttentionWindow(4096).is_local(7)  # full_every 0: every layer (Mistral)
    assert get_model("llama3-8b").attention_pair_fraction(3, 8192) == 0.5


def test_flash_attention_computes_the_windows_pairs_only():
    model = get_model("gpt-oss-120b")
    shard = {"micro_batch": 2, "seq_len": 4096, "tp": 2}
    local, full = (forward_layer_work(model, LayerShard(**shard, layer_index=i)).kernel(
        "attention") for i in (0, 1))
    # 4·b·s²·(query width / tp)·pairs: 64 heads of 64 over tp 2.
    assert full.flops == 4.0 * 2 * 4096**2 * 2048 * 0.5
    assert local.flops == 4.0 * 2 * 4096**2 * 2048 * model.attention_pair_fraction(0, 4096)
    assert local.bytes_moved == full.bytes_moved  # q, k, v read and o written either way
    # Unfused attention masks a whole s × s score matrix: no saving.
    eager = get_stack("torch-eager").with_attention("unfused")
    assert forward_layer_work(model, LayerShard(**shard, layer_index=0), stack=eager) == \
        forward_layer_work(model, LayerShard(**shard, layer_index=1), stack=eager)


def test_model_flops_count_the_local_layers_scores():
    """Half of GPT-OSS's layers score w·(2 − w/s) keys a token instead of s (the model FLOP
    counts a full layer's s × s square); nothing else changes."""
    model = get_model("gpt-oss-120b")
    full = model_from_mapping({"preset": "gpt-oss-120b", "attention_window": None})
    s, w = 4096, 128
    scores = 2.0 * s * 64 * (64 + 64)  # a full layer's Q·Kᵀ and P·V per token
    saved = 18 * scores * (1 - (2 * w - w * w / s) / s)
    assert full.flops_per_token_forward(s) - model.flops_per_token_forward(s) == \
        pytest.approx(saved)
    assert model.total_params() == full.total_params()


def test_the_window_round_trips_and_bad_ones_are_clear_errors():
    model = model_from_mapping({"preset": "llama3-8b", "attention_window": {
        "tokens": 4096.0, "kind": "sliding"}})
    assert model.attention_window == AttentionWindow(4096, "sliding", 0)
    assert model_from_mapping({**model.to_dict()}) == model
    for mapping, message in (
            ({"tokens": 0}, r"model\.attention_window\.tokens: .*1"),
            ({"kind": "sliding"}, r"model\.attention_window: missing tokens"),
            ({"tokens": 128, "kind": "local"}, r"attention_window\.kind: .*sliding"),
            ({"tokens": 128, "every": 2}, r"attention_window\.every: unknown key .*full_every"),
            ({"tokens": 128, "full_every": 64}, r"full_every 64 exceeds layers 32"),
            ("128", r"model\.attention_window: .*mapping")):
        with pytest.raises(ConfigError, match=message):
            model_from_mapping({"preset": "llama3-8b", "attention_window": mapping})
    with pytest.raises(ConfigError, match="tokens"):
        attention_window_from_mapping({"tokens": True})


def test_context_parallelism_with_a_window_is_refused():
    model = get_model("gpt-oss-120b")
    with pytest.raises(ConfigError, match=r"parallelism\.cp: context parallelism with "
                                          r"local attention is not modelled"):
        check_strategy(model, ParallelConfig(cp=2, dp=4, ep=8),
                       TrainingConfig(micro_batch=1, global_batch=8), num_gpus=8)


def test_the_summary_says_which_layers_attend_locally(tiny):
    from distsim_gpu.scenarios.report import format_summary
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    data = tiny()
    data["model"]["attention_window"] = {"tokens": 64, "kind": "chunked", "full_every": 2}
    text = format_summary(run_scenario(scenario_from_mapping(data)))
    assert "; attention within chunks of 64 tokens, one layer in 2 in full" in text
    assert "attention within" not in format_summary(run_scenario(scenario_from_mapping(
        tiny())))
