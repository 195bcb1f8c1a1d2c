"""The published models distsim knows by name: what each preset writes of a
:class:`~distsim_gpu.workloads.specs.models.ModelSpec`, with its source.

Fields a preset leaves out take ``ModelSpec``'s defaults; overrides in
:func:`~distsim_gpu.workloads.specs.models.model_from_mapping` apply to the written
fields, so overriding ``hidden`` of a preset that did not write ``ffn_hidden`` re-derives
ffn_hidden = 4·hidden.  Each entry says what it was taken from and what of the
architecture distsim leaves out; ``tests/workloads/test_model_specs.py`` holds every
preset to its published parameter count.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from distsim_gpu.workloads.specs.attention_window import AttentionWindow
from distsim_gpu.workloads.specs.mla import MlaSpec

__all__ = ["PRESET_FIELDS"]

# Llama 4's local layers: causal attention within chunks of 8,192 tokens, every fourth
# layer in full.
_LLAMA4_CHUNKS = AttentionWindow(8192, "chunked", full_every=4)
_LLAMA = {"gated_mlp": True, "tied_embeddings": False, "position": "rotary",
          "norm": "rmsnorm", "attention_bias": False, "mlp_bias": False}

PRESET_FIELDS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: 96 layers,
    # d_model 12288, 96 heads, context 2048; GPT-2 BPE vocabulary of 50257 tokens;
    # learned positions, tied embeddings.  Published size: 175B.
    "gpt3-175b": {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048,
                  "vocab": 50257},
    # Touvron et al. 2023, "Llama 2", Table 1 / HF config: 80 layers, 8192, 64 heads,
    # 8 KV heads (GQA), FFN 28672 SwiGLU, vocab 32000, context 4096, RMSNorm, RoPE,
    # untied output.  Published 70B; the HF checkpoint holds 68,976,648,192 parameters.
    "llama2-70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                   "ffn_hidden": 28672, "seq_len": 4096, "vocab": 32000, **_LLAMA},
    # Meta Llama 3 model card / HF config: 32 layers, 4096, 32 heads, 8 KV heads,
    # FFN 14336, vocab 128256, context 8192.  Published 8.03B.
    "llama3-8b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                  "ffn_hidden": 14336, "seq_len": 8192, "vocab": 128256, **_LLAMA},
    # Meta Llama 3 model card / HF config: 80 layers, 8192, 64 heads, 8 KV heads,
    # FFN 28672, vocab 128256, context 8192.  Published 70.6B.
    "llama3-70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                   "ffn_hidden": 28672, "seq_len": 8192, "vocab": 128256, **_LLAMA},
    # Meta Llama 3.1 model card and HF config.json: the Llama 3 shapes (8B: 32 layers,
    # 4096, 32 heads, 8 KV heads, FFN 14336; 70B: 80 layers, 8192, 64 heads, 8 KV heads,
    # FFN 28672), vocab 128256; pre-trained at sequence 8192 (the 128k context is a later
    # stage that changes no parameter count).  Only RoPE's scaling differs from Llama 3,
    # which no cost here reads.  Published 8.03B and 70.6B, the Llama 3 checkpoints' counts.
    "llama3.1-8b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                    "ffn_hidden": 14336, "seq_len": 8192, "vocab": 128256, **_LLAMA},
    "llama3.1-70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                     "ffn_hidden": 28672, "seq_len": 8192, "vocab": 128256, **_LLAMA},
    # Meta Llama 3.1 model card; Llama Team 2024, "The Llama 3 Herd of Models", Table 3:
    # 126 layers, 16384, 128 heads, 8 KV heads (GQA), FFN 53248 SwiGLU, vocab 128256,
    # RMSNorm, RoPE, untied output; pre-trained at sequence 8192.  Published 405B.
    "llama3.1-405b": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8,
                      "ffn_hidden": 53248, "seq_len": 8192, "vocab": 128256, **_LLAMA},
    # Parmar et al. 2024, "Nemotron-4 15B Technical Report" (arXiv 2402.16819), §2 and
    # Table 1: 32 layers, hidden 6144, 48 heads, 8 KV heads (GQA), sequence 4096, vocab
    # 256000; RoPE, squared-ReLU MLP (not gated) of width 4·hidden, no bias terms, untied
    # embeddings; 3.2B embedding + 12.5B non-embedding parameters.  NeMo's config
    # (megatron_gpt/nemotron) uses LayerNorm ("layernorm1p": zero-centred scale, with bias).
    "nemotron4-15b": {"layers": 32, "hidden": 6144, "heads": 48, "kv_heads": 8,
                      "ffn_hidden": 24576, "seq_len": 4096, "vocab": 256000,
                      "tied_embeddings": False, "position": "rotary", "attention_bias": False,
                      "mlp_bias": False},
    # Nvidia 2024, "Nemotron-4 340B Technical Report" (arXiv 2406.11704), §2.1 and
    # Table 1: the 15B architecture at 96 layers, hidden 18432, 96 heads, 8 KV heads,
    # sequence 4096, vocab 256000, squared-ReLU MLP of width 73728 (4·hidden).  Published
    # 340B (9.4B of it embeddings).
    "nemotron4-340b": {"layers": 96, "hidden": 18432, "heads": 96, "kv_heads": 8,
                       "ffn_hidden": 73728, "seq_len": 4096, "vocab": 256000,
                       "tied_embeddings": False, "position": "rotary", "attention_bias": False,
                       "mlp_bias": False},
    # Devlin et al. 2019 (BERT-large: L 24, H 1024, A 16, 340M); WordPiece vocab 30522,
    # 512 learned positions.  Token-type embeddings, the pooler and the MLM head are not
    # modelled (≈1.1M); HF BertModel counts 335,141,888.
    "bert-large": {"layers": 24, "hidden": 1024, "heads": 16, "seq_len": 512,
                   "vocab": 30522},
    # Jiang et al. 2024, "Mixtral of Experts", Table 1: 32 layers, 4096, 32 heads, 8 KV
    # heads, FFN 14336, 8 experts top-2, vocab 32000; 46.7B total, 12.9B active.  The
    # model supports a 32768-token context; we default to 4096, a common training length
    # (override seq_len for long-context runs; it changes no parameter count).
    "mixtral-8x7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                     "ffn_hidden": 14336, "experts": 8, "top_k": 2, "seq_len": 4096,
                     "vocab": 32000, **_LLAMA},
    # Mistral AI, "Cheaper, Better, Faster, Stronger" (mistral.ai/news/mixtral-8x22b) and
    # the HF config.json of Mixtral-8x22B-v0.1: 56 layers, 6144, 48 heads, 8 KV heads, FFN
    # 16384, 8 experts top-2, vocab 32768, context 65536 (trained here at 4096, as the
    # 8x7B); 141B total, 39B active.
    "mixtral-8x22b": {"layers": 56, "hidden": 6144, "heads": 48, "kv_heads": 8,
                      "ffn_hidden": 16384, "experts": 8, "top_k": 2, "seq_len": 4096,
                      "vocab": 32768, **_LLAMA},
    # Qwen Team 2025, "Qwen3 Technical Report" (arXiv 2505.09388) Table 2 and the HF
    # config.json of Qwen3-235B-A22B: 94 layers, hidden 4096, 64 query heads and 4 KV heads
    # of 128, every layer MoE with 128 experts top-8 of width 1536 (no shared expert),
    # vocab 151936, untied output; pre-trained at sequence 4096 (its first two stages).
    # Its QK-norm (two 128-wide RMSNorms per layer) is left out.  235B total, 22B active.
    "qwen3-235b-a22b": {"layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4,
                        "attention_head_dim": 128, "ffn_hidden": 1536, "experts": 128,
                        "top_k": 8, "seq_len": 4096, "vocab": 151936, **_LLAMA},
    # OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card" and the HF config.json of
    # gpt-oss-120b: 36 layers, hidden 2880, 64 query heads and 8 KV heads of 64, biases in
    # attention and experts, 128 experts top-4 of width 2880 (gated), vocab 201088, untied
    # output, initial context 4096; its layers alternate a 128-token sliding window (layers
    # 0, 2, 4, ...: layer_types) with full attention.  Not modelled: the attention sinks
    # (64 scalars a layer).  116.8B total, 5.1B active.
    "gpt-oss-120b": {"layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
                     "attention_head_dim": 64, "ffn_hidden": 2880, "experts": 128,
                     "top_k": 4, "seq_len": 4096, "vocab": 201088,
                     "attention_window": AttentionWindow(128, "sliding", full_every=2),
                     **{**_LLAMA, "attention_bias": True, "mlp_bias": True}},
    # xAI, github.com/xai-org/grok-1 (README "Model Specifications" and model.py): 64
    # layers, embedding 6144, 48 query heads and 8 key/value heads of 128, 8 experts with 2
    # used per token, each a gated (GELU) MLP of width 32768 (widening factor 8 at 2/3),
    # vocab 131072, RoPE, RMSNorm, context 8192; the output projection reuses the input
    # embedding.  Published: 314B parameters.
    "grok-1": {"layers": 64, "hidden": 6144, "heads": 48, "kv_heads": 8,
               "ffn_hidden": 32768, "experts": 8, "top_k": 2, "seq_len": 8192,
               "vocab": 131072, **_LLAMA, "tied_embeddings": True},
    # Narayanan et al. 2021, Table 1, last row: 1T-parameter GPT, 128 layers, hidden
    # 25600, 160 heads; vocabulary 51200 and sequence 2048 as in that paper's §5.1.
    # Published: 1008 billion parameters.
    "megatron-1t": {"layers": 128, "hidden": 25600, "heads": 160, "seq_len": 2048,
                    "vocab": 51200},
    # BigScience BLOOM (Le Scao et al. 2022; HF model card): 70 layers, 14336, 112
    # heads, ALiBi (no position parameters), LayerNorm after the word embedding, tied
    # output, sequence 2048.  The checkpoint's vocab_size is 250880 (padded so the
    # embedding splits evenly over tensor-parallel ranks); the tokenizer has 250680 tokens
    # (the figure the BigScience README quotes).  Parameters use the padded size:
    # 176,247,271,424 (HF model card).
    "bloom-176b": {"layers": 70, "hidden": 14336, "heads": 112, "seq_len": 2048,
                   "vocab": 250880, "position": "alibi", "embedding_norm": True},
    # DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437) §2.1, §4.2 and
    # its HF config.json: 61 layers, hidden 7168, 128 heads under MLA (q_lora_rank 1536,
    # kv_lora_rank 512, query-key heads 128 + 64 rotary wide, values 128), the first 3
    # layers dense (SwiGLU 18432), the rest 256 routed experts top-8 plus 1 shared, each
    # SwiGLU 2048; vocab 129280, RMSNorm, untied output; pre-trained at sequence 4096.
    # Published 671B total, 37B activated, without the multi-token-prediction module
    # (`mtp_depth: 1` adds it: one more MoE block and its projection, 11.6B).
    "deepseek-v3": {"layers": 61, "hidden": 7168, "heads": 128, "seq_len": 4096,
                    "vocab": 129280, "ffn_hidden": 2048, "dense_ffn_hidden": 18432,
                    "experts": 256, "top_k": 8, "shared_experts": 1,
                    "first_dense_layers": 3,
                    "mla": MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                                   qk_rope_head_dim=64, v_head_dim=128), **_LLAMA},
    # Qwen Team 2025, "Qwen3 Technical Report" (arXiv 2505.09388) Table 2 and the HF
    # config.json of Qwen3-30B-A3B: 48 layers, hidden 2048, 32 query heads and 4 KV heads
    # of 128, every layer MoE with 128 experts top-8 of width 768 (no shared expert), vocab
    # 151936, untied output; its QK-norm left out as for the 235B.  30.5B total, 3.3B active.
    "qwen3-30b-a3b": {"layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
                      "attention_head_dim": 128, "ffn_hidden": 768, "experts": 128,
                      "top_k": 8, "seq_len": 4096, "vocab": 151936, **_LLAMA},
    # Meta, Llama 4 model card and the HF config.json of Llama-4-Scout-17B-16E (text
    # model): 48 layers, hidden 5120, 40 query heads and 8 KV heads of 128, every layer MoE
    # with 16 experts top-1 of width 8192 plus one shared expert of the same width, vocab
    # 202048, untied output; three layers of four attend within chunks of 8,192 tokens
    # (attention_chunk_size; the fourth, without RoPE, in full: no_rope_layers), which
    # at the preset's sequence of 8192 is causal attention.  Left out: the QK-norm, the
    # sigmoid router's scaling of the input and the vision encoder.  Published 109B total
    # (with the vision encoder), 17B active.
    "llama4-scout": {"layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8,
                     "ffn_hidden": 8192, "experts": 16, "top_k": 1, "shared_experts": 1,
                     "seq_len": 8192, "vocab": 202048, "attention_window": _LLAMA4_CHUNKS,
                     **_LLAMA},
    # Meta, Llama 4 model card and the HF config.json of Llama-4-Maverick-17B-128E: as
    # Scout, but 128 experts in every second layer (interleave_moe_layer_step 2: layers
    # 1, 3, 5, ...) and dense SwiGLU layers of width 16384 between them.  Published 400B
    # total, 17B active.
    "llama4-maverick": {"layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8,
                        "ffn_hidden": 8192, "dense_ffn_hidden": 16384, "experts": 128,
                        "top_k": 1, "moe_every": 2, "shared_experts": 1, "seq_len": 8192,
                        "vocab": 202048, "attention_window": _LLAMA4_CHUNKS, **_LLAMA},
    # Kimi Team 2025, "Kimi K2: Open Agentic Intelligence" (arXiv 2507.20534) and its HF
    # config.json: DeepSeek-V3's architecture with 64 attention heads under the same MLA,
    # one dense first layer (SwiGLU 18432), then 384 routed experts top-8 plus 1 shared,
    # each SwiGLU 2048; vocab 163840, untied output; pre-trained at sequence 4096.
    # Published 1.04T total, 32B activated.
    "kimi-k2": {"layers": 61, "hidden": 7168, "heads": 64, "seq_len": 4096,
                "vocab": 163840, "ffn_hidden": 2048, "dense_ffn_hidden": 18432,
                "experts": 384, "top_k": 8, "shared_experts": 1, "first_dense_layers": 1,
                "mla": MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                               qk_rope_head_dim=64, v_head_dim=128), **_LLAMA},
})
