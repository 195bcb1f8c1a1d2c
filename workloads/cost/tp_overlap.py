"""Tensor-parallel communication overlapped with the GEMMs, as Transformer Engine runs it.

With sequence parallelism every attention and MLP block gathers its input along the
sequence (all-gather) before its first GEMM and reduce-scatters its output after its last
one.  Transformer Engine's userbuffers (Megatron ``--tp-comm-overlap``, NeMo's
``tp_comm_overlap``; torchtitan's async-TP does the same in PyTorch) split each such
collective into chunks and run it against the GEMM it feeds or drains, chunk by chunk:

* **all-gather ⊗ GEMM** (``qkv_fprop``, ``fc1_fprop``; backward ``proj_dgrad``,
  ``fc2_dgrad``): *ring exchange* — ``tp`` steps, each GEMM chunk on the slice that has
  arrived while the next slice moves; the copies run on the copy engines and hold no SMs;
* **GEMM ⊗ reduce-scatter** (``proj_fprop``, ``fc2_fprop``): *pipelined* — the GEMM in
  ``splits`` chunks, each chunk's reduce-scatter while the next computes, its kernels
  holding ``sms`` SMs the GEMM cannot use;
* **reduce-scatter ∥ weight gradient** (backward, ``qkv_wgrad``, ``fc1_wgrad``): *bulk* —
  the input linear's data gradient done, its reduce-scatter runs whole beside the weight
  gradient GEMM.

A pipeline of ``n`` chunks, comm chunk ``c`` (the closed form of a collective of ``1/n`` of
the bytes) and GEMM chunk ``g``, takes ``c + (n − 1)·max(c, g) + g``: the longer side,
plus the first chunk of the other side before it can start (all-gather first) or the last
after it (reduce-scatter last).  The GEMM runs at ``sm_count / (sm_count − sms)`` of its
time alone (:func:`gemm_stretch`).

Which GEMM each collective pairs with, per pass (:func:`paired_gemms_s`), as NeMo's
userbuffers presets set them (``nemo/collections/llm/recipes/tp_overlap_configs/
userbuffers.py``: every preset, H100 and B200, 8B to 405B): forward (and recompute) the
block's input linear (``qkv`` / ``mlp_fc1``) with the all-gather by ring exchange and its
output linear (``attn_out`` / ``mlp_fc2``) with the pipelined reduce-scatter; backward the
output linear's data gradient with the gradient's all-gather by ring exchange
(``proj_dgrad`` / ``fc2_dgrad``), and the input linear's weight gradient with the
reduce-scatter of its data gradient as a *bulk* overlap (``qkv_wgrad`` / ``fc1_wgrad``:
the whole collective beside the whole GEMM, ``max(c, g)``, the GEMM on every SM —
``set_sm_margin=False`` — so not stretched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute.blocks import is_weight_gradient
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["PAIRED_BLOCKS", "TE_PIPELINE_SMS", "TE_PIPELINE_SPLITS", "bulk_pair_s",
           "chunked_operator_times_s", "gemm_stretch", "paired_blocks", "paired_gemms_s",
           "pipelined_pair_s", "roofline_of", "scatter_is_bulk"]

# Transformer Engine's userbuffers defaults for a pipelined (chunked) overlap: 4 splits on
# 16 SMs (transformer_engine/pytorch/module/base.py, ``initialize_ub``'s default config;
# NeMo's per-model userbuffers presets use 16-24 SMs for ``proj_fprop``/``fc2_fprop``).
TE_PIPELINE_SPLITS = 4
TE_PIPELINE_SMS = 16

#: Per block, the (all-gather's, reduce-scatter's) GEMM operators, by pass: backward the
#: first's data gradient, the second's weight gradient (module docstring).
_PAIRS = {
    "fwd": {"attention": ("qkv", "attn_out"), "mlp": ("mlp_fc1", "mlp_fc2")},
    "bwd": {"attention": ("attn_out", "qkv"), "mlp": ("mlp_fc2", "mlp_fc1")},
}


#: A layer's blocks, in the order :func:`paired_blocks` counts them.
PAIRED_BLOCKS = ("attention", "mlp")


def paired_blocks(model: ModelSpec, parallel: Any, layer: int) -> int:
    """How many of ``layer``'s blocks (:data:`PAIRED_BLOCKS`, in order) run their TP
    collectives against their GEMMs under ``parallelism.tp_comm_overlap``: both of a dense
    layer; a MoE layer's attention only, its MLP's gathers and scatters of the routed
    tokens being Megatron-Core's token dispatcher's own, not Transformer Engine's
    userbuffers; none of a MoE layer split in halves (``moe_overlap``) or without the
    overlap."""
    if not parallel.tp_comm_overlap:
        return 0
    if not model.is_moe_layer(layer):
        return 2
    return 0 if parallel.moe_overlap and parallel.ep > 1 else 1


def pipelined_pair_s(chunk_comm_s: float, gemm_s: float, splits: int) -> float:
    """Seconds of a collective in ``splits`` chunks of ``chunk_comm_s`` pipelined with a
    GEMM of ``gemm_s`` (module docstring): ``c + (n − 1)·max(c, g) + g``, ``g = gemm_s/n``."""
    chunk_gemm_s = gemm_s / splits
    return chunk_comm_s + (splits - 1) * max(chunk_comm_s, chunk_gemm_s) + chunk_gemm_s


def bulk_pair_s(comm_s: float, gemm_s: float) -> float:
    """Seconds of a collective of ``comm_s`` run whole beside a GEMM of ``gemm_s``
    (Transformer Engine's bulk overlap): the longer of the two."""
    return max(comm_s, gemm_s)


def scatter_is_bulk(pass_: str) -> bool:
    """Whether ``pass_``'s reduce-scatter runs as a bulk overlap beside its weight-gradient
    GEMM (the backward's) rather than pipelined with its GEMM (the forward's)."""
    return pass_ == "bwd"


def gemm_stretch(sm_count: int, sms: int, *, key: str = "parallelism.tp_comm_overlap_sms",
                 ) -> float:
    """How much longer a GEMM runs while communication kernels hold ``sms`` of the GPU's
    ``sm_count`` SMs: ``sm_count / (sm_count − sms)``."""
    if sms >= sm_count:
        raise ConfigError(f"{sms} SMs for communication leave none of the GPU's {sm_count} "
                          "for the GEMM", key=key, hint=f"use fewer than {sm_count}")
    return sm_count / (sm_count - sms)


def roofline_of(costs: Any) -> Any:
    """The per-operator (roofline) cost model behind ``costs``: itself, or a table's
    roofline fallback; a :class:`ConfigError` when there is none."""
    for candidate in (costs, getattr(costs, "fallback", None)):
        if hasattr(candidate, "operator_times_s") and hasattr(candidate, "layer_work"):
            return candidate
    raise ConfigError("tp_comm_overlap pairs each collective with a GEMM and needs "
                      "per-operator times: a roofline, or a cost table with a roofline "
                      "fallback", key="parallelism.tp_comm_overlap",
                      hint="use compute.costs: roofline, or tp_comm_overlap: false")


def chunked_operator_times_s(roofline: Any, work: Any, chunks: Mapping[str, int],
                             tokens: int) -> dict[str, float]:
    """:meth:`operator_times_s` with the GEMMs of the operators in ``chunks`` run as that
    many GEMMs over a slice of the ``tokens`` rows each (their forward and data-gradient
    GEMMs, whose ``m`` is the tokens; a weight gradient reduces over them and runs whole):
    a chunk of fewer rows fills fewer tiles and waves (:func:`matmul_efficiency`), which
    is what splitting a GEMM under a collective costs."""
    out: dict[str, float] = {}
    for item in work.kernels:
        n = chunks.get(item.base_name, 1)
        if n > 1 and item.kind == "gemm" and item.m == tokens:
            piece = replace(item, m=-(-item.m // n), flops=item.flops / n,
                            bytes_moved=item.bytes_moved / n)
            seconds = n * roofline.kernel_time_s(piece)
        else:
            seconds = roofline.kernel_time_s(item)
        out[item.base_name] = out.get(item.base_name, 0.0) + seconds
    return out


def paired_gemms_s(costs: Any, pass_: str, model: ModelSpec, shard: LayerShard,
                   chunks: tuple[int, int] = (1, 1)) -> dict[str, tuple[float, float]]:
    """Per block (``attention``, ``mlp``): the seconds of the GEMM the all-gather overlaps
    and of the one the reduce-scatter overlaps, in ``pass_`` (``recompute`` as ``fwd``;
    backward the data gradient of the one and the weight gradient of the other: module
    docstring), as fractions of the layer's time under the roofline applied to ``costs``'
    own layer time (so a cost table keeps its total).  ``chunks``: the pieces the
    all-gather's and the reduce-scatter's GEMMs run in (:func:`chunked_operator_times_s`;
    a bulk overlap's runs whole); whole by default."""
    roofline = roofline_of(costs)
    cost_pass = "recompute" if pass_ == "recompute" else pass_
    backward = pass_ == "bwd"
    pairs = _PAIRS["bwd" if backward else "fwd"]
    gather_chunks, scatter_chunks = chunks[0], 1 if scatter_is_bulk(pass_) else chunks[1]
    pieces = {ag: gather_chunks for ag, _ in pairs.values()}
    pieces |= {rs: scatter_chunks for _, rs in pairs.values()}
    work = roofline.layer_work(cost_pass, model, shard)
    tokens = shard.micro_batch * shard.seq_len
    # Backward, the gathered gradient feeds the data gradient and the scattered one is the
    # data gradient's output, reduced beside the weight gradient.
    data = chunked_operator_times_s(
        roofline, replace(work, kernels=tuple(k for k in work.kernels
                                              if not is_weight_gradient(k))), pieces, tokens)
    weights = chunked_operator_times_s(
        roofline, replace(work, kernels=tuple(k for k in work.kernels
                                              if is_weight_gradient(k))), pieces, tokens)
    layer_s = costs.layer_time_s(cost_pass, model, shard)
    roofline_s = roofline.layer_time_s(cost_pass, model, shard)
    scale = layer_s / roofline_s if roofline_s > 0 else 0.0
    scattered = weights if backward else data
    return {block: (data.get(ag, 0.0) * scale, scattered.get(rs, 0.0) * scale)
            for block, (ag, rs) in pairs.items()}
