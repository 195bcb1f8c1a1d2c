"""Helpers the strategy tests share: a layout checked against a model's shape, and the
stream builder of one pipeline stage over the roofline costs of a GPU."""

from __future__ import annotations

from typing import Any

from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig, check_strategy


def shape_model(*, layers: int, heads: int = 16, kv_heads: int = 16,
                experts: int = 1) -> ModelSpec:
    """A model with these layers, heads, KV heads and experts (what ``check_strategy``
    reads of one), small elsewhere."""
    return ModelSpec("shape", layers=layers, hidden=8 * heads, heads=heads, seq_len=128,
                     vocab=64, kv_heads=kv_heads, experts=experts)


def check_layout(parallel: ParallelConfig, *, micro_batch: int, layers: int, heads: int = 16,
                 kv_heads: int = 16, experts: int = 1, **shape: Any) -> int:
    """``check_strategy`` for one micro-batch per replica (global batch = micro-batch ·
    dp) of a model with these layers, heads and experts; its micro-batch count."""
    training = TrainingConfig(micro_batch=micro_batch, global_batch=micro_batch * parallel.dp)
    model = shape_model(layers=layers, heads=heads, kv_heads=kv_heads, experts=experts)
    return check_strategy(model, parallel, training, num_gpus=parallel.num_gpus,
                          source="s.yaml", **shape)


def stream_builder(model: ModelSpec, parallel: ParallelConfig, *, gpu: str, micro_batch: int,
                   recompute: str = "none",
                   precision: str = "bf16") -> tuple[StreamBuilder, RooflineCosts]:
    """The stream builder of one micro-batch on ``gpu``'s roofline, and those costs."""
    training = TrainingConfig(micro_batch=micro_batch, global_batch=micro_batch,
                              precision=precision, recompute=recompute)
    costs = RooflineCosts(get_gpu(gpu), precision=precision)
    return StreamBuilder(model, parallel, training, costs, microbatches=1), costs
