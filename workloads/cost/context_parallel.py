"""Context parallelism: attention over a sequence split between ``cp`` GPUs, as a ring.

Megatron-Core runs context parallelism through Transformer Engine's ring attention
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``,
``AttnFuncWithCPAndKVP2P``).  What this module takes from it:

* **Load balance.**  A sequence of ``s`` tokens is cut into ``2·cp`` chunks and CP rank
  ``i`` keeps chunks ``i`` and ``2·cp − 1 − i``.  Under a causal mask every rank then has
  the same work: at step 0 its queries attend to its own keys (causal, half of a
  ``(s/cp)²`` block); at every other step either the first half of the received keys or
  the second half of its queries take part — again half of ``(s/cp)²``.  So each of the
  ``cp`` steps costs the core attention of an ``s/cp``-token causal sequence, and a rank's
  attention is ``cp`` such blocks (``1/cp`` of the whole sequence's, as it should be).
* **The ring, forward.**  Step ``i`` starts the send of the key/value block it holds to
  the next CP rank (and the receive of the previous rank's) and computes attention with
  the block it has; the step ends when both are done.  ``cp − 1`` exchanges per attention
  forward, each the K and V of ``s/cp`` tokens (:func:`workloads.cost.traffic.cp_message_bytes`),
  overlapped with one block's compute.
* **The ring, backward.**  The key/value blocks go round again, and with them the
  gradients dK/dV accumulated for each block: step 0 sends K/V, steps ``1 … cp − 2`` send
  K/V and dK/dV, the last step sends dK/dV only (TE's ``p2p_comm_buffers[i][0|1]``) — ``cp``
  exchanges, ``2·(cp − 1)`` blocks' worth of bytes.  Recomputation re-runs the forward's
  ring.

Everything outside the core attention (projections, MLP, norms, the tensor-parallel and
pipeline messages) is the layer's at ``s/cp`` tokens: a cost model is asked for the layer
at the rank's sequence, and the ring adds ``cp − 1`` more core-attention blocks.  The core
attention's time comes from the roofline's kernels (a cost table's own fallback roofline
when it has one): a profiled layer time does not say which part of it was attention.
"""

from __future__ import annotations

from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import CORE_ATTENTION_KERNELS, stores_attention_scores
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["core_attention_time_s", "ring_step_blocks"]


def ring_step_blocks(pass_: str, cp: int) -> tuple[int, ...]:
    """Per step of one attention pass's ring, how many K/V-sized blocks each GPU sends
    while it computes that step's block (0: none).  ``pass_`` ``fwd``/``recompute``:
    ``cp − 1`` steps of one block, then a last step without a send; ``bwd``: K/V first,
    K/V + dK/dV in between, dK/dV last (module docstring)."""
    if cp <= 1:
        return ()
    if pass_ != "bwd":
        return (1,) * (cp - 1) + (0,)
    return (1,) + (2,) * (cp - 2) + (1,)


def core_attention_time_s(costs: Any, pass_: str, model: ModelSpec,
                          shard: LayerShard) -> float:
    """Seconds of the core attention (scores to context) of one pass of one layer on one
    tensor rank, for sequences of ``shard.seq_len`` tokens: one block of the CP ring when
    that is a CP rank's ``s/cp``.  Read from the roofline's kernels of ``costs`` (or
    of its ``fallback``, for a cost table); a :class:`ConfigError` when neither has them,
    or when attention is unfused (Transformer Engine's ring needs fused attention)."""
    roofline = costs if hasattr(costs, "layer_work") else getattr(costs, "fallback", None)
    if roofline is None or not hasattr(roofline, "layer_work"):
        raise ConfigError("context parallelism needs the roofline's core-attention kernels",
                          key="compute.costs",
                          hint="give the cost table a roofline fallback (a scenario's "
                          "cost table has one)")
    if stores_attention_scores(roofline):
        raise ConfigError("context parallelism runs fused (flash) attention; "
                          "attention: unfused has no ring", key="compute.attention",
                          hint="use compute.attention: flash with parallelism.cp > 1")
    work = roofline.layer_work(pass_, model, shard)
    return sum(roofline.kernel_time_s(kernel) for kernel in work.kernels
               if kernel.name.split(".")[0] in CORE_ATTENTION_KERNELS)
