"""Context parallelism: attention over a sequence split between ``cp`` GPUs.

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

The other communication types (``parallelism.cp_comm_type``,
:mod:`workloads.strategy.cp_comm`), each a sequence of :class:`CpStep` per attention pass
(:func:`attention_steps`); ``K/V`` below is one ring block (:func:`cp_message_bytes`):

* **all_gather** (TE ``AttnFuncWithCPAndKVAllGather``): the forward all-gathers K and V
  over the CP group (``gather_along_first_dim``, on the compute stream: blocking,
  ``cp`` blocks gathered) and computes the rank's two chunks against them — the same
  ``cp`` blocks' work, as one kernel time; the backward gathers them again, computes and
  reduce-scatters dK/dV (``reduce_scatter_along_first_dim``, blocking, ``cp`` blocks).
* **a2a** (TE ``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses): an all-to-all turns Q, K,
  V from sequence-split to head-split (``flash_attn_a2a_communicate``, blocking: the
  attention needs its output), one attention over the whole sequence with
  ``heads/(tp·cp)`` heads, and an all-to-all of the output back; backward all-to-alls dO,
  then dQ, dK, dV.  Each all-to-all's buffer is the rank's local Q+K+V (or O), of which
  ``(cp − 1)/cp`` leaves the rank.  Needs the heads per tensor rank, query and key/value,
  divisible by ``cp``.
* **a2a+p2p** (TE ``AttnFuncWithCPAndKVP2P`` with a ``[a2a, p2p]`` group pair): the
  all-to-alls among ``cp_a2a_size = a`` consecutive CP ranks, the ring across the ``cp/a``
  groups (TE's ``send_dst``: the same a2a rank of the next group).  A ring step computes
  a causal block of ``s·a/cp`` tokens with ``heads/(tp·a)`` heads and sends K/V of that
  shape — as many bytes as a plain ring's block.
* PyTorch's context parallel (``torch/distributed/tensor/experimental/_attention.py``,
  ``_templated_ring_attention`` and ``_templated_ring_attention_backward``; torchtitan's
  ``context_parallel_rotate_method``, ``allgather`` by default in December 2024), here
  ``torch_allgather`` and ``torch_alltoall``.  **torch_allgather**
  (``_AllGatherRotater``): one asynchronous all-gather of K/V launched before the first
  block and waited after it, then the other ``cp − 1`` blocks without communication.
  **torch_alltoall** (``_AllToAllRotater``: ``permute_tensor`` to rank + 1):
  the ring, a K/V block sent beside each of the first ``cp − 1`` blocks.  Both merge
  each block's output and log-sum-exp into an fp32 running output (``_SDPAMerger`` with
  ``convert_to_f32``, on by default): a cast of the block's output to fp32 (2 bytes read,
  4 written an element) and three fp32 element-wise passes (read 8, write 4 bytes) per
  block after the first, and the final cast back — memory-bound passes over the rank's
  output at the roofline's memory bandwidth.  Backward, with either method, K/V come as
  forward, and the dK/dV accumulated in fp32 (``accum_dtype``) go round the ring after
  every block (``dkv_rotater`` is always all-to-all): ``cp`` sends of fp32 dK/dV, each
  launched after its block and waited after the next one's.  Not modelled: the
  backward's fp32 accumulation passes over dQ/dK/dV.

Everything outside the core attention (projections, MLP, norms, the tensor-parallel and
pipeline messages) is the layer's at ``s/cp`` tokens: a cost model is asked for the layer
at the rank's sequence, and the ring adds ``cp − 1`` more core-attention blocks.  The core
attention's time comes from the roofline's kernels (a cost table's own fallback roofline
when it has one): a profiled layer time does not say which part of it was attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import CORE_ATTENTION_KERNELS, stores_attention_scores
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["CP_COLLECTIVE", "TORCH_CAST_BYTES", "TORCH_MERGE_BYTES", "CpShapes", "CpStep",
           "attention_steps", "core_attention_time_s", "merge_time_s", "ring_step_blocks"]

#: PyTorch's fp32 merge (module docstring), bytes an output element: a block's cast to fp32,
#: each later block's three fp32 passes, and the final cast back.
TORCH_CAST_BYTES = 6.0
TORCH_MERGE_BYTES = 36.0
#: The communicator of context parallelism's collectives (all-gathers, reduce-scatters,
#: all-to-alls); ``"cp"`` is the ring's (workloads.strategy.dimensions).
CP_COLLECTIVE = "cp_collective"


@dataclass(frozen=True, slots=True)
class CpStep:
    """One step of a context-parallel attention pass: ``kind`` ``compute`` (``seconds``
    of attention), ``call`` (collective ``op`` of ``size_bytes`` among ``group``; blocking
    unless it has a ``handle``, which a later ``wait`` names) or ``wait``.  ``name`` ends
    the op's label."""

    kind: str
    name: str
    seconds: float = 0.0
    op: str = ""
    group: str = "cp"
    size_bytes: float = 0.0
    handle: str | None = None


@dataclass(frozen=True, slots=True)
class CpShapes:
    """What :func:`attention_steps` needs of one layer pass: ``block_s`` one ring block's
    core attention (a2a+p2p: at its shape; a2a: the whole-sequence attention),
    ``kv_bytes`` a ring block's K/V, ``qkv_bytes``/``o_bytes`` the all-to-alls' buffers
    (:func:`~workloads.cost.memory.cp_qkvo_bytes`), ``steps`` the ring's steps (``cp``,
    ``cp/a`` under a2a+p2p, 1 under a2a), ``dkv_bytes`` PyTorch's fp32 dK/dV,
    ``merge_s`` and ``cast_s`` its merge and cast passes."""

    block_s: float
    kv_bytes: float
    steps: int
    qkv_bytes: float = 0.0
    o_bytes: float = 0.0
    dkv_bytes: float = 0.0
    merge_s: float = 0.0
    cast_s: float = 0.0


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


def merge_time_s(costs: Any, bytes_moved: float) -> float:
    """Seconds of memory-bound element-wise passes moving ``bytes_moved`` bytes, at the
    roofline's memory bandwidth and efficiency (a cost table's fallback roofline)."""
    roofline = costs if hasattr(costs, "layer_work") else getattr(costs, "fallback", None)
    if roofline is None or bytes_moved <= 0:
        return 0.0
    return bytes_moved / (roofline.gpu.memory_bandwidth_bytes_per_s
                          * roofline.resolved_memory_efficiency)


def attention_steps(comm_type: str, pass_: str, shapes: CpShapes) -> tuple[CpStep, ...]:
    """One attention pass's steps under ``comm_type`` (module docstring); ``pass_``
    ``fwd``/``recompute`` (which repeats the forward's communication) or ``bwd``."""
    backward = pass_ == "bwd"
    if comm_type in ("torch_allgather", "torch_alltoall"):
        return (_torch_backward if backward else _torch_forward)(comm_type, shapes)
    if comm_type == "all_gather":
        gathered = shapes.steps * shapes.kv_bytes
        steps = [CpStep("call", "cp kv all_gather", op="all_gather", group=CP_COLLECTIVE,
                        size_bytes=gathered),
                 CpStep("compute", "attention blocks", shapes.steps * shapes.block_s)]
        if backward:
            steps.append(CpStep("call", "cp dkv reduce_scatter", op="reduce_scatter",
                                group=CP_COLLECTIVE, size_bytes=gathered))
        return tuple(steps)
    before, after = ((shapes.o_bytes, shapes.qkv_bytes) if backward
                     else (shapes.qkv_bytes, shapes.o_bytes))
    a2a = comm_type in ("a2a", "a2a+p2p")
    steps = ([CpStep("call", "cp a2a in", op="alltoall", group=CP_COLLECTIVE,
                     size_bytes=before)] if a2a else [])
    steps += _ring(pass_, shapes)
    if a2a:
        steps.append(CpStep("call", "cp a2a out", op="alltoall", group=CP_COLLECTIVE,
                            size_bytes=after))
    return tuple(steps)


def _ring(pass_: str, shapes: CpShapes) -> list[CpStep]:
    """Transformer Engine's ring over ``shapes.steps`` ranks (one block, no send, for 1):
    each step's send launched, its block computed, the send waited for."""
    if shapes.steps == 1:
        return [CpStep("compute", "attention core", shapes.block_s)]
    steps = []
    for step, blocks in enumerate(ring_step_blocks(pass_, shapes.steps)):
        if blocks:
            steps.append(CpStep("call", f"cp ring {step}", op="sendrecv",
                                size_bytes=blocks * shapes.kv_bytes, handle=f"{step}"))
        steps.append(CpStep("compute", f"attention block {step}", shapes.block_s))
        if blocks:
            steps.append(CpStep("wait", f"cp ring {step}", handle=f"{step}"))
    return steps


def _torch_kv(comm_type: str, step: int, shapes: CpShapes) -> list[CpStep]:
    """PyTorch's K/V at ``step``: all-gathered once before block 0, or one ring send
    beside each block but the last."""
    cp = shapes.steps
    if comm_type == "torch_allgather":
        return [CpStep("call", "cp kv all_gather", op="all_gather", group=CP_COLLECTIVE,
                       size_bytes=cp * shapes.kv_bytes, handle="kv")] if step == 0 else []
    return [CpStep("call", f"cp kv {step}", op="sendrecv", size_bytes=shapes.kv_bytes,
                   handle=f"kv {step}")] if step < cp - 1 else []


def _torch_kv_wait(comm_type: str, step: int) -> list[CpStep]:
    """The wait, before ``step``'s block, for the K/V it needs (none at step 0)."""
    if step == 0 or (comm_type == "torch_allgather" and step > 1):
        return []
    handle = "kv" if comm_type == "torch_allgather" else f"kv {step - 1}"
    return [CpStep("wait", f"cp {handle}", handle=handle)]


def _torch_forward(comm_type: str, shapes: CpShapes) -> tuple[CpStep, ...]:
    """PyTorch's forward: K/V as ``comm_type`` rotates them, each block then its merge
    into the fp32 output (the first block's cast only; the last adds the cast back)."""
    steps: list[CpStep] = []
    for step in range(shapes.steps):
        steps += _torch_kv_wait(comm_type, step)
        steps += _torch_kv(comm_type, step, shapes)
        merge = shapes.cast_s if step == 0 else shapes.merge_s
        if step == shapes.steps - 1:
            merge += shapes.cast_s
        steps.append(CpStep("compute", f"attention block {step}", shapes.block_s + merge))
    return tuple(steps)


def _torch_backward(comm_type: str, shapes: CpShapes) -> tuple[CpStep, ...]:
    """PyTorch's backward: K/V as forward; after each block its fp32 dK/dV sent to the
    next rank, waited for after the next block (the last after the loop)."""
    steps: list[CpStep] = []
    for step in range(shapes.steps):
        steps += _torch_kv_wait(comm_type, step)
        steps += _torch_kv(comm_type, step, shapes)
        steps.append(CpStep("compute", f"attention block {step}", shapes.block_s))
        if step:
            steps.append(CpStep("wait", f"cp dkv {step - 1}", handle=f"dkv {step - 1}"))
        steps.append(CpStep("call", f"cp dkv {step}", op="sendrecv",
                            size_bytes=shapes.dkv_bytes, handle=f"dkv {step}"))
    last = f"dkv {shapes.steps - 1}"
    return (*steps, CpStep("wait", f"cp {last}", handle=last))
