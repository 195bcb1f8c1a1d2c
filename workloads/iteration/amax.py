"""FP8 delayed scaling's amax reduction: a collective after every pass of a model chunk.

Under delayed scaling (Transformer Engine's ``DelayedScaling``, whose ``reduce_amax`` is on
by default) an FP8 tensor's scale comes from the amaxes of earlier passes, taken over every
GPU that holds a shard of it.  Transformer Engine all-reduces them (MAX) when the outermost
``fp8_autocast`` exits — Megatron-Core enters one around each model chunk's forward
(``TransformerBlock.forward``) — and again when that region's backward ends
(``reduce_and_update_fp8_tensors``): the forward's three amaxes of each FP8 linear (input,
weight, output), the backward's two (the output's and the input's gradients), 4 bytes
each, over Megatron-Core's amax reduction group, the stage's tensor-, context- and
data-parallel GPUs (``get_amax_reduction_group(with_context_parallel=True)``).  The call
is synchronous on the compute stream: a few kilobytes, latency-bound, and a meeting of
every GPU of the stage at every pass.

distsim runs it as a blocking all-reduce after each chunk's forward and backward (a split
backward's input half; a forward-backward pair ends with both) among the stage's data-
and context-parallel replicas — the ``dp`` communicator, one call per tensor rank in place
of Transformer Engine's one call over all of the stage's GPUs: the same inter-node hops,
without the few NVLink hops a tensor-parallel group adds to a latency-bound call — or,
with one replica or ``training.fp8_amax_reduction: tp`` (Megatron-Core's
``--tp-only-amax-red``), among the tensor ranks; ``none`` (``reduce_amax=False``) runs
nothing.  The call is ``latency_bound``: once the stage's rank groups meet it takes its
closed-form time, no flows (a few hundred bytes; as flows over every replica's GPUs each
pass it cost large runs minutes and moved nothing), and folding does not class replicas by
it.  Stacks whose recipes take scales from the tensor itself (current, block-wise, MX)
reduce nothing: their ``scale_update_kernel`` is off.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.workloads.cost.compute.roofline import roofline_behind
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.iteration.ops import Collective
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import ParallelConfig
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = ["AMAXES_PER_LINEAR", "AMAX_BYTES", "AmaxReduction", "amax_reduction", "fp8_linears"]

#: Bytes of one amax (fp32).
AMAX_BYTES = 4
#: Amaxes an FP8 linear layer reduces after a forward (input, weight, output) and after
#: a backward (the output's gradient, the input's gradient).
AMAXES_PER_LINEAR = {"fwd": 3, "bwd": 2}


@dataclass(frozen=True, slots=True)
class AmaxReduction:
    """The amax all-reduce of a run: the communicator its calls name (``dp`` or ``tp``)."""

    group: str

    def op(self, pass_: str, fp8_linears: int, label: str) -> Collective:
        """The blocking call after a ``pass_`` (``fwd``/``bwd``) of a chunk whose layers
        hold ``fp8_linears`` FP8 linear layers (expert instances counted each).  Among
        the tensor ranks alone it is ``exclusive`` too: timed in closed form with the
        compute around it, as a tensor-parallel call on links nothing else uses."""
        size = AMAX_BYTES * AMAXES_PER_LINEAR[pass_] * fp8_linears
        return Collective("all_reduce", float(size), label, group=self.group,
                          latency_bound=True, exclusive=self.group == "tp")


def amax_reduction(costs: object, parallel: ParallelConfig,
                   over: str = "stage") -> AmaxReduction | None:
    """The run's amax reduction under FP8 delayed scaling, ``over`` the stage's GPUs or
    its tensor-parallel group alone (``training.fp8_amax_reduction``); None where nobody
    else holds a shard, with ``over`` ``none``, or where no roofline says the recipe."""
    model = roofline_behind(costs)
    if over == "none" or model is None or model.precision not in LOW_PRECISIONS:
        return None
    stack = model.resolved_stack
    if not (stack.fp8_linear and stack.fp8.scale_update_kernel):
        return None
    if over == "stage" and parallel.dp_cp > 1:
        return AmaxReduction("dp")
    return AmaxReduction("tp") if parallel.tp > 1 else None


def fp8_linears(costs: object, model: ModelSpec, shard: LayerShard) -> int:
    """The FP8 linear layers of one layer's forward on one rank (``count`` instances of
    each: a rank's local experts)."""
    roofline = roofline_behind(costs)
    if roofline is None:
        return 0
    work = roofline.layer_work("fwd", model, shard)
    return sum(k.count for k in work.kernels if k.kind == "gemm" and k.fp8)
