"""The token copies around a MoE layer's exchange (workloads.cost.compute.token_copies):
Megatron-Core's all-to-all dispatcher's permute and sort against hand counts, DeepEP's
expansion of the tokens a GPU received, and what the layer's operators take of them."""

from __future__ import annotations

from math import comb

import pytest
from distsim_gpu.workloads.cost.compute import forward_layer_work
from distsim_gpu.workloads.cost.compute.token_copies import token_copies
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec, get_model
from hypothesis import given, settings
from hypothesis import strategies as st

H, A = 1024, 2  # hidden, 16-bit activations


def _model(experts: int, top_k: int) -> ModelSpec:
    return ModelSpec("moe", layers=2, hidden=H, heads=8, seq_len=512, vocab=1000,
                     ffn_hidden=512, experts=experts, top_k=top_k, gated_mlp=True)


def test_megatron_permutes_its_own_tokens_and_sorts_what_arrives():
    # 1000 tokens routed top-2; 2 local experts of 8 over ep 4 take 500 copies each.
    dispatch, combine = token_copies(_model(8, 2), routed_tokens=1000, copies=1000, ep=4,
                                     etp=1, deepep=False, element_bytes=(A, A))
    permute = (1000 + 2000) * H * A  # read the tokens, write their 2 copies
    sort = 2 * 1000 * H * A  # read and write what arrived, by local expert
    assert (dispatch.bytes_moved, dispatch.launches) == (permute + sort, 2)
    assert combine == dispatch  # unsort, then unpermute (summing each token's copies)
    # One local expert: nothing to sort.
    alone, _ = token_copies(_model(8, 2), routed_tokens=1000, copies=250, ep=8, etp=1,
                            deepep=False, element_bytes=(A, A))
    assert (alone.bytes_moved, alone.launches) == (permute, 1)


def test_deepep_expands_the_tokens_a_gpu_received():
    """DeepSeek-V3's layer at EP 64: 4 of 256 experts a GPU; a token reaches a GPU with
    probability 1 − C(252, 8)/C(256, 8) and the GPU copies what it received into its 8·T
    expert copies (FP8 in, 16-bit back)."""
    model = get_model("deepseek-v3")
    tokens, copies = 4096, 4096 * 8
    hit = 1 - comb(252, 8) / comb(256, 8)
    received = tokens * 64 * hit
    sent = 1 + 4 / 128
    dispatch, combine = token_copies(model, routed_tokens=tokens, copies=copies, ep=64,
                                     etp=1, deepep=True, element_bytes=(A, sent))
    assert dispatch.bytes_moved == pytest.approx((received + copies) * 7168 * sent)
    assert dispatch.bwd_bytes_factor == pytest.approx(A / sent)  # 16-bit gradients back
    assert combine.bytes_moved == pytest.approx((received + copies) * 7168 * A)
    assert dispatch.launches == combine.launches == 1
    assert received / tokens == pytest.approx(7.676, rel=1e-3)  # GPUs a token reaches


@settings(max_examples=100, deadline=None)
@given(log_ep=st.integers(0, 6), per_rank=st.sampled_from([1, 2, 4, 8]),
       top_k=st.integers(1, 8))
def test_a_gpu_receives_no_more_tokens_than_copies(log_ep, per_rank, top_k):
    """A token reaching a GPU brings at least one copy: received ≤ copies (equal when each
    GPU holds one expert), so DeepEP's expansion never moves more than twice the copies."""
    ep = 2**log_ep
    experts = ep * per_rank
    top_k = min(top_k, experts)
    tokens = 512
    copies = tokens * top_k  # expected copies a GPU's experts take (etp 1)
    dispatch, _ = token_copies(_model(experts, top_k), routed_tokens=tokens, copies=copies,
                               ep=ep, etp=1, deepep=True, element_bytes=(A, A))
    received = dispatch.bytes_moved / (H * A) - copies
    assert 0 < received <= copies * (1 + 1e-12)
    if per_rank == 1:
        assert received == pytest.approx(copies)


def test_the_layer_routes_its_sequence_parallel_share():
    """With tp 2 and sequence parallelism a rank routes half the tokens: the router and
    the permute see T/2, the sort the copies gathered over the expert-tensor group."""
    model = _model(8, 2)
    work = forward_layer_work(model, LayerShard(micro_batch=2, seq_len=512, tp=2,
                                                sequence_parallel=True, ep=4))
    tokens = 2 * 512
    assert work.kernel("router").m == tokens // 2
    copies = tokens * 2  # T·k·etp/tp with etp = tp
    assert work.kernel("moe_dispatch").bytes_moved == (tokens // 2) * 3 * H * A \
        + 2 * copies * H * A
