"""Under FP8, Transformer Engine's sequence-parallel all-gathers move the FP8 cast: half
the bytes of the 16-bit reduce-scatters, on stacks that gather FP8 and only there."""

from __future__ import annotations

import pytest
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.cost.compute.stacks import get_stack
from distsim_gpu.workloads.iteration.ops import Collective, TpOverlap
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

MODEL = model_from_mapping({"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                            "seq_len": 512, "vocab": 32000})
TOKENS_HIDDEN = 2 * 512 * 1024  # micro-batch 2


def _tp_sizes(stack: str, precision: str, overlap: bool) -> dict[str, set[float]]:
    par = ParallelConfig(tp=4, sequence_parallel=True, tp_comm_overlap=overlap)
    train = TrainingConfig(micro_batch=2, global_batch=2, precision=precision)
    costs = RooflineCosts(get_gpu("h100-sxm"), precision=precision, stack=get_stack(stack))
    stream = StreamBuilder(MODEL, par, train, costs, microbatches=1).stage_stream(0)
    ops = [o.comm if isinstance(o, TpOverlap) else o for o in stream]
    sizes: dict[str, set[float]] = {}
    for op in ops:
        if isinstance(op, Collective) and op.op in ("all_gather", "reduce_scatter"):
            sizes.setdefault(op.op, set()).add(op.size_bytes)
    return sizes


@pytest.mark.parametrize("overlap", [False, True])
def test_te_stacks_gather_fp8_and_reduce_scatter_16_bit(overlap):
    sizes = _tp_sizes("megatron-core", "fp8", overlap)
    assert sizes == {"all_gather": {TOKENS_HIDDEN * 1}, "reduce_scatter": {TOKENS_HIDDEN * 2}}


@pytest.mark.parametrize(("stack", "precision"), [("megatron-core", "bf16"),
                                                  ("torch-compile", "fp8")])
def test_16_bit_gathers_elsewhere(stack, precision):
    sizes = _tp_sizes(stack, precision, False)
    assert sizes == {"all_gather": {TOKENS_HIDDEN * 2}, "reduce_scatter": {TOKENS_HIDDEN * 2}}
