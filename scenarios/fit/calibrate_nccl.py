"""Calibration: fit a cluster's communication parameters to a measured nccl-tests log.

The defaults in :mod:`collectives.params` come from datasheets and NCCL's tuning tables.
A real cluster differs — RoCE instead of InfiniBand, a slower PCIe path, a TCP-based
transport with ten times the latency.  Given a log measured on it, this fits:

* the achievable fraction of each link kind's rate the log exercises
  (``link_efficiency.network``, ``.nvlink``, ``.pcie``), each bounded to [0.2, 1];
* one factor on every protocol latency (``base_latency`` and ``hop_latency``), bounded
  to [0.1, 20] — the latency tables keep their shape, only their scale moves;

by least squares on the *relative* error of the predicted time (log residuals: a 100 µs
and a 100 ms size count alike), minimised with Nelder–Mead over bounded coordinates.
The fit uses the sizes of at least 1 MiB (``min_bytes``), where bandwidth and the
per-step latencies both matter; below that a few microseconds of software overhead that
no link parameter models would dominate.  Cross-validation fits on every other of those
sizes and tests on the rest, so a user sees how well the fitted parameters predict sizes
they were not fitted to, not only the fit itself.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["Calibration", "apply_calibration", "bounded", "calibrate_nccl", "comm_overrides",
           "nelder_mead", "unbounded"]

JUDGED_MIN_BYTES = 2**20
_EFFICIENCY_BOUNDS = (0.2, 1.0)
_LATENCY_BOUNDS = (0.1, 20.0)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted parameters and how well they predict the log, before and after (in %)."""

    link_efficiency: dict[str, float]
    latency_scale: float
    params: CommParams
    median_error_before_pct: float
    median_error_after_pct: float
    cross_validation_error_pct: float
    evaluations: int

    def overrides(self) -> dict[str, Any]:
        """The fitted values as a scenario's ``communication`` section (and ``--set comm.…``)."""
        return comm_overrides(self.params, self.link_efficiency)


def comm_overrides(params: CommParams, link_efficiency: dict[str, float]) -> dict[str, Any]:
    """Fitted parameters as a ``communication`` section: the fitted efficiencies and the
    (scaled) latency tables, times written with their unit."""
    return {
        "link_efficiency": dict(link_efficiency),
        "base_latency": {a: {k: f"{v * 1e6:.4g} us" for k, v in row.items()}
                         for a, row in params.base_latency_s.items()},
        "hop_latency": {a: {t: {k: f"{v * 1e6:.4g} us" for k, v in row.items()}
                            for t, row in by_t.items()}
                        for a, by_t in params.hop_latency_s.items()},
    }


def apply_calibration(base: CommParams, efficiency: dict[str, float],
                      latency_scale: float) -> CommParams:
    """``base`` with the given link efficiencies and every protocol latency scaled."""
    return replace(
        base,
        link_efficiency={**base.link_efficiency, **efficiency},
        base_latency_s={a: {k: v * latency_scale for k, v in row.items()}
                        for a, row in base.base_latency_s.items()},
        hop_latency_s={a: {t: {k: v * latency_scale for k, v in row.items()}
                           for t, row in by_t.items()}
                       for a, by_t in base.hop_latency_s.items()},
    )


def nelder_mead(function: Callable[[np.ndarray], float], start: np.ndarray, *,
                step: float = 0.3, iterations: int = 200, tolerance: float = 1e-6,
                ) -> tuple[np.ndarray, float, int]:
    """Minimise ``function`` from ``start`` (Nelder & Mead 1965, standard coefficients).

    Returns the best point, its value and the number of evaluations.
    """
    dim = len(start)
    simplex = [np.asarray(start, dtype=float)]
    for i in range(dim):
        point = simplex[0].copy()
        point[i] += step
        simplex.append(point)
    values = [function(p) for p in simplex]
    evaluations = dim + 1
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tolerance * (abs(values[0]) + tolerance):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        value_r = function(reflected)
        evaluations += 1
        if values[0] <= value_r < values[-2]:
            simplex[-1], values[-1] = reflected, value_r
            continue
        if value_r < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            value_e = function(expanded)
            evaluations += 1
            if value_e < value_r:
                simplex[-1], values[-1] = expanded, value_e
            else:
                simplex[-1], values[-1] = reflected, value_r
            continue
        contracted = centroid + 0.5 * (simplex[-1] - centroid)
        value_c = function(contracted)
        evaluations += 1
        if value_c < values[-1]:
            simplex[-1], values[-1] = contracted, value_c
            continue
        for i in range(1, len(simplex)):  # shrink towards the best point
            simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
            values[i] = function(simplex[i])
            evaluations += 1
    best = int(np.argmin(values))
    return simplex[best], values[best], evaluations


def bounded(z: float, low: float, high: float, *, log: bool) -> float:
    """Map an unbounded coordinate into [low, high] smoothly (logistic)."""
    fraction = 1.0 / (1.0 + math.exp(-z))
    if log:
        return math.exp(math.log(low) + fraction * (math.log(high) - math.log(low)))
    return low + fraction * (high - low)


def unbounded(x: float, low: float, high: float, *, log: bool) -> float:
    """The inverse of :func:`bounded` (clamped just inside the bounds)."""
    if log:
        fraction = (math.log(x) - math.log(low)) / (math.log(high) - math.log(low))
    else:
        fraction = (x - low) / (high - low)
    fraction = min(max(fraction, 1e-6), 1 - 1e-6)
    return math.log(fraction / (1 - fraction))


def _errors_pct(rows: Sequence[NcclRow], predicted: Sequence[float]) -> list[float]:
    return [100.0 * (p - r.time_s) / r.time_s for r, p in zip(rows, predicted, strict=True)]


def _median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def calibrate_nccl(log: NcclLog, topology: Topology, *, op: str,
                   base: CommParams | None = None,
                   kinds: Sequence[str] = ("network", "nvlink", "pcie"),
                   min_bytes: float = JUDGED_MIN_BYTES) -> Calibration:
    """Fit ``kinds`` link efficiencies and a latency scale to the sizes of ``log`` of at
    least ``min_bytes`` (see the module docstring)."""
    base = base or CommParams()
    rows = list(log.rows)
    kinds = [k for k in kinds if any(link.kind == k for link in topology.links())]
    dtype = rows[0].dtype if rows else "float"

    def predict(efficiency: dict[str, float], scale: float,
                subset: Sequence[NcclRow]) -> list[float]:
        params = apply_calibration(base, efficiency, scale)
        bench = run_benchmark(topology, op, [r.size_bytes for r in subset], params=params,
                              dtype=dtype)
        return [b.time_s for b in bench]

    def decode(z: np.ndarray) -> tuple[dict[str, float], float]:
        efficiency = {k: bounded(z[i], *_EFFICIENCY_BOUNDS, log=False)
                      for i, k in enumerate(kinds)}
        return efficiency, bounded(z[-1], *_LATENCY_BOUNDS, log=True)

    def fit(subset: Sequence[NcclRow]) -> tuple[dict[str, float], float, int]:
        def loss(z: np.ndarray) -> float:
            efficiency, scale = decode(z)
            predicted = predict(efficiency, scale, subset)
            return sum(math.log(p / r.time_s) ** 2 for r, p in zip(subset, predicted,
                                                                   strict=True))
        start = np.array([unbounded(base.efficiency_of(k), *_EFFICIENCY_BOUNDS, log=False)
                          for k in kinds] + [unbounded(1.0, *_LATENCY_BOUNDS, log=True)])
        best, _, evaluations = nelder_mead(loss, start)
        efficiency, scale = decode(best)
        return efficiency, scale, evaluations

    judged = [r for r in rows if r.size_bytes >= min_bytes]
    if len(judged) < 2:
        raise ConfigError(f"the log has {len(judged)} size(s) of at least "
                          f"{min_bytes:.0f} B; a fit needs two or more",
                          source=log.source, hint="lower --min-bytes")
    before = _errors_pct(judged, predict({}, 1.0, judged))
    efficiency, scale, evaluations = fit(judged)
    after = _errors_pct(judged, predict(efficiency, scale, judged))
    train, test = judged[0::2], judged[1::2]
    cv_eff, cv_scale, cv_evaluations = fit(train)
    cross = _errors_pct(test, predict(cv_eff, cv_scale, test)) if test else []
    return Calibration(efficiency, scale, apply_calibration(base, efficiency, scale),
                       _median_abs(before), _median_abs(after), _median_abs(cross),
                       evaluations + cv_evaluations)
