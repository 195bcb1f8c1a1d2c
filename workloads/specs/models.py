"""Transformer model specs: shapes, parameter counts and FLOPs, plus published presets.

A :class:`ModelSpec` describes a decoder- or encoder-style transformer by the numbers a
training simulator needs: layers, hidden size, heads (and KV heads for grouped-query
attention), FFN width, vocabulary, sequence length, mixture-of-experts layout and the few
architectural switches that change parameter counts (gated MLP, tied embeddings, learned
positions, LayerNorm vs RMSNorm, biases).  Everything it returns is a plain count or an SI
float (FLOP); nothing here knows about GPUs or parallelism.

Parameter count of one layer (weights + biases; ``h`` hidden, ``d_kv`` = kv_heads·h/heads,
``f`` ffn_hidden)::

    attention = h·h (Q) + 2·h·d_kv (K, V) + h·h (out)      [+ h + 2·d_kv + h biases]
    mlp       = 2·h·f   (up, down)  or 3·h·f (gated: gate, up, down)
                                          [+ f + h biases, gated: 2·f + h]
    norms     = 2 per layer, h (RMSNorm) or 2·h (LayerNorm with bias) each
    MoE layer = (experts + shared_experts) · mlp + router h·experts (no bias)
    MLA       = h·r_q + r_q·a·d_qk (queries; h·a·d_qk without a query latent)
                + h·(r_kv + d_r) + r_kv·a·(d_n + d_v) + a·d_v·h   [+ r_q + r_kv norms]

(MLA: multi-head latent attention, :mod:`workloads.specs.mla`, with ``a`` heads, latents
``r_q``/``r_kv``, query-key heads ``d_qk = d_n + d_r`` and values ``d_v``.  A MoE model's
first ``first_dense_layers`` layers are dense, of width ``dense_ffn_hidden``.)

For GPT-3-style layers this is ``12·h² + 13·h``, the count of Narayanan et al. 2021
("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
SC'21), §5.1: ``P = 12·l·h²·(1 + 13/(12·h) + (V + s)/(12·l·h))``.

FLOPs (Megatron convention, Narayanan et al. 2021 §5.1 and Appendix; Korthikanti et al.
2022, "Reducing Activation Recomputation in Large Transformer Models", §6): only matrix
multiplications count, 2 FLOP per multiply-accumulate; biases, norms, softmax and
element-wise ops are ignored.  Forward, per token, for a sequence of length ``s``::

    per layer: 2·(matmul weights a token meets) + 4·s·h   (Q·Kᵀ and P·V, full s×s, no
               causal halving, as in the paper)
    logits:    2·h·V

(under MLA the scores term is ``2·s·a·(d_qk + d_v)``; a MoE layer meets ``top_k +
shared_experts`` expert MLPs), so a GPT layer costs ``24·h² + 4·s·h`` per token and one
iteration of ``B`` sequences costs
``72·B·s·l·h²·(1 + s/(6·h) + V/(12·l·h))`` FLOP (forward + backward = 3× forward), or
``96·B·s·l·h²·(1 + s/(6·h) + V/(16·l·h))`` with full activation recomputation (layers run
forward twice; the logits layer is not recomputed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any

from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_whole,
    describe,
)
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.attention_window import (
    AttentionWindow,
    attention_window_from_mapping,
)
from distsim_gpu.workloads.specs.mla import MlaSpec, mla_from_mapping
from distsim_gpu.workloads.specs.model_catalog import PRESET_FIELDS
from distsim_gpu.workloads.specs.moe_routing import UNIFORM, MoeRouting, moe_from_mapping
from distsim_gpu.workloads.specs.recompute import RECOMPUTE_MODES, op_sac_matmuls

__all__ = [
    "MODEL_PRESETS",
    "NORMS",
    "POSITIONS",
    "RECOMPUTE_MODES",
    "ModelSpec",
    "get_model",
    "list_models",
    "model_from_mapping",
]

POSITIONS = ("learned", "rotary", "alibi", "none")
NORMS = ("layernorm", "rmsnorm")

_INT_FIELDS = ("layers", "hidden", "heads", "seq_len", "vocab", "ffn_hidden", "kv_heads",
               "experts", "top_k", "moe_every", "first_dense_layers", "shared_experts",
               "dense_ffn_hidden", "attention_head_dim", "mtp_depth")
# Fields whose 0 means "unset / none" (the others are at least 1).
_ZERO_FIELDS = ("ffn_hidden", "kv_heads", "first_dense_layers", "shared_experts",
                "dense_ffn_hidden", "attention_head_dim", "mtp_depth")
# Upper bounds, far past any model built (the largest have ~200 layers, hidden 2^15,
# 10^6-token contexts, a 256k vocabulary, 256 experts): a value above one is a typo, and
# would have distsim allocate per layer or per token without end.
_MAXIMA = {"layers": 100_000, "hidden": 2**20, "heads": 2**16, "seq_len": 2**24,
           "vocab": 2**24, "ffn_hidden": 2**22, "kv_heads": 2**16, "experts": 2**16,
           "top_k": 2**16, "moe_every": 100_000, "first_dense_layers": 100_000,
           "shared_experts": 2**16, "dense_ffn_hidden": 2**22, "attention_head_dim": 2**16,
           "mtp_depth": 64}
_BOOL_FIELDS = ("gated_mlp", "tied_embeddings", "attention_bias", "mlp_bias",
                "embedding_norm")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A transformer's shape.  Counts are integers; FLOPs are floats.

    ``ffn_hidden`` 0 (the default) means ``4·hidden``; ``kv_heads`` 0 (the default) means
    ``heads`` (multi-head attention; fewer KV heads is grouped-query attention).  Both are
    resolved when the spec is built, so a built spec always holds the real numbers.

    Mixture of experts: with ``experts > 1`` every ``moe_every``-th layer (layer indices
    ``i`` with ``(i + 1) % moe_every == 0``; all layers when 1) replaces its MLP by
    ``experts`` MLPs of width ``ffn_hidden`` and a router; each token uses ``top_k`` of
    them.  ``position`` is ``learned`` (adds ``seq_len·hidden`` parameters), ``rotary``,
    ``alibi`` or ``none`` (no parameters).  ``norm`` is ``layernorm`` (scale and bias) or
    ``rmsnorm`` (scale only).  ``attention_window``: layers that attend within a sliding
    window or chunk (:mod:`workloads.specs.attention_window`).  ``embedding_norm`` adds a
    norm right after the word embedding (BLOOM).  Invalid values raise
    :class:`ConfigError` naming the field.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int = 0
    kv_heads: int = 0
    experts: int = 1
    top_k: int = 1
    moe_every: int = 1
    gated_mlp: bool = False
    tied_embeddings: bool = True
    position: str = "learned"
    norm: str = "layernorm"
    attention_bias: bool = True
    mlp_bias: bool = True
    embedding_norm: bool = False
    # How the router spreads tokens over the experts (workloads.specs.moe_routing).
    moe: MoeRouting = UNIFORM
    # DeepSeek-style MoE: the first layers dense, always-on shared experts, dense layers
    # of their own width; multi-head latent attention (workloads.specs.mla).
    first_dense_layers: int = 0
    shared_experts: int = 0
    dense_ffn_hidden: int = 0
    mla: MlaSpec | None = None
    # The width of one attention head where it is not hidden/heads (Qwen3: 64 heads of 128
    # over hidden 4096; 0: hidden/heads).
    attention_head_dim: int = 0
    # DeepSeek-V3's multi-token prediction (report §2.2): this many sequential modules after
    # the last layer, each a projection of [norm(h); norm(embedding of the next token)]
    # (2h -> h), one transformer block like the last layer, and the shared output head and
    # loss once more.  0: none.
    mtp_depth: int = 0
    # Local attention in some layers: a sliding window or chunks (GPT-OSS, Llama 4,
    # Mistral; workloads.specs.attention_window).  None: every layer attends in full.
    attention_window: AttentionWindow | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"must be a non-empty string, got {self.name!r}", key="name")
        for name in _INT_FIELDS:
            floor = 0 if name in _ZERO_FIELDS else 1
            check_whole(getattr(self, name), key=name, minimum=floor, maximum=_MAXIMA[name],
                        hint="0 takes the default" if floor == 0 else None,
                        too_big="larger than any model built")
        for name in _BOOL_FIELDS:
            check_bool(getattr(self, name), key=name)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.dense_ffn_hidden == 0:
            object.__setattr__(self, "dense_ffn_hidden", self.ffn_hidden)
        self._check_deepseek_keys()
        if self.mla is None and not self.attention_head_dim and self.hidden % self.heads:
            raise ConfigError(f"hidden {self.hidden} is not divisible by heads {self.heads}",
                              key="hidden", hint="head size = hidden / heads must be whole")
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}",
                key="kv_heads",
                hint="each KV head serves a whole group of query heads; "
                     f"valid: {', '.join(str(d) for d in _divisors(self.heads))}")
        if self.top_k > self.experts:
            raise ConfigError(f"top_k {self.top_k} exceeds experts {self.experts}",
                              key="top_k", hint=f"top_k must be 1..{self.experts}")
        if self.experts > 1 and self.moe_every > self.layers:
            raise ConfigError(f"moe_every {self.moe_every} exceeds layers {self.layers}",
                              key="moe_every", hint="the model would have no MoE layer")
        if self.experts > 1 and self.moe_layers <= 0:
            raise ConfigError(f"first_dense_layers {self.first_dense_layers} leaves no MoE "
                              f"layer of {self.layers}", key="first_dense_layers",
                              hint=f"at most {self.layers - self.moe_every}")
        check_choice(self.position, POSITIONS, key="position", what="position encoding")
        check_choice(self.norm, NORMS, key="norm")
        window = self.attention_window
        if window is not None and not isinstance(window, AttentionWindow):
            raise ConfigError(f"must be an attention window, got {window!r}",
                              key="attention_window")
        if window is not None and window.full_every > self.layers:
            raise ConfigError(f"full_every {window.full_every} exceeds layers {self.layers}",
                              key="attention_window.full_every",
                              hint="no layer would attend in full: write 0 for that")

    def _check_deepseek_keys(self) -> None:
        """The MoE-layout keys need experts; MLA has one K/V head per query head, no
        biases (as DeepSeek's and Megatron-Core's MLA)."""
        if self.experts == 1:
            for name, default in (("first_dense_layers", 0), ("shared_experts", 0),
                                  ("dense_ffn_hidden", self.ffn_hidden)):
                if getattr(self, name) != default:
                    raise ConfigError(f"{name} {getattr(self, name)} needs a mixture of "
                                      "experts", key=name,
                                      hint="set experts > 1, or leave it out"
                                      + (" (a dense model's MLP width is ffn_hidden)"
                                         if name == "dense_ffn_hidden" else ""))
        if self.mla is None:
            return
        if not isinstance(self.mla, MlaSpec):
            raise ConfigError(f"must be an MLA spec, got {self.mla!r}", key="mla")
        if self.kv_heads != self.heads:
            raise ConfigError(f"kv_heads {self.kv_heads} differs from heads {self.heads} "
                              "under MLA", key="kv_heads",
                              hint="MLA up-projects one key and value per query head; "
                                   "leave kv_heads out")
        if self.attention_bias:
            raise ConfigError("MLA's projections have no biases", key="attention_bias",
                              hint="set attention_bias: false with mla")

    # ----------------------------------------------------------------- shapes
    @property
    def head_dim(self) -> int:
        """Size of one attention head: ``attention_head_dim``, else hidden / heads."""
        return self.attention_head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (and of the output projection's input)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (and of the V) projection: kv_heads · head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def qk_head_dim(self) -> int:
        """Width of one query-key head: head_dim, or MLA's d_nope + d_rope."""
        return self.mla.qk_head_dim if self.mla else self.head_dim

    @property
    def v_head_dim(self) -> int:
        """Width of one value head: head_dim, or MLA's v_head_dim."""
        return self.mla.v_head_dim if self.mla else self.head_dim

    @property
    def is_moe(self) -> bool:
        """Whether any layer is a mixture-of-experts layer."""
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers: the indices ``i >= first_dense_layers`` with
        ``(i + 1) % moe_every == 0`` when experts > 1, else 0."""
        if not self.is_moe:
            return 0
        return self.layers // self.moe_every - self.first_dense_layers // self.moe_every

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has experts instead of a dense MLP."""
        self._check_index(index)
        return (self.is_moe and index >= self.first_dense_layers
                and (index + 1) % self.moe_every == 0)

    def mlp_width(self, index: int) -> int:
        """FFN width of layer ``index``'s MLP: ``ffn_hidden`` for experts (routed and
        shared) and dense models, ``dense_ffn_hidden`` for a MoE model's dense layers."""
        return self.ffn_hidden if self.is_moe_layer(index) else self.dense_ffn_hidden

    # ------------------------------------------------------------ parameters
    def norm_params(self) -> int:
        """Parameters of one norm: hidden (RMSNorm) or 2·hidden (LayerNorm)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def attention_weight_params(self) -> int:
        """Matmul weights of one attention block: Q, K, V and output projections (MLA:
        its down, up and output projections, :meth:`MlaSpec.weight_params`)."""
        if self.mla:
            return self.mla.weight_params(self.hidden, self.heads)
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim

    def attention_params(self) -> int:
        """Parameters of one attention block (weights and, if any, biases; MLA: and the
        latent norms)."""
        if self.mla:
            per_element = 2 if self.norm == "layernorm" else 1
            return self.attention_weight_params() + per_element * sum(
                self.mla.latent_widths())
        bias = (self.q_dim + self.hidden + 2 * self.kv_dim) if self.attention_bias else 0
        return self.attention_weight_params() + bias

    def mlp_weight_params(self, ffn: int | None = None) -> int:
        """Matmul weights of one MLP of width ``ffn`` (default ``ffn_hidden``: one
        expert): 2·h·f, or 3·h·f when gated."""
        return (3 if self.gated_mlp else 2) * self.hidden * (ffn or self.ffn_hidden)

    def mlp_params(self, ffn: int | None = None) -> int:
        """Parameters of one MLP of width ``ffn`` (default: one expert), biases included
        when present."""
        f = ffn or self.ffn_hidden
        if not self.mlp_bias:
            return self.mlp_weight_params(f)
        return self.mlp_weight_params(f) + (2 if self.gated_mlp else 1) * f + self.hidden

    def router_params(self) -> int:
        """Parameters of one MoE router (hidden·experts, no bias); 0 for dense models."""
        return self.hidden * self.experts if self.is_moe else 0

    def layer_params(self, index: int) -> int:
        """Parameters of layer ``index``: attention, two norms, MLP or (routed + shared)
        experts + router."""
        return self._dense_layer_params() if not self.is_moe_layer(index) else (
            self._moe_layer_params())

    def _dense_layer_params(self) -> int:
        return (self.attention_params() + 2 * self.norm_params()
                + self.mlp_params(self.dense_ffn_hidden))

    def _moe_layer_params(self) -> int:
        return (self.attention_params() + 2 * self.norm_params() + self.router_params()
                + (self.experts + self.shared_experts) * self.mlp_params())

    def layer_expert_params(self, index: int) -> int:
        """The part of layer ``index`` held by experts (sharded by expert parallelism)."""
        return self.experts * self.mlp_params() if self.is_moe_layer(index) else 0

    def params_per_layer(self) -> float:
        """Mean parameters per transformer layer.

        Exactly the per-layer count when all layers are alike (dense models, or MoE with
        ``moe_every`` 1); use :meth:`layer_params` for one layer of a mixed model.
        """
        return self.transformer_params() / self.layers

    def transformer_params(self) -> int:
        """Parameters of all transformer layers together (no embeddings, final norm)."""
        return ((self.layers - self.moe_layers) * self._dense_layer_params()
                + self.moe_layers * self._moe_layer_params())

    def embedding_params(self) -> int:
        """Input-side parameters: word embedding, learned positions, embedding norm."""
        count = self.vocab * self.hidden
        if self.position == "learned":
            count += self.seq_len * self.hidden
        if self.embedding_norm:
            count += self.norm_params()
        return count

    def output_params(self) -> int:
        """The output (logits) projection: 0 when tied to the word embedding, else V·h."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def final_norm_params(self) -> int:
        """The norm after the last layer."""
        return self.norm_params()

    def total_params(self) -> int:
        """Every parameter: embeddings, layers, final norm, untied output layer and the
        multi-token-prediction modules."""
        return (self.embedding_params() + self.transformer_params()
                + self.final_norm_params() + self.output_params()
                + self.mtp_depth * self.mtp_module_params())

    def mtp_module_params(self) -> int:
        """One multi-token-prediction module: its block (the last layer's kind), the 2h → h
        projection and the two input norms; embedding and output head are shared."""
        return (self.layer_params(self.layers - 1) + 2 * self.hidden * self.hidden
                + 2 * self.norm_params())

    def active_params(self) -> int:
        """Parameters one token uses: as :meth:`total_params` with only top_k experts."""
        moe_blocks = self.moe_layers + (
            self.mtp_depth if self.is_moe_layer(self.layers - 1) else 0)
        idle = moe_blocks * (self.experts - self.top_k) * self.mlp_params()
        return self.total_params() - idle

    # ----------------------------------------------------------------- FLOPs
    def flops_per_token_forward(self, seq_len: int | None = None) -> float:
        """Forward FLOP per token (Megatron convention, see the module docstring).

        ``Σ_layers [2·(matmul weights met) + 4·s·h] + 2·h·V`` with ``s`` = ``seq_len``
        (default: the model's).  Attention scores count the full s×s square.
        """
        s = self._seq(seq_len)
        moe = self.moe_layers
        dense = self.layers - moe
        layer_flops = 0.0
        if dense:
            layer_flops += dense * 2.0 * (self.attention_weight_params()
                                          + self.mlp_weight_params(self.dense_ffn_hidden))
        if moe:
            layer_flops += moe * 2.0 * (self.attention_weight_params()
                                        + (self.top_k + self.shared_experts)
                                        * self.mlp_weight_params()
                                        + self.router_params())
        attention_scores = self._scored_layers(s) * self._scores_flops_per_token(s)
        logits = 2.0 * self.hidden * self.vocab
        return layer_flops + attention_scores + logits

    def attention_pair_fraction(self, layer_index: int, seq_len: int) -> float:
        """The query-key pairs layer ``layer_index``'s causal attention computes over a
        sequence of ``seq_len`` tokens, as a fraction of ``seq_len²``: 1/2, or less in a
        layer that attends locally (:mod:`workloads.specs.attention_window`)."""
        self._check_index(layer_index)
        window = self.attention_window
        if window is None or not window.is_local(layer_index):
            return 0.5
        return window.pair_fraction(seq_len)

    def _scored_layers(self, s: int) -> float:
        """The layers' attention scores in full layers' worth (``layers`` without local
        attention): the model FLOP counts a full layer's ``s × s`` square."""
        if self.attention_window is None:
            return float(self.layers)
        return sum(2.0 * self.attention_pair_fraction(i, s) for i in range(self.layers))

    def _scores_flops_per_token(self, s: int) -> float:
        """Q·Kᵀ and P·V of one layer per token over the full s×s square:
        ``2·s·heads·(d_qk + d_v)``, which is ``4·s·h`` without MLA when the heads span the
        hidden size (Megatron-LM's count uses the query width, ``heads·head_dim``: Qwen3's
        64 heads of 128 over hidden 4096)."""
        if self.mla is None:
            return 4.0 * s * self.q_dim
        return 2.0 * s * self.heads * (self.qk_head_dim + self.v_head_dim)

    def model_flops_per_iteration(self, global_batch: int, seq_len: int | None = None) -> float:
        """Training FLOP of one iteration: 3 × forward (backward = 2 × forward), no recompute.

        This is the MFU numerator of Megatron-LM (Narayanan et al. 2021, eq. 3 without the
        recomputation term; Korthikanti et al. 2022 §6 "model FLOPs"): for GPT it equals
        ``72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))``.  PaLM's ``6·N + 12·l·h·s`` per token
        (Chowdhery et al. 2022, App. B) is the same count when N is the matmul weights.
        """
        s = self._seq(seq_len)
        check_whole(global_batch, key="global_batch")
        return 3.0 * self.flops_per_token_forward(s) * global_batch * s

    def hardware_flops_per_iteration(self, global_batch: int, *, recompute: str = "none",
                                     seq_len: int | None = None) -> float:
        """FLOP the GPUs execute in one iteration, recomputation included (HFU numerator).

        ``full`` adds one more forward of every layer (not of the logits layer), giving
        Narayanan's ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` for GPT; ``selective``
        (Korthikanti et al. 2022 §5) adds one more forward of the attention scores only;
        ``op`` (torchtitan's per-op policy, :mod:`workloads.specs.recompute`) the mms it does not
        keep (Llama: ``wk``, ``wo``, ``w3``), its element-wise FLOP not being counted here.
        """
        check_choice(recompute, RECOMPUTE_MODES, key="recompute", what="recompute mode")
        s = self._seq(seq_len)
        tokens = float(global_batch) * s
        base = self.model_flops_per_iteration(global_batch, s)
        scores = self._scored_layers(s) * self._scores_flops_per_token(s)
        if recompute == "full":
            layer_forward = self.flops_per_token_forward(s) - 2.0 * self.hidden * self.vocab
            return base + layer_forward * tokens
        if recompute == "selective":
            return base + scores * tokens
        if recompute == "op":  # the mms torchtitan's op policy does not keep, once more
            return base + tokens * sum(self._op_recomputed_flops_per_token(i)
                                       for i in range(self.layers))
        return base

    def _op_recomputed_flops_per_token(self, layer_index: int) -> float:
        """FLOP per token of the mms layer ``layer_index`` re-runs under ``op``
        recomputation (routed ones for each of the ``top_k`` experts a token goes to)."""
        return sum(m.flops_per_token() * (self.top_k if m.routed else 1)
                   for m in op_sac_matmuls(self, layer_index=layer_index) if not m.saved)

    # ------------------------------------------------------------------ misc
    def to_dict(self) -> dict[str, Any]:
        """Every field, resolved (JSON/YAML-ready); ``moe`` only when not the uniform,
        dropless router (so resolved configs of other models stay as they were)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.moe == UNIFORM:
            del data["moe"]
        else:
            data["moe"] = self.moe.to_dict()
        # The DeepSeek-style keys only when used, so other models' configs stay as they were.
        for name, default in (("first_dense_layers", 0), ("shared_experts", 0),
                              ("dense_ffn_hidden", self.ffn_hidden)):
            if data[name] == default:
                del data[name]
        if self.mla is None:
            del data["mla"]
        else:
            data["mla"] = self.mla.to_dict()
        if self.attention_window is None:
            del data["attention_window"]
        else:
            data["attention_window"] = self.attention_window.to_dict()
        return data

    def _seq(self, seq_len: int | None) -> int:
        if seq_len is None:
            return self.seq_len
        check_whole(seq_len, key="seq_len")
        return seq_len

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not (
                0 <= index < self.layers):
            raise ConfigError(f"layer index {index!r} is outside 0..{self.layers - 1}",
                              key="layer_index")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ----------------------------------------------------------------------------- presets
MODEL_PRESETS: Mapping[str, ModelSpec] = MappingProxyType(
    {name: ModelSpec(name=name, **written) for name, written in PRESET_FIELDS.items()})
"""Preset name -> :class:`ModelSpec` (read-only)."""


def list_models() -> list[str]:
    """Preset names, sorted."""
    return sorted(MODEL_PRESETS)


def get_model(name: str, *, key: str | None = None, source: str | None = None) -> ModelSpec:
    """The preset called ``name`` (case-insensitive); ConfigError with a suggestion if none."""
    return MODEL_PRESETS[check_choice(str(name).strip(), MODEL_PRESETS, key=key, source=source,
                                      what="model preset", fold_case=True)]


_FIELD_NAMES = tuple(f.name for f in fields(ModelSpec))


def model_from_mapping(data: Mapping[str, Any], *, source: str | None = None,
                       prefix: str = "model") -> ModelSpec:
    """Build a :class:`ModelSpec` from a YAML-style mapping, validating every key.

    Either ``{preset: NAME, <field>: override, ...}`` — the preset's written fields with
    the overrides applied — or every required field written out (``layers``, ``hidden``,
    ``heads``, ``seq_len``, ``vocab``; ``name`` defaults to ``"custom"``).  Unknown keys,
    wrong types and inconsistent values raise :class:`ConfigError` with the key path
    ``<prefix>.<key>`` and, for unknown names, a did-you-mean hint.
    """
    data = check_mapping(data, key=prefix, source=source,
                         hint="e.g. {preset: llama3-8b} or layers/hidden/...")
    check_keys(data, ("preset", *_FIELD_NAMES), prefix=prefix, source=source)
    written: dict[str, Any] = dict(data)
    preset_name = written.pop("preset", None)
    moe = written.pop("moe", None)
    if written.get("mla") is not None:
        written["mla"] = mla_from_mapping(written["mla"], source=source,
                                          prefix=f"{prefix}.mla")
    if written.get("attention_window") is not None:
        written["attention_window"] = attention_window_from_mapping(
            written["attention_window"], source=source, prefix=f"{prefix}.attention_window")
    if preset_name is not None:
        preset = get_model(str(preset_name), key=f"{prefix}.preset", source=source)
        merged: dict[str, Any] = {"name": preset.name, **PRESET_FIELDS[preset.name]}
    else:
        merged = {"name": "custom"}
        missing = [k for k in ("layers", "hidden", "heads", "seq_len", "vocab")
                   if k not in written]
        if missing:
            raise ConfigError(f"missing {', '.join(missing)}", key=prefix, source=source,
                              hint="write them out, or start from a preset: "
                                   + ", ".join(list_models()))
    for key, value in written.items():
        merged[key] = value if key in ("mla", "attention_window") else _coerce(
            key, value, f"{prefix}.{key}", source)
    try:
        spec = ModelSpec(**merged)
    except ConfigError as error:
        raise ConfigError(error.message, key=f"{prefix}.{error.key}", source=source,
                          hint=error.hint) from None
    if moe is None:
        return spec
    return replace(spec, moe=moe_from_mapping(moe, experts=spec.experts, source=source,
                                              prefix=f"{prefix}.moe"))


# Fields a written 0 may not stand for: left out, they take these defaults.
_DEFAULTED = {"ffn_hidden": "4·hidden", "kv_heads": "heads", "dense_ffn_hidden": "ffn_hidden"}


def _coerce(name: str, value: Any, path: str, source: str | None) -> Any:
    """YAML scalars to field types: whole numbers (``4096`` or ``4096.0``), bools, strings."""
    if name in _INT_FIELDS:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be a whole number, got {describe(value)}", key=path,
                              source=source)
        if value == 0 and name in _DEFAULTED:  # written 0 is not "unset"
            raise ConfigError("must be a whole number >= 1, got 0", key=path, source=source,
                              hint=f"leave {name} out for the default ({_DEFAULTED[name]})")
        return value
    if name in _BOOL_FIELDS:
        return check_bool(value, key=path, source=source)
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {value!r}", key=path, source=source)
    return value.strip().lower() if name in ("position", "norm") else value
