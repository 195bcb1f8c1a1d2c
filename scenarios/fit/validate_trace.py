"""``distsim validate trace``: predicted vs measured, from a job's profiler traces.

The traces are replayed (:mod:`workloads.traces.replay`) with compute as measured and
collectives re-simulated on a cluster, and the report sets predicted against measured:

* **iteration** — each profiler step's time is the slowest rank's ``ProfilerStep``
  length, measured and replayed (the replayed step ends when both its CPU side and the
  GPU work it launched are done: :func:`~workloads.traces.kineto_replay.predicted_step_s`); the
  mean over steps;
* **per rank** — step time, compute, communication (NCCL kernels, of which *waiting* for
  late peers, and DeepEP's dispatch and combine kernels, replayed at their measured time as
  ``trace summary`` counts them) and idle time, each measured and predicted;
* **per collective** — transfer time measured (the shortest kernel among the present ranks:
  the last to arrive hardly waits) and predicted (the network model), grouped by operation,
  size and group, and the waiting each side attributes.

The cluster defaults to the box the trace's GPU model comes in (``dgx1-v100``,
``dgx-a100``, ``dgx-h100``, ``dgx-h200``, ``quad-gh200``, ``gcp-a4``, ``mi300x``) with as many
nodes as the ranks need; traces do not record placement, so ``--cluster``, ``--nodes`` and
``--ranks-per-node`` say what the job ran on.
``--out DIR`` writes ``report.json``, ``summary.txt`` and ``trace.json`` — measured and
replayed timelines as separate Perfetto processes, for comparison by eye.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.records import RankTrace
from distsim_gpu.scenarios.report import format_table
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.trace import Tracer
from distsim_gpu.simcore.units import format_bytes
from distsim_gpu.topology import Topology, load_cluster
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from distsim_gpu.workloads.specs.gpus import canonical_gpu_name
from distsim_gpu.workloads.traces.kineto_replay import (
    CollectiveResult,
    ReplayResult,
    replay_traces,
)

__all__ = ["COLLECTIVES_OFF_PCT", "CPU_BOUND_IDLE_FRACTION", "WAITING_NOTE", "TraceCluster",
           "default_cluster", "format_report", "headline_notes", "report_json",
           "trace_cluster", "validate_traces", "write_output"]

WAITING_NOTE = (
    "A measured NCCL kernel lasts from its start until the collective completes, so it "
    "includes waiting for late peers. Measured transfer = the shortest kernel of the call "
    "among the present ranks (the last to arrive hardly waits); measured waiting = each "
    "rank's kernel time beyond that. Predicted: each rank waits until the last rank of the "
    "group arrives, then the transfer runs on the network model.")

# A GPU idle over half the step waits on its host most of the time: the host, replayed as
# measured, sets the step (the definition of "bound": the larger share).
CPU_BOUND_IDLE_FRACTION = 0.5
# Collectives off by more than this (median |error| of the simulated transfers), and more
# than twice the iteration, are said in the headline.  A reporting threshold, not a model
# figure: below a tenth the parts roughly agree with the whole; above it the headline would
# mislead.
COLLECTIVES_OFF_PCT = 10.0

# GPU family (canonical name prefix) -> the node preset it ships in.
_BOX_OF_GPU = (("v100", "dgx1-v100"), ("a100", "dgx-a100"), ("h100", "dgx-h100"),
               ("h200", "dgx-h200"), ("gh200", "quad-gh200"), ("b200", "gcp-a4"),
               ("mi300x", "mi300x"))


def default_cluster(traces: Sequence[RankTrace]) -> tuple[str, str]:
    """``(preset, why)``: the node preset for the traces' GPU model."""
    models = sorted({t.gpu_model for t in traces if t.gpu_model})
    for model in models:
        name = canonical_gpu_name(model)
        for family, preset in _BOX_OF_GPU:
            if name.startswith(family) or f" {family}" in name:
                return preset, f"{preset} (the box of the traces' {model})"
    found = models[0] if models else "no GPU model"
    return "dgx-a100", f"dgx-a100 (default: the traces record {found}; give --cluster)"


# --------------------------------------------------------------------------- report


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _rank_rows(result: ReplayResult) -> list[dict[str, Any]]:
    """Per rank, means over the replayed steps."""
    by_rank: dict[int, list[Any]] = {}
    for step in result.steps:
        for rank in step.ranks:
            by_rank.setdefault(rank.rank, []).append(rank)
    rows = []
    for rank, steps in sorted(by_rank.items()):
        measured = _mean([s.measured_s for s in steps])
        predicted = _mean([s.predicted_s for s in steps])

        def pair(name: str, steps: list[Any] = steps) -> dict[str, float | None]:
            m = _mean([getattr(s, f"measured_{name}_s") for s in steps])
            p = _mean([getattr(s, f"predicted_{name}_s") for s in steps])
            return {"measured_s": m, "predicted_s": p, "error_pct": _pct(p, m)}

        rows.append({"rank": rank, "measured_s": measured, "predicted_s": predicted,
                     "error_pct": _pct(predicted, measured),
                     "compute": pair("compute"), "communication": pair("communication"),
                     "comm_wait": pair("comm_wait"), "idle": pair("idle")})
    return rows


def _pct(predicted: float, measured: float) -> float | None:
    return (predicted - measured) / measured * 100.0 if measured > 0 else None


def _collective_rows(result: ReplayResult) -> list[dict[str, Any]]:
    """Calls grouped by (operation, size, group size): medians over calls and steps."""
    groups: dict[tuple[str, int | None, int], list[CollectiveResult]] = {}
    for step in result.steps:
        for call in step.collectives:
            groups.setdefault((call.op, call.size_bytes, len(call.group)), []).append(call)
    rows = []
    for (op, size, ranks), calls in sorted(groups.items(),
                                           key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2])):
        measured = statistics.median(c.measured_transfer_s for c in calls)
        predicted = statistics.median(c.predicted_transfer_s for c in calls)
        rows.append({
            "op": op, "size_bytes": size, "group_size": ranks, "calls": len(calls),
            "simulated": all(c.simulated for c in calls),
            "measured_transfer_s": measured, "predicted_transfer_s": predicted,
            "error_pct": _pct(predicted, measured),
            "measured_wait_s": statistics.median(
                statistics.fmean(c.measured_wait_s.values()) for c in calls),
            "predicted_wait_s": statistics.median(
                statistics.fmean(c.predicted_wait_s.values()) for c in calls)})
    return rows


def report_json(result: ReplayResult, *, cluster: str, sources: Sequence[str]) -> dict[str, Any]:
    """The report as one JSON-ready object (``iteration``, ``ranks``, ``collectives``, …)."""
    collectives = _collective_rows(result)
    errors = [abs(row["error_pct"]) for row in collectives
              if row["simulated"] and row["error_pct"] is not None]
    data = {
        "traces": list(sources),
        "cluster": cluster,
        "mode": result.mode,
        "world_size": result.world_size,
        "ranks_traced": list(result.ranks),
        "iteration": {"measured_s": result.measured_s, "predicted_s": result.predicted_s,
                      "error_pct": result.error_pct},
        "steps": [{"step": s.step, "measured_s": s.measured_s, "predicted_s": s.predicted_s,
                   "error_pct": s.error_pct} for s in result.steps],
        "ranks": _rank_rows(result),
        "collectives": collectives,
        "collective_transfer_error_pct": {
            "median_abs": statistics.median(errors) if errors else None,
            "calls_simulated": sum(row["calls"] for row in collectives if row["simulated"])},
        "clock_offsets_s": {str(r): v for r, v in result.clock_offsets_s.items()},
        "waiting": WAITING_NOTE,
        "notes": list(result.notes),
    }
    data["run_notes"] = [note.to_dict() for note in headline_notes(data)]
    return data


def headline_notes(data: dict[str, Any]) -> list[RunNote]:
    """What the iteration's error does not show: a step the host sets (the slowest rank's
    GPU idle over :data:`CPU_BOUND_IDLE_FRACTION` of it), and simulated collectives off by
    more than :data:`COLLECTIVES_OFF_PCT` and twice the iteration's error."""
    notes = []
    it_error = abs(data["iteration"]["error_pct"] or 0.0)
    slowest = max(data["ranks"], key=lambda r: r["measured_s"], default=None)
    if slowest is not None and slowest["measured_s"] > 0:
        idle = slowest["idle"]["measured_s"] / slowest["measured_s"]
        if idle > CPU_BOUND_IDLE_FRACTION:
            notes.append(RunNote(
                "headline", f"the step is CPU-bound: rank {slowest['rank']}'s GPU is idle "
                f"{idle:.0%} of the measured step, so the iteration's {_err(it_error)} error "
                "measures the host side replayed as measured, not the GPU work modelled"))
    median = data["collective_transfer_error_pct"]["median_abs"]
    if median is not None and median > max(COLLECTIVES_OFF_PCT, 2 * it_error):
        worst = max((abs(c["error_pct"]) for c in data["collectives"]
                     if c["simulated"] and c["error_pct"] is not None), default=median)
        notes.append(RunNote(
            "headline", f"the simulated collectives are off by {median:.1f} % (median |error|, "
            f"up to {worst:.1f} %) while the iteration is off by {it_error:.1f} %: the "
            "iteration's error hides them"))
    return notes


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def format_report(data: dict[str, Any]) -> str:
    """The report as text (from :func:`report_json`'s object)."""
    it = data["iteration"]
    traced = data["ranks_traced"]
    lines = [
        f"Trace replay: {len(traced)} of {data['world_size']} ranks traced, "
        f"{len(data['steps'])} step(s), cluster {data['cluster']}, collectives "
        f"{'simulated' if data['mode'] == 'simulated' else 'as measured'}",
        *(f"note: {note['kind']}: {note['message']}" for note in data.get("run_notes", ())),
        "",
        "Iteration (the slowest rank's step; times in ms)",
    ]
    rows = [[f"step {s['step']}", _ms(s["measured_s"]), _ms(s["predicted_s"]),
             _err(s["error_pct"])] for s in data["steps"]]
    rows.append(["mean", _ms(it["measured_s"]), _ms(it["predicted_s"]), _err(it["error_pct"])])
    lines += format_table(["", "measured", "predicted", "error"], rows)
    lines += ["", "Per rank (mean over steps; ms, measured / predicted)"]
    rows = []
    for r in data["ranks"]:
        def mp(key: str, r: dict[str, Any] = r) -> str:
            return f"{_ms(r[key]['measured_s'])} / {_ms(r[key]['predicted_s'])}"
        rows.append([str(r["rank"]), _ms(r["measured_s"]), _ms(r["predicted_s"]),
                     _err(r["error_pct"]), mp("compute"), mp("communication"),
                     mp("comm_wait"), mp("idle")])
    lines += format_table(["rank", "measured", "predicted", "error", "compute",
                           "communication", "of which waiting", "idle"], rows)
    lines += ["", "Collectives (median per call; transfer and mean waiting in µs)"]
    rows = []
    for c in data["collectives"]:
        size = format_bytes(c["size_bytes"]) if c["size_bytes"] is not None else "?"
        rows.append([c["op"], size, str(c["group_size"]), str(c["calls"]),
                     f"{c['measured_transfer_s'] * 1e6:.1f}",
                     f"{c['predicted_transfer_s'] * 1e6:.1f}" + ("" if c["simulated"] else "*"),
                     _err(c["error_pct"]) if c["simulated"] else "-",
                     f"{c['measured_wait_s'] * 1e6:.1f}", f"{c['predicted_wait_s'] * 1e6:.1f}"])
    lines += format_table(["op", "size", "ranks", "calls", "transfer meas", "transfer pred",
                           "error", "wait meas", "wait pred"], rows)
    summary = data["collective_transfer_error_pct"]
    if summary["median_abs"] is not None:
        lines.append(f"  median |error| of simulated transfers: {summary['median_abs']:.1f} % "
                     f"over {summary['calls_simulated']} calls")
    if any(not c["simulated"] for c in data["collectives"]):
        lines.append("  * not simulated (the trace gives no size or kind): measured transfer "
                     "kept")
    lines += ["", "Waiting: " + data["waiting"]]
    for note in data["notes"]:
        lines.append("Note: " + note)
    return "\n".join(lines) + "\n"


def perfetto_trace(result: ReplayResult) -> dict[str, Any]:
    """Measured and replayed GPU timelines as one Chrome/Perfetto trace, one process each
    per rank (``measured · rank r`` next to ``replayed · rank r``)."""
    tracer = Tracer()
    tracer.spans.extend(result.measured_spans)
    tracer.spans.extend(result.predicted_spans)
    return tracer.to_chrome_trace()


def write_output(directory: str | Path, data: dict[str, Any], result: ReplayResult) -> None:
    """``report.json``, ``summary.txt`` and ``trace.json`` into ``directory``, each file
    written whole or not at all."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is not a directory", source=str(out), key="--out")
    atomic_write_text(out / "report.json", json.dumps(data, indent=2) + "\n")
    atomic_write_text(out / "summary.txt", format_report(data))
    atomic_write_text(out / "trace.json",
                      json.dumps(perfetto_trace(result), separators=(",", ":")))


# --------------------------------------------------------------------------- the cluster


@dataclass(frozen=True, slots=True)
class TraceCluster:
    """The cluster a job's traces are replayed on, and how it was chosen."""

    topology: Topology
    cluster: str  # the node preset or cluster file used
    description: str  # e.g. "dgx-a100 (the box of the traces' A100), 2 node(s)"


def trace_cluster(traces: Sequence[RankTrace], *, cluster: str | None = None,
                  nodes: int | None = None, ranks_per_node: int | None = None,
                  overrides: Sequence[tuple[str, Any]] = ()) -> TraceCluster:
    """The cluster the traced job ran on: ``cluster`` (a preset or a cluster file), else
    the box of the traces' GPU model; for a node preset without ``nodes``, as many nodes
    as the ranks need at ``ranks_per_node`` (default: the node's GPUs).  ``overrides`` are
    ``(dotted_key, value)`` pairs on the cluster's fields."""
    why = cluster
    if cluster is None:
        cluster, why = default_cluster(traces)
    # Traces do not record placement: the highest rank seen sizes the job.
    world = max([t.world_size or 0 for t in traces] + [(t.rank or 0) + 1 for t in traces])
    if nodes is None and cluster in NODE_PRESETS:
        per_node = ranks_per_node or NODE_PRESETS[cluster].gpus
        nodes = max(1, -(-world // per_node))
    topology = load_cluster(cluster, nodes=nodes, overrides=list(overrides))
    return TraceCluster(topology, cluster, f"{why}, {topology.num_nodes} node(s)"
                        + _unused_nodes(topology, world, ranks_per_node))


def _unused_nodes(topology: Topology, world: int, ranks_per_node: int | None) -> str:
    """What a ``--nodes`` larger than the traced ranks fill leaves idle, said (their
    links still count in the fabric, so a what-if on it is not what the job saw)."""
    per_node = ranks_per_node or len(topology.gpus) // max(topology.num_nodes, 1)
    used = max(1, -(-world // per_node)) if per_node else topology.num_nodes
    if used >= topology.num_nodes:
        return ""
    return (f", {topology.num_nodes - used} of them unused (the traces hold {world} ranks "
            f"at {per_node} a node)")


def validate_traces(traces: Sequence[RankTrace], topology: Topology, params: CommParams, *,
                    cluster: str, mode: str = "simulated", steps: Sequence[int] | None = None,
                    ranks_per_node: int | None = None) -> tuple[dict[str, Any], ReplayResult]:
    """Replay ``traces`` on ``topology`` (:func:`~workloads.traces.kineto_replay.replay_traces`) and
    return the report (:func:`report_json`; ``cluster`` says what it ran on) with the
    replay itself, for :func:`write_output`."""
    result = replay_traces(traces, topology, params, mode=mode, steps=steps or None,
                           ranks_per_node=ranks_per_node)
    data = report_json(result, cluster=cluster, sources=[t.source for t in traces])
    return data, result
