"""Multi-token prediction's own cost: the projection that feeds each MTP module.

DeepSeek-V3's multi-token prediction (report §2.2) runs, after the last layer, ``D``
sequential modules; module ``k`` concatenates the previous depth's normalised hidden state
with the normalised embedding of token ``i + k`` and projects the ``2h`` wide result back
to ``h`` (a column-parallel GEMM over tensor parallelism), then runs one transformer block
and the shared output head.  The block and the head are costed as the model's own
(:mod:`workloads.iteration.streams`); this module prices the projection.
"""

from __future__ import annotations

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import CostModel
from distsim_gpu.workloads.cost.compute.operators import gemm
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["mtp_projection_s"]


def mtp_projection_s(costs: CostModel, model: ModelSpec, *, tokens: int, tp: int,
                     pass_: str) -> float:
    """Seconds of one MTP module's ``2h → h`` projection over ``tokens`` on one tensor
    rank, on the roofline (a cost table's fallback); backward is its two gradient GEMMs."""
    work = gemm("mtp_projection", (tokens, model.hidden // tp, 2 * model.hidden), 2, 2)
    for candidate in (costs, getattr(costs, "fallback", None)):
        if hasattr(candidate, "kernel_time_s"):
            return candidate.kernel_time_s(work) * (1 if pass_ == "fwd" else 2)
    raise ConfigError("multi-token prediction's projection needs the roofline's GEMM costs",
                      key="model.mtp_depth", hint="use compute.costs: roofline, or a cost "
                      "table with a roofline fallback (a scenario's has one)")
