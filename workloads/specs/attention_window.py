"""Local attention: layers whose queries attend to a window of the sequence, not all of it.

Several model families keep full causal attention in some layers only and let the others
attend locally, which cuts those layers' core attention from ``s²/2`` query-key pairs a
sequence to about ``s·w``:

* **sliding** windows — each query attends to itself and the ``w − 1`` tokens before it
  (Mistral 7B, w 4096 in every layer; GPT-OSS, w 128 in every second layer, the others
  full; Gemma 3, w 1024 in five layers of six).  Pairs of a sequence of ``s ≥ w`` tokens:
  ``Σᵢ min(i + 1, w) ≈ s·w − w²/2`` (``s²/2`` once ``w ≥ s``).
* **chunked** attention — the sequence is cut into chunks of ``c`` tokens and a query
  attends causally within its own chunk (Llama 4, c 8192 in three layers of four, the
  fourth full): ``⌊s/c⌋·c²/2 + r²/2`` pairs with ``r = s mod c``.

Both are written with the continuous count full causal attention uses here (``s²/2``), so
a window as long as the sequence costs exactly what full attention does.  ``full_every``
says which layers keep full attention: layer ``i`` does when ``(i + 1) % full_every == 0``
(the MoE layers' rule, ``model.moe_every``); 0: none, every layer local.

What it changes is the core attention's FLOP in flash kernels (FlashAttention skips the
blocks outside the window; an unfused implementation masks a full ``s × s`` score matrix
and pays for all of it) and the model FLOP per token.  Context parallelism with local
attention (whose ring would skip the blocks outside the window) is refused, not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.config import check_choice, check_keys, check_mapping, check_whole
from distsim_gpu.simcore.errors import ConfigError

__all__ = ["WINDOW_KINDS", "AttentionWindow", "attention_window_from_mapping"]

WINDOW_KINDS = ("sliding", "chunked")
# Far past any window in use (Mistral's 4096, Llama 4's 8192 chunks).
_MAXIMUM_TOKENS = 2**24


@dataclass(frozen=True, slots=True)
class AttentionWindow:
    """``tokens`` a query may attend to (``kind``: a ``sliding`` window or ``chunked``),
    in every layer but each ``full_every``-th (module docstring)."""

    tokens: int
    kind: str = "sliding"
    full_every: int = 0

    def __post_init__(self) -> None:
        check_whole(self.tokens, key="tokens", maximum=_MAXIMUM_TOKENS,
                    too_big="longer than any window in use")
        check_choice(self.kind, WINDOW_KINDS, key="kind", what="attention window kind")
        check_whole(self.full_every, key="full_every", minimum=0, maximum=100_000,
                    hint="0: every layer attends locally")

    def is_local(self, layer_index: int) -> bool:
        """Whether layer ``layer_index`` attends within the window."""
        return self.full_every == 0 or (layer_index + 1) % self.full_every != 0

    def pair_fraction(self, seq_len: int) -> float:
        """The query-key pairs a local layer computes over a sequence of ``seq_len``
        tokens, as a fraction of ``seq_len²`` (full causal attention: 1/2)."""
        s, w = float(seq_len), float(self.tokens)
        if w >= s:
            return 0.5
        if self.kind == "sliding":
            return (s * w - w * w / 2) / (s * s)
        whole, rest = divmod(seq_len, self.tokens)
        return (whole * w * w + rest * rest) / 2 / (s * s)

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON/YAML-ready)."""
        return {"tokens": self.tokens, "kind": self.kind, "full_every": self.full_every}


def attention_window_from_mapping(data: Any, *, source: str | None = None,
                                  prefix: str = "model.attention_window") -> AttentionWindow:
    """An :class:`AttentionWindow` from ``{tokens[, kind][, full_every]}``, every key
    checked (errors name ``prefix.key``)."""
    data = check_mapping(data, key=prefix, source=source,
                         hint="e.g. {tokens: 128, kind: sliding, full_every: 2} (GPT-OSS)")
    check_keys(data, ("tokens", "kind", "full_every"), prefix=prefix, source=source)
    if "tokens" not in data:
        raise ConfigError("missing tokens", key=prefix, source=source,
                          hint="the window's length in tokens, e.g. tokens: 4096")
    values = dict(data)
    for name in ("tokens", "full_every"):
        if isinstance(values.get(name), float) and values[name].is_integer():
            values[name] = int(values[name])
    try:
        return AttentionWindow(**{str(k): v for k, v in values.items()})
    except ConfigError as error:
        raise ConfigError(error.message, key=f"{prefix}.{error.key}", source=source,
                          hint=error.hint) from None
