"""``distsim validate trace --operators SCENARIO``: each annotated operator of a profiler
trace, predicted from the scenario's cost model and set against its measured GPU time.

The trace's ``record_function`` scopes name blocks of a layer and the pass they run —
``attn(F)``, ``mlp(B)``, ``dispatch(W)``: a block name, then ``F`` (forward), ``B``
(backward for inputs: data gradients) or ``W`` (backward for weights), as DualPipe and
zero-bubble schedules split the backward; a scope without the suffix is a forward.
*Measured* is the median over the scope's instances of the time the GPU ran the kernels
launched inside it — the union of their intervals, so that two streams' kernels running
at once count once (:func:`~distsim_gpu.workloads.traces.measured_costs.scope_gpu_times`);
kernels of a communication library (``--comm-kernels``, default NCCL and DeepEP) are left
out and shown apart: the network model, not the cost model, predicts them.
*Predicted* is the roofline time of the operators the block holds in the scenario's stack
(:func:`~distsim_gpu.workloads.cost.compute.blocks.block_operators`: a MoE layer's norm
and router end its attention block, its token copies are its MLP block's, and
``dispatch`` and ``combine`` are communication, with no operator to predict), for one
micro-batch of one layer on one rank — not the trace's own durations. A ``B`` scope also
holds the block's forward operators that the scenario's activation recomputation re-runs
(``training.recompute`` and ``recompute_modules``): a framework recomputes them inside
the backward, as DeepSeek's trace shows with its norms' forward kernels and MLA
up-projection GEMMs under ``attn(B)``. The roofline is used even when the scenario names
a cost table: the point is to check the model.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.measured.records import RankTrace
from distsim_gpu.measured.summary import COMM_KERNEL_NAMES
from distsim_gpu.scenarios.fit.fitting import error_pct
from distsim_gpu.scenarios.report import format_table
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import LayerWork, RooflineCosts
from distsim_gpu.workloads.cost.compute.blocks import (
    BLOCK_NAMES,
    block_operators,
    is_weight_gradient,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.traffic import exchanges_by_deepep
from distsim_gpu.workloads.traces.measured_costs import scope_gpu_times

__all__ = ["COMM_KERNELS", "OperatorRow", "format_operator_report", "operator_rows",
           "pass_operators", "scenario_layer_work", "validate_operators"]

COMM_KERNELS = COMM_KERNEL_NAMES.pattern  # (the kernels trace summary counts as communication)
_SCOPE = re.compile(r"^(?P<block>[A-Za-z_]+)(?:\((?P<pass>[FBW])\))?$")


@dataclass(frozen=True, slots=True)
class OperatorRow:
    """One annotated block and pass: measured and predicted seconds."""

    scope: str
    instances: int
    measured_s: float
    excluded_s: float
    predicted_s: float
    operators: tuple[str, ...]

    @property
    def error_pct(self) -> float | None:
        """Predicted over measured, in per cent; ``None`` for a scope without compute
        measured or without an operator of the model's (an all-to-all's)."""
        if self.measured_s <= 0 or not self.operators:
            return None
        return error_pct(self.predicted_s, self.measured_s)


def pass_operators(work: dict[str, LayerWork], names: tuple[str, ...],
                   pass_: str) -> list[Any]:
    """The operators of block ``names`` in pass F, B or W (B: the recomputed forward
    operators first, when ``work`` has a ``recompute`` pass)."""
    if pass_ == "F":
        return [k for k in work["fwd"].kernels if k.name in names]
    weight = [k for k in work["bwd"].kernels if k.base_name in names]
    if pass_ == "W":
        return [k for k in weight if is_weight_gradient(k)]
    recomputed = [k for k in work["recompute"].kernels
                  if k.name in names] if "recompute" in work else []
    return recomputed + [k for k in weight if not is_weight_gradient(k)]


def operator_rows(measured: dict[str, list[tuple[float, float]]], costs: RooflineCosts,
                  work: dict[str, LayerWork], moe: bool) -> list[OperatorRow]:
    """Rows for every measured scope of a block (of a MoE layer if ``moe``)."""
    rows = []
    for scope, instances in sorted(measured.items()):
        match = _SCOPE.match(scope)
        names = block_operators(match.group("block"), moe) if match else None
        if names is None:
            continue
        kernels = pass_operators(work, names, (match.group("pass") or "F"))
        rows.append(OperatorRow(
            scope, len(instances), statistics.median(c for c, _ in instances),
            statistics.median(e for _, e in instances),
            sum(costs.kernel_time_s(k) for k in kernels),
            tuple(k.name for k in kernels)))
    return rows


def scenario_layer_work(scenario: Any) -> tuple[dict[str, Any], dict[str, LayerWork]]:
    """The shape of one micro-batch of ``scenario``'s first MoE layer (its first layer
    without one) on one rank, and that layer's operators per pass (``fwd``, ``bwd`` and,
    under activation recomputation, ``recompute``)."""
    model, costs, training = scenario.model, scenario.roofline, scenario.training
    layer = next((i for i in range(model.layers) if model.is_moe_layer(i)), 0)
    shape = {"micro_batch": training.micro_batch, "seq_len": scenario.seq_len,
             "tp": scenario.parallel.tp, "ep": scenario.parallel.ep,
             "sequence_parallel": scenario.parallel.sequence_parallel,
             "layer_index": layer}
    passes = ("fwd", "bwd") + (("recompute",) if training.recompute != "none" else ())
    deepep = exchanges_by_deepep(scenario.comm.all_to_all, scenario.parallel.ep)
    work = {p: costs.layer_work(p, model, LayerShard(
        **shape, recompute=training.recompute if p == "recompute" else "full",
        recompute_modules=training.recompute_modules, deepep=deepep))
        for p in passes}
    return shape, work


def validate_operators(traces: Sequence[RankTrace], scenario: Any, *,
                       comm_kernels: str = COMM_KERNELS) -> dict[str, Any]:
    """Per-operator report (JSON-ready) of ``traces`` against ``scenario``'s roofline."""
    pattern = r"^(?:" + "|".join(BLOCK_NAMES) + r")(?:\([FBW]\))?$"
    measured = scope_gpu_times(traces, f"(?i){pattern}", exclude=comm_kernels)
    if not measured:
        raise ConfigError("no annotated operator scope in the traces", key="--operators",
                          hint="scopes named attn(F), mlp(B), dispatch(W), ... (block "
                               "names: " + ", ".join(BLOCK_NAMES) + ")")
    model, costs = scenario.model, scenario.roofline
    shape, work = scenario_layer_work(scenario)
    rows = operator_rows(measured, costs, work, model.is_moe_layer(shape["layer_index"]))
    # The all-to-alls' scopes have no operator of the model's: the network model's.
    errors = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return {"scenario": scenario.name, "stack": costs.stack.name,
            "precision": costs.precision, "gpu": costs.gpu.name, "shape": shape,
            "comm_kernels": comm_kernels,
            "rows": [{"scope": r.scope, "instances": r.instances,
                      "measured_s": r.measured_s, "excluded_s": r.excluded_s,
                      "predicted_s": r.predicted_s, "error_pct": r.error_pct,
                      "operators": list(r.operators)} for r in rows],
            "mean_abs_error_pct": statistics.fmean(errors) if errors else None}


def format_operator_report(data: dict[str, Any]) -> str:
    """The report as a text table."""
    header = ["scope", "n", "measured (ms)", "predicted (ms)", "error", "comm (ms)",
              "operators"]
    body = [[r["scope"], str(r["instances"]), f"{r['measured_s'] * 1e3:.3f}",
             f"{r['predicted_s'] * 1e3:.3f}",
             "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.1f} %",
             f"{r['excluded_s'] * 1e3:.3f}", ", ".join(r["operators"]) or "-"]
            for r in data["rows"]]
    shape = data["shape"]
    lines = [f"{data['scenario']}: stack {data['stack']}, {data['precision']}, "
             f"{data['gpu']}, micro-batch {shape['micro_batch']} x {shape['seq_len']}, "
             f"tp {shape['tp']}, ep {shape['ep']}",
             *format_table(header, body, right={1, 2, 3, 4, 5})]  # operators: left
    if data["mean_abs_error_pct"] is not None:
        lines.append(f"mean |error| over the blocks' scopes with compute: "
                     f"{data['mean_abs_error_pct']:.1f} %")
    lines.append("measured = median time the GPU ran the scope's kernels (their union), "
                 "communication "
                 f"kernels (/{data['comm_kernels']}/) apart; predicted = the scenario's "
                 "roofline for one micro-batch of one layer")
    return "\n".join(lines) + "\n"
