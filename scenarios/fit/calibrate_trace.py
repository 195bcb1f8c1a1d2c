"""``distsim calibrate trace``: fit network and compute parameters to a job's traces.

**Network.** Every collective the traces hold with a known kind and size, matched across
ranks as the replay matches them (:mod:`workloads.traces.replay`), is one sample: its
measured transfer time (the shortest kernel among the present ranks — the rank that
arrived last hardly waited) against the closed-form time of the same call on the cluster
(:meth:`collectives.Communicator.estimate_s`, the real group on the real routes).  As
``calibrate nccl`` does (the same fit, :mod:`scenarios.fit.fitting`), it moves the
efficiency of each link kind the samples cross, bounded to [0.2, 1], and one factor on
every protocol latency, bounded to [0.1, 20], minimising the squared log ratio of
predicted to measured time with Nelder–Mead; it reports the median error before and
after, and a cross-validation (fit on every other sample by size, test on the rest).
Where ranks of a group have no trace, the measured kernels include waiting for them, so
the fit would read a slow network: the result says so.

**Compute** (with ``--scenario``, a scenario describing the traced job).  The roofline's
GEMM efficiency (``compute.matmul_efficiency``) is set so that the scenario's mean
per-GPU compute time equals the traces' mean compute busy time per step and rank — a
one-dimensional root found by bisection on the efficiency's logarithm (compute time
falls monotonically as the efficiency rises).

The output (``-o FILE``) holds ``communication:`` (and ``compute:``) sections for a
scenario or ``--comm``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.measured.records import RankTrace
from distsim_gpu.measured.summary import summarise
from distsim_gpu.scenarios.fit.calibrate_nccl import (
    Calibration,
    calibrated_params,
    comm_overrides,
    comm_parameters,
)
from distsim_gpu.scenarios.fit.fitting import fit_log_ratios
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.traces.kineto_replay import (
    CollectiveResult,
    check_one_job,
    replay_traces,
)
from distsim_gpu.workloads.traces.replay import place_ranks

__all__ = ["ComputeFit", "TraceCalibration", "calibrate_trace", "fit_compute_efficiency",
           "fit_to_json", "fitted_sections", "format_fit", "measured_compute_s"]

_MATMUL_BOUNDS = (0.02, 1.0)


@dataclass(frozen=True, slots=True)
class _Sample:
    op: str
    gpus: tuple[str, ...]
    size_bytes: int
    measured_s: float


@dataclass(frozen=True, slots=True)
class TraceCalibration(Calibration):
    """Fitted network parameters and the error of the closed forms on the samples (%)."""

    complete_groups: bool = True  # every rank of every sampled group was traced

    def overrides(self) -> dict[str, Any]:
        """The fitted values as a scenario's ``communication`` section."""
        return comm_overrides(self.params, {k: round(v, 4)
                                            for k, v in self.link_efficiency.items()})


@dataclass(frozen=True, slots=True)
class ComputeFit:
    """The GEMM efficiency that makes a scenario's compute time match the traces'."""

    matmul_efficiency: float
    measured_compute_s: float
    predicted_before_s: float
    predicted_after_s: float
    at_bound: bool


def _samples(traces: Sequence[RankTrace], topology: Topology,
             ranks_per_node: int | None) -> tuple[list[_Sample], bool]:
    result = replay_traces(traces, topology, mode="measured", ranks_per_node=ranks_per_node)
    gpus = place_ranks(topology, result.world_size, ranks_per_node)
    traced = set(result.ranks)
    calls: list[CollectiveResult] = [c for s in result.steps for c in s.collectives
                                     if c.simulated and c.measured_transfer_s > 0]
    samples = [_Sample(c.op, tuple(gpus[r] for r in c.group), int(c.size_bytes or 0),
                       c.measured_transfer_s) for c in calls]
    complete = all(set(c.group) <= traced for c in calls)
    return samples, complete


def _kinds_used(topology: Topology, samples: Sequence[_Sample]) -> list[str]:
    kind_of = {(link.src, link.dst): link.kind for link in topology.links()}
    used: set[str] = set()
    for group in {s.gpus for s in samples}:
        for a, b in zip(group, group[1:] + group[:1], strict=True):
            if a != b:
                used.update(kind_of[link] for link in topology.route(a, b).links)
    return [k for k in ("network", "nvlink", "pcie", "cpu") if k in used]


def calibrate_trace(traces: Sequence[RankTrace], topology: Topology, *,
                    base: CommParams | None = None,
                    ranks_per_node: int | None = None) -> TraceCalibration:
    """Fit link efficiencies and a latency scale to the traces' collectives (docstring)."""
    base = base or CommParams()
    check_one_job(traces)
    samples, complete = _samples(traces, topology, ranks_per_node)
    if len(samples) < 2:
        raise ConfigError(f"the traces hold {len(samples)} collective(s) with a known kind "
                          "and size; a fit needs two or more",
                          source=traces[0].source if traces else None,
                          hint="record NCCL metadata (PyTorch >= 2.1) or record_shapes=True")
    samples.sort(key=lambda s: (s.size_bytes, s.op))
    kinds = _kinds_used(topology, samples)

    def predict(values: Mapping[str, float], subset: Sequence[_Sample]) -> list[float]:
        comm = Communicator(Simulation(0), topology, calibrated_params(base, values))
        return [comm.estimate_s(s.op, list(s.gpus), s.size_bytes) for s in subset]

    fit = fit_log_ratios(comm_parameters(base, kinds), predict, samples,
                         [s.measured_s for s in samples])
    return TraceCalibration.from_fit(base, fit, complete_groups=complete)


def measured_compute_s(traces: Sequence[RankTrace]) -> float:
    """Mean compute busy time per step and rank in the traces (seconds)."""
    # A trace without step annotations is summarised over its whole span, which may hold
    # several steps: no per-step compute to fit to.
    rows = [row for row in summarise(traces) if row.step is not None]
    if not rows:
        raise ConfigError("no profiler steps in the traces: nothing to fit compute to")
    return statistics.fmean(row.compute_s for row in rows)


def fit_compute_efficiency(scenario_path: str, measured_s: float, *,
                           overrides: Sequence[str] = (), iterations: int = 30,
                           world_size: int | None = None) -> ComputeFit:
    """Bisect ``compute.matmul_efficiency`` so the scenario's mean per-GPU compute time is
    ``measured_s`` (module docstring); ``world_size``, the traced job's, must be the
    scenario's GPU count (a DLRM trace was fitted to a GPT scenario's compute)."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    gpus = load_scenario(scenario_path,
                         overrides=[parse_assignment(a) for a in overrides]).num_gpus
    if world_size is not None and world_size != gpus:
        raise ConfigError(f"the traces are of a job on {world_size} GPUs, the scenario "
                          f"runs on {gpus}", key="--scenario", source=scenario_path,
                          hint="give the scenario of the traced job")

    def predicted(efficiency: float | None) -> float:
        extra = [] if efficiency is None else [f"compute.matmul_efficiency={efficiency!r}"]
        scenario = load_scenario(scenario_path,
                                 overrides=[parse_assignment(a) for a in (*overrides, *extra)])
        report = run_scenario(scenario, trace=False, allow_oom=True)
        return statistics.fmean(g.compute_s for g in report.per_gpu)

    before = predicted(None)
    low, high = math.log(_MATMUL_BOUNDS[0]), math.log(_MATMUL_BOUNDS[1])
    at_bound = False
    if predicted(math.exp(high)) > measured_s:  # slower than measured even at 100 %
        low = high
        at_bound = True
    elif predicted(math.exp(low)) < measured_s:
        high = low
        at_bound = True
    for _ in range(iterations if not at_bound else 0):
        middle = 0.5 * (low + high)
        if predicted(math.exp(middle)) > measured_s:
            low = middle  # too slow: more efficiency
        else:
            high = middle
        if high - low < 1e-4:
            break
    efficiency = math.exp(0.5 * (low + high))
    return ComputeFit(efficiency, measured_s, before, predicted(efficiency), at_bound)


# --------------------------------------------------------------------------- results


def fitted_sections(network: TraceCalibration,
                    compute: ComputeFit | None = None) -> dict[str, Any]:
    """The fitted values as a scenario's sections: ``communication`` (for ``--comm`` too)
    and, with a compute fit, ``compute``."""
    document: dict[str, Any] = {"communication": network.overrides()}
    if compute is not None:
        document["compute"] = {"matmul_efficiency": round(compute.matmul_efficiency, 4)}
    return document


def fit_to_json(network: TraceCalibration, compute: ComputeFit | None = None, *,
                cluster: str) -> dict[str, Any]:
    """The fit as one JSON object; ``cluster`` says what the traces were replayed on."""
    summary: dict[str, Any] = {
        "cluster": cluster,
        "samples": network.samples, "complete_groups": network.complete_groups,
        "link_efficiency": network.link_efficiency, "latency_scale": network.latency_scale,
        "median_error_before_pct": network.median_error_before_pct,
        "median_error_after_pct": network.median_error_after_pct,
        "cross_validation_error_pct": network.cross_validation_error_pct,
        "overrides": fitted_sections(network, compute),
        "notes": [note.to_dict() for note in network.fit_notes()]}
    if compute is not None:
        summary["compute"] = {
            "matmul_efficiency": compute.matmul_efficiency,
            "measured_compute_s": compute.measured_compute_s,
            "predicted_before_s": compute.predicted_before_s,
            "predicted_after_s": compute.predicted_after_s, "at_bound": compute.at_bound}
    return summary


def format_fit(network: TraceCalibration, compute: ComputeFit | None = None, *,
               base: CommParams, num_traces: int, cluster: str) -> str:
    """The terminal table: each fitted parameter against its default in ``base``, the
    errors before and after, and the compute fit."""
    lines = [f"# {network.samples} collectives from {num_traces} trace(s) on {cluster}",
             f"{'parameter':<28} {'default':>10} {'fitted':>10}"]
    for kind, value in network.link_efficiency.items():
        lines.append(f"{'link_efficiency.' + kind:<28} {base.efficiency_of(kind):>10.3f} "
                     f"{value:>10.3f}")
    lines.append(f"{'latency scale':<28} {1.0:>10.3f} {network.latency_scale:>10.3f}")
    lines.append(f"median |error| of transfers before: {network.median_error_before_pct:.1f} %"
                 f"  after: {network.median_error_after_pct:.1f} %  cross-validated: "
                 f"{network.cross_validation_error_pct:.1f} %")
    lines += [f"note: {note}" for note in network.fit_notes()]
    if not network.complete_groups:
        lines.append("warning: some ranks of the sampled groups have no trace; their kernels "
                     "include waiting for those ranks, so the fitted network reads slow")
    if compute is not None:
        lines.append(f"compute.matmul_efficiency: {compute.matmul_efficiency:.3f} (compute per "
                     f"GPU and step: measured {compute.measured_compute_s * 1e3:.3f} ms, "
                     f"scenario {compute.predicted_before_s * 1e3:.3f} ms before, "
                     f"{compute.predicted_after_s * 1e3:.3f} ms after)"
                     + (" — at its bound" if compute.at_bound else ""))
    return "\n".join(lines) + "\n"
