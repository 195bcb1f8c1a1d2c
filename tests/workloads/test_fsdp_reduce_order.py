"""FSDP2 without a pipeline reduces as PyTorch runs it: one reduce-scatter in flight.

FSDP2's ``FSDPParamGroup.post_backward`` (``torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py``) makes the compute stream wait for the previous unit's
reduce-scatter before it issues its own, so layer ``i-1``'s backward starts only once
layer ``i+1``'s reduce-scatter is done; the root unit (torchtitan's ``fully_shard(model)``
over the embeddings, final norm and output layer, until July 2025) is reduced in one call
by the root's final callback, after the last layer's, and waited for before the optimizer.
Until 8 December distsim launched every layer's reduce-scatter without a wait (the
compute ran ahead of a queue of them) and reduced the output layer's gradients right after
the loss, apart from the embeddings'.  DeepSpeed's ZeRO-3 (``zero: 3`` without ``fsdp``)
keeps the old stream (``tests/workloads/test_ops.py``)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.traffic import entry_grad_bytes, head_grad_bytes
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Fused, Wait
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

from tests.workloads.layouts import shape_model, stream_builder

DP = 4


def _parallel(grads: str = "bf16", **changes) -> ParallelConfig:
    return ParallelConfig(dp=DP, zero=3, fsdp=True, grad_reduce_precision=grads, **changes)


def _backward(parallel: ParallelConfig, layers: int = 6) -> list:
    builder, _ = stream_builder(shape_model(layers=layers), parallel, gpu="h100-sxm",
                                micro_batch=1)
    ops = [o for op in builder.stage_stream(0)
           for o in (op.ops if isinstance(op, Fused) else (op,))]
    start = next(i for i, o in enumerate(ops) if isinstance(o, Compute)
                 and o.pass_name == "bwd")
    return ops[start:]


@pytest.mark.parametrize("replicate", [1, 2])
def test_each_layer_reduces_after_the_previous_reduction_and_the_root_last(replicate):
    layers = 6
    parallel = _parallel(dp_replicate=replicate)
    tail = _backward(parallel, layers)
    reduces = [i for i, o in enumerate(tail) if isinstance(o, Collective)
               and o.op == "reduce_scatter"]
    labels = [tail[i].label for i in reduces]
    assert labels == [f"L{layer} reduce grads" for layer in reversed(range(layers))] + [
        "root reduce grads"]
    # One root reduce-scatter: the embeddings', the final norm's and the output layer's.
    model = shape_model(layers=layers)
    assert tail[reduces[-1]].size_bytes == pytest.approx(
        entry_grad_bytes(model, parallel) + head_grad_bytes(model, parallel, 0))
    # Before each reduce-scatter but the first, the compute stream waits for the one before.
    for before, after in pairwise(reduces):
        waits = [o for o in tail[before + 1:after] if isinstance(o, Wait)]
        assert Wait(tail[before].label) in waits
    # The root's reduction follows the backward's last compute (the embedding's) and is
    # waited for (with HSDP every unit's all-reduce across the replicas too) before the
    # optimizer.
    last_compute = max(i for i, o in enumerate(tail) if isinstance(o, Compute)
                       and o.pass_name == "bwd")
    assert tail[last_compute].label == "embedding bwd" and reduces[-1] > last_compute
    step = next(i for i, o in enumerate(tail) if isinstance(o, Compute)
                and o.label == "optimizer step")
    finals = {o.handle for o in tail[reduces[-1]:step] if isinstance(o, Wait)}
    assert "root reduce grads" in finals
    if replicate > 1:
        assert {f"{label} across replicas" for label in labels} <= finals
    # DeepSpeed's ZeRO-3 (no ``fsdp``) keeps its stream: no waits between reductions.
    zero3 = _backward(ParallelConfig(dp=DP, zero=3, grad_reduce_precision="bf16"), layers)
    assert not any(isinstance(o, Wait) and o.handle and "reduce" in o.handle for o in zero3)


def test_a_layer_backward_waits_for_the_reduction_two_layers_later(uniform):
    """On slow links (a reduce-scatter outlasts a layer's backward) the backward of layer
    ``i-1`` starts no earlier than the end of layer ``i+1``'s reduce-scatter: FSDP2's
    compute-stream wait.  Before 8 December it started as soon as its gather was done.
    The gradients go in fp32 (torchtitan's ``reduce_dtype``), twice the bf16 gathers'
    bytes, so the reductions, not the gathers, pace the backward."""
    topo = build_cluster({"preset": "switch", "gpus": DP, "link_bandwidth": "2 GB/s",
                          "link_latency": "0 us"})
    training = TrainingConfig(micro_batch=1, global_batch=DP, precision="bf16")
    result = uniform.run(topo, _parallel("fp32"), training, trace=True,
                         comm=CommParams(protocol="simple", algorithm="ring"))
    process = min(s.process for s in result.simulation.tracer.spans)
    spans = {s.name: s for s in result.simulation.tracer.spans if s.process == process}
    layers = uniform.model.layers
    for layer in range(1, layers - 1):
        reduced = spans[f"L{layer + 1} reduce grads"]
        started = spans[f"L{layer - 1} bwd attention"].start_s
        assert reduced.end_s - reduced.start_s > uniform.t_bwd_s  # the slow-link premise
        assert started >= reduced.end_s - 1e-12

