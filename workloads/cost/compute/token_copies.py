"""The token copies around a MoE layer's expert exchange, as each dispatcher makes them.

A MoE layer copies its tokens in memory on both sides of the exchange that takes them to
their experts, and the copies depend on the kernels that exchange them:

* **Megatron-Core's all-to-all dispatcher** (``megatron/core/transformer/moe/
  token_dispatcher.py``): the rank permutes its own ``Tₑ`` tokens (its sequence-parallel
  share) into ``top_k`` copies in expert order before the all-to-all (read ``Tₑ``,
  write ``Tₑ·k``), and with several local experts sorts the ``C`` copies that arrive by
  expert once more (``sort_chunks_by_idxs``: read and write ``C``); its combine undoes
  both, the unpermute summing each token's ``k`` copies.  NCCL's flat and hierarchical
  all-to-alls run under it.
* **DeepEP** (``all_to_all: deepep``): a token is sent once to each GPU that holds one of
  its experts, so the sender copies nothing; the receiver copies the ``R`` tokens it got
  into expert order (read ``R``, write ``C``: DeepSeek's trace's ``expand_to_fused``) and
  sums them back before the combine (``reduce_fused``).  Under a uniform router
  ``R = Tₑ·ep·etp·P(a token hits the rank's experts)``
  (:func:`~distsim_gpu.collectives.deepep.reach`; node-limited routing changes that
  probability by a few per cent and is left out).  Under FP8 the received tokens are
  FP8 and copied as such; the combine's are 16-bit.

Each copy is one memory-bound kernel (the sort a second one); its backward moves the
16-bit gradients the same way back.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.collectives.deepep import reach
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["TokenCopy", "token_copies"]


@dataclass(frozen=True, slots=True)
class TokenCopy:
    """One side's copies: bytes moved, kernels, and the backward's bytes over these."""

    bytes_moved: float
    launches: int = 1
    bwd_bytes_factor: float = 1.0


def token_copies(model: ModelSpec, *, routed_tokens: float, copies: int, ep: int, etp: int,
                 deepep: bool, element_bytes: tuple[float, float],
                 ) -> tuple[TokenCopy, TokenCopy]:
    """The dispatch side's and the combine side's copies (module docstring) of a rank of
    ``model``'s MoE layer routing ``routed_tokens`` tokens whose experts take ``copies``
    routed copies, over ``ep`` expert-parallel and ``etp`` expert-tensor ranks;
    ``element_bytes``: (the activations', the dispatched tokens') bytes per element."""
    ab, sent = element_bytes
    experts, top_k, hidden = model.experts, model.top_k, model.hidden
    if deepep:
        hit = reach(ranks=ep, nodes=1, experts=experts, top_k=top_k)[0]
        expand = (routed_tokens * ep * etp * hit + copies) * hidden
        return (TokenCopy(expand * sent, bwd_bytes_factor=ab / sent),
                TokenCopy(expand * ab))
    sort = 2.0 * copies * hidden * ab if experts > ep else 0.0
    permute = routed_tokens * (1 + top_k) * hidden * ab
    side = TokenCopy(permute + sort, launches=2 if sort else 1)
    return side, side
