"""Multi-head latent attention (MLA): DeepSeek-V2/V3's attention behind low-rank projections.

MLA (DeepSeek-AI 2024, "DeepSeek-V2", §2.1; "DeepSeek-V3 Technical Report", arXiv
2412.19437, §2.1.1) replaces the Q, K, V projections of multi-head attention by
projections through small latents.  Per token, with ``h`` hidden, ``n`` heads, ``r_q``
the query latent (``q_lora_rank``), ``r_kv`` the key-value latent (``kv_lora_rank``),
``d_n``/``d_r`` the non-rotary/rotary query-key widths and ``d_v`` the value width::

    c_q   = norm(W_DQ · x)                 h → r_q          (no query latent when r_q = 0:
    q     = W_UQ · c_q                     r_q → n·(d_n + d_r)  q = W_Q · x, h → n·(d_n+d_r))
    c_kv  = norm(W_DKV · x), k_r = W_KR · x  h → r_kv + d_r   (one rotary key shared by heads)
    k_n, v = W_UK · c_kv, W_UV · c_kv      r_kv → n·d_n, n·d_v
    o     = attention(q, [k_n, rope(k_r)], v) over n heads, q·k width d_n + d_r, values d_v
    y     = W_O · o                        n·d_v → h

DeepSeek-V3 (its HF ``config.json``): h 7168, n 128, r_q 1536, r_kv 512, d_n 128, d_r 64,
d_v 128.  Tensor parallelism as Megatron-Core's ``MLASelfAttention`` lays it out: the
down projections (``W_DQ``, and ``W_DKV`` fused with ``W_KR``) are duplicated on every TP
rank (``parallel_mode='duplicated'``: small), the up projections (``W_UQ``, ``W_UK``
fused with ``W_UV``) are column-parallel and ``W_O`` row-parallel, split by heads.  The
latent norms (RMSNorm, or the model's norm) run on each rank over the full latents.

This module holds the shape (:class:`MlaSpec`) and its YAML parsing; parameter and FLOP
counts live in :mod:`workloads.specs.models`, the operators in
:mod:`workloads.cost.compute.operators`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from distsim_gpu.simcore.config import check_keys, check_mapping, check_whole, describe
from distsim_gpu.simcore.errors import ConfigError

__all__ = ["MlaSpec", "mla_from_mapping"]

# Far past any model built (DeepSeek-V3: latents of 1536 and 512, heads 192 wide).
_MAXIMUM = 2**16
_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """MLA's widths (module docstring).  ``q_lora_rank`` 0: queries projected directly
    (DeepSeek-V2-Lite); ``qk_rope_head_dim`` 0: no decoupled rotary part."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0

    def __post_init__(self) -> None:
        for item in fields(self):
            floor = 0 if item.name in ("q_lora_rank", "qk_rope_head_dim") else 1
            check_whole(getattr(self, item.name), key=item.name, minimum=floor,
                        maximum=_MAXIMUM, too_big="larger than any model built",
                        hint="0 means none" if floor == 0 else None)

    @property
    def qk_head_dim(self) -> int:
        """Width of one query-key head: ``d_n + d_r`` (192 for DeepSeek-V3)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def down_widths(self) -> tuple[int, int]:
        """Output widths of the duplicated down projections: (``W_DQ``: r_q, 0 without a
        query latent; ``W_DKV`` with ``W_KR``: r_kv + d_r)."""
        return self.q_lora_rank, self.kv_lora_rank + self.qk_rope_head_dim

    def weight_params(self, hidden: int, heads: int) -> int:
        """Matmul weights of one MLA block (down, up and output projections)."""
        q_down, kv_down = self.down_widths()
        q_in = self.q_lora_rank or hidden
        q_up = q_in * heads * self.qk_head_dim
        kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return hidden * (q_down + kv_down) + q_up + kv_up + heads * self.v_head_dim * hidden

    def latent_widths(self) -> tuple[int, ...]:
        """Widths the latent norms run over: r_kv, and r_q when queries are compressed."""
        return (self.kv_lora_rank, self.q_lora_rank) if self.q_lora_rank else (
            self.kv_lora_rank,)

    def to_dict(self) -> dict[str, int]:
        """Every field (JSON/YAML-ready)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


def mla_from_mapping(data: Any, *, source: str | None = None,
                     prefix: str = "model.mla") -> MlaSpec:
    """An :class:`MlaSpec` from ``{kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
    v_head_dim[, q_lora_rank]}``, every key checked (errors name ``prefix.key``)."""
    data = check_mapping(data, key=prefix, source=source,
                         hint="e.g. {q_lora_rank: 1536, kv_lora_rank: 512, "
                              "qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}")
    names = [item.name for item in fields(MlaSpec)]
    check_keys(data, names, prefix=prefix, source=source)
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)}", key=prefix, source=source,
                          hint="MLA needs " + ", ".join(_REQUIRED)
                               + " (q_lora_rank: 0 or left out = no query latent)")
    values: dict[str, int] = {}
    for name, value in data.items():
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be a whole number, got {describe(value)}",
                              key=f"{prefix}.{name}", source=source)
        values[str(name)] = value
    try:
        return MlaSpec(**values)
    except ConfigError as error:
        raise ConfigError(error.message, key=f"{prefix}.{error.key}", source=source,
                          hint=error.hint) from None

