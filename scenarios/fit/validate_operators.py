"""``distsim validate trace --operators SCENARIO``: each annotated operator of a profiler
trace, predicted from the scenario's cost model and set against its measured GPU time.

The trace's ``record_function`` scopes name blocks of a layer and the pass they run —
``attn(F)``, ``mlp(B)``, ``dispatch(W)``: a block name, then ``F`` (forward), ``B``
(backward for inputs: data gradients) or ``W`` (backward for weights), as DualPipe and
zero-bubble schedules split the backward; a scope without the suffix is a forward.
*Measured* is the median over the scope's instances of the GPU time of the kernels
launched inside it (:func:`~distsim_gpu.workloads.traces.measured_costs.scope_gpu_times`);
kernels of a communication library (``--comm-kernels``, default NCCL and DeepEP) are left
out and shown apart: the network model, not the cost model, predicts them.
*Predicted* is the roofline time of the operators the block names (:data:`BLOCKS`) in the
scenario's stack, for one micro-batch of one layer on one rank — not the trace's own
durations.  A ``B`` scope also holds the block's forward operators that the scenario's
activation recomputation re-runs (``training.recompute`` and ``recompute_modules``): a
framework recomputes them inside the backward, as DeepSeek's trace shows with its norms'
forward kernels and MLA up-projection GEMMs under ``attn(B)``.  The roofline is used even
when the scenario names a cost table: the point is to check the model.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.measured.records import RankTrace
from distsim_gpu.scenarios.fit.fitting import error_pct
from distsim_gpu.scenarios.report import format_table
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import LayerWork, RooflineCosts
from distsim_gpu.workloads.cost.compute.blocks import BLOCK_OPERATORS, is_weight_gradient
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.traces.measured_costs import scope_gpu_times

__all__ = ["BLOCKS", "COMM_KERNELS", "OperatorRow", "format_operator_report",
           "operator_rows", "validate_operators"]

#: Block names -> forward operators (one home: workloads.cost.compute.blocks).
BLOCKS = BLOCK_OPERATORS
COMM_KERNELS = r"(?i)nccl|dpsk::ep|deep_?ep"
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
    def error_pct(self) -> float:
        return error_pct(self.predicted_s, self.measured_s)


def _pass_operators(work: dict[str, LayerWork], names: tuple[str, ...],
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
                  work: dict[str, LayerWork]) -> list[OperatorRow]:
    """Rows for every measured scope whose block :data:`BLOCKS` knows."""
    rows = []
    for scope, instances in sorted(measured.items()):
        match = _SCOPE.match(scope)
        names = BLOCKS.get(match.group("block").lower()) if match else None
        if names is None:
            continue
        kernels = _pass_operators(work, names, (match.group("pass") or "F"))
        rows.append(OperatorRow(
            scope, len(instances), statistics.median(c for c, _ in instances),
            statistics.median(e for _, e in instances),
            sum(costs.kernel_time_s(k) for k in kernels),
            tuple(k.name for k in kernels)))
    return rows


def validate_operators(traces: Sequence[RankTrace], scenario: Any, *,
                       comm_kernels: str = COMM_KERNELS) -> dict[str, Any]:
    """Per-operator report (JSON-ready) of ``traces`` against ``scenario``'s roofline."""
    pattern = r"^(?:" + "|".join(BLOCKS) + r")(?:\([FBW]\))?$"
    measured = scope_gpu_times(traces, f"(?i){pattern}", exclude=comm_kernels)
    if not measured:
        raise ConfigError("no annotated operator scope in the traces", key="--operators",
                          hint="scopes named attn(F), mlp(B), dispatch(W), ... (block "
                               "names: " + ", ".join(BLOCKS) + ")")
    model, costs = scenario.model, scenario.roofline
    layer = next((i for i in range(model.layers) if model.is_moe_layer(i)), 0)
    shape = {"micro_batch": scenario.training.micro_batch, "seq_len": scenario.seq_len,
             "tp": scenario.parallel.tp, "ep": scenario.parallel.ep,
             "sequence_parallel": scenario.parallel.sequence_parallel,
             "layer_index": layer}
    training = scenario.training
    passes = ("fwd", "bwd") + (("recompute",) if training.recompute != "none" else ())
    work = {p: costs.layer_work(p, model, LayerShard(
        **shape, recompute=training.recompute if p == "recompute" else "full",
        recompute_modules=training.recompute_modules)) for p in passes}
    rows = operator_rows(measured, costs, work)
    errors = [abs(r.error_pct) for r in rows if r.measured_s > 0]
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
             "n/a" if r["measured_s"] <= 0 else f"{r['error_pct']:+.1f} %",
             f"{r['excluded_s'] * 1e3:.3f}", ", ".join(r["operators"]) or "-"]
            for r in data["rows"]]
    shape = data["shape"]
    lines = [f"{data['scenario']}: stack {data['stack']}, {data['precision']}, "
             f"{data['gpu']}, micro-batch {shape['micro_batch']} x {shape['seq_len']}, "
             f"tp {shape['tp']}, ep {shape['ep']}",
             *format_table(header, body)]
    if data["mean_abs_error_pct"] is not None:
        lines.append(f"mean |error| over scopes with compute: "
                     f"{data['mean_abs_error_pct']:.1f} %")
    lines.append("measured = median GPU time of the scope's kernels, communication "
                 f"kernels (/{data['comm_kernels']}/) apart; predicted = the scenario's "
                 "roofline for one micro-batch of one layer")
    return "\n".join(lines) + "\n"
