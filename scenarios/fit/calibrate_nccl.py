"""Calibration: fit a cluster's communication parameters to a measured nccl-tests log.

The defaults in :mod:`collectives.params` come from datasheets and NCCL's tuning tables.
A real cluster differs — RoCE instead of InfiniBand, a slower PCIe path, a TCP-based
transport with ten times the latency.  Given a log measured on it, this fits:

* the achievable fraction of each link kind's rate the log exercises
  (``link_efficiency.network``, ``.nvlink``, ``.pcie``), each bounded to [0.2, 1];
* one factor on every protocol latency (``base_latency`` and ``hop_latency``), bounded
  to [0.1, 20] — the latency tables keep their shape, only their scale moves;

by least squares on the *relative* error of the predicted time (log residuals: a 100 µs
and a 100 ms size count alike), minimised with Nelder–Mead over bounded coordinates
(:mod:`scenarios.fit.fitting`, shared with ``calibrate trace``).
The fit uses the sizes of at least 1 MiB (``min_bytes``), where bandwidth and the
per-step latencies both matter; below that a few microseconds of software overhead that
no link parameter models would dominate.  Cross-validation fits on every other of those
sizes and tests on the rest, so a user sees how well the fitted parameters predict sizes
they were not fitted to, not only the fit itself.

Every size of the log is then judged before and after, per size band (:data:`SIZE_BANDS`):
a band the fit made worse — the small, latency-bound sizes, when the latency scale that
suits the large ones does not suit them — is said in a run note naming the band and both
errors, since the fitted parameters cannot explain it (a per-call software overhead would).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow
from distsim_gpu.scenarios.fit.fitting import FitResult, Parameter, fit_log_ratios
from distsim_gpu.scenarios.fit.nccl_log_setting import empty_rows_note, wrong_rows_note
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.units import format_bytes
from distsim_gpu.topology import Topology

__all__ = ["SIZE_BANDS", "Calibration", "NcclCalibration", "SizeBand", "apply_calibration",
           "calibrate_nccl", "calibrated_params", "comm_overrides", "comm_parameters",
           "size_bands"]

JUDGED_MIN_BYTES = 2**20
#: The band edges of the before/after table (bytes).  Reporting edges, not model figures:
#: the small, latency-bound sizes below 64 KiB apart from the mid sizes, and from
#: ``JUDGED_MIN_BYTES`` (or ``--min-bytes``) the sizes the fit used.
SIZE_BANDS = (0.0, 64 * 2.0**10, float(JUDGED_MIN_BYTES))
_EFFICIENCY_BOUNDS = (0.2, 1.0)
_LATENCY_BOUNDS = (0.1, 20.0)
_EFFICIENCY = "link_efficiency."
_LATENCY_SCALE = "latency_scale"


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted communication parameters and how well they predict the measurements (the
    fit's errors in %, before, after and cross-validated)."""

    link_efficiency: dict[str, float]
    latency_scale: float
    params: CommParams
    fit: FitResult

    @property
    def samples(self) -> int:
        return self.fit.samples

    @property
    def median_error_before_pct(self) -> float:
        return self.fit.median_error_before_pct

    @property
    def median_error_after_pct(self) -> float:
        return self.fit.median_error_after_pct

    @property
    def cross_validation_error_pct(self) -> float:
        return self.fit.cross_validation_error_pct

    @property
    def evaluations(self) -> int:
        return self.fit.evaluations

    @classmethod
    def from_fit(cls, base: CommParams, fit: FitResult, **extra: Any) -> Self:
        """The calibration a fit of :func:`comm_parameters` found, applied to ``base``;
        ``extra``: a subclass's own fields."""
        efficiency, scale = _split(fit.values)
        return cls(efficiency, scale, apply_calibration(base, efficiency, scale), fit, **extra)

    def overrides(self) -> dict[str, Any]:
        """The fitted values as a scenario's ``communication`` section (and ``--set comm.…``)."""
        return comm_overrides(self.params, self.link_efficiency)

    def fit_notes(self) -> tuple[RunNote, ...]:
        """What to distrust in the fit: a parameter the search left at a bound of its
        range (the measurements asked for more than the model has: a slower or faster
        link, a cost no parameter holds), and a fit that made its own samples worse by the
        median (it minimises squared log ratios, not the median)."""
        fitted = [(f"link_efficiency.{kind}", value, _EFFICIENCY_BOUNDS)
                  for kind, value in self.link_efficiency.items()]
        fitted.append(("latency scale", self.latency_scale, _LATENCY_BOUNDS))
        notes = [RunNote("fit", f"{name} {value:.3f} is at its bound ({low:g} to {high:g}): "
                         "the measurements ask for more than the model holds; check the "
                         "cluster or the sizes before using it")
                 for name, value, (low, high) in fitted
                 if min(abs(value - low), abs(value - high)) <= 1e-3 * (high - low)]
        if self.median_error_after_pct > self.median_error_before_pct + 0.05:
            notes.append(RunNote("fit", "the fit leaves its own samples worse by the median "
                                 f"({self.median_error_before_pct:.1f} % before, "
                                 f"{self.median_error_after_pct:.1f} % after): the defaults "
                                 "suit them better"))
        return tuple(notes)


@dataclass(frozen=True, slots=True)
class SizeBand:
    """The log's sizes in ``[low_bytes, high_bytes)``: how many, and their median |error|
    (%) with the parameters before and after the fit."""

    low_bytes: float
    high_bytes: float
    sizes: int
    median_error_before_pct: float
    median_error_after_pct: float

    @property
    def label(self) -> str:
        if self.high_bytes == float("inf"):
            return f">= {format_bytes(self.low_bytes)}"
        if self.low_bytes <= 0:
            return f"< {format_bytes(self.high_bytes)}"
        return f"{format_bytes(self.low_bytes)} - {format_bytes(self.high_bytes)}"

    def to_dict(self) -> dict[str, Any]:
        return {"band": self.label, "sizes": self.sizes,
                "median_error_before_pct": self.median_error_before_pct,
                "median_error_after_pct": self.median_error_after_pct}


@dataclass(frozen=True, slots=True)
class NcclCalibration(Calibration):
    """A calibration to an nccl-tests log, with every size judged per band and a note for
    each band the fit made worse."""

    bands: tuple[SizeBand, ...] = ()
    notes: tuple[RunNote, ...] = ()


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


def comm_parameters(base: CommParams, kinds: Sequence[str]) -> list[Parameter]:
    """What a communication calibration fits: the efficiency of each link kind in
    ``kinds``, bounded to [0.2, 1] and started at ``base``'s, then one factor on every
    protocol latency, bounded to [0.1, 20] on a log scale and started at 1."""
    return [*(Parameter(_EFFICIENCY + kind, *_EFFICIENCY_BOUNDS, start=base.efficiency_of(kind))
              for kind in kinds),
            Parameter(_LATENCY_SCALE, *_LATENCY_BOUNDS, start=1.0, log=True)]


def _split(values: Mapping[str, float]) -> tuple[dict[str, float], float]:
    """Fitted values by name -> (link efficiency by kind, latency scale); none fitted ->
    ({}, 1.0), ``base`` as it is."""
    efficiency = {name[len(_EFFICIENCY):]: value for name, value in values.items()
                  if name.startswith(_EFFICIENCY)}
    return efficiency, values.get(_LATENCY_SCALE, 1.0)


def calibrated_params(base: CommParams, values: Mapping[str, float]) -> CommParams:
    """``base`` with the values of :func:`comm_parameters` (by name) applied."""
    return apply_calibration(base, *_split(values))


def calibrate_nccl(log: NcclLog, topology: Topology, *, op: str,
                   base: CommParams | None = None,
                   kinds: Sequence[str] = ("network", "nvlink", "pcie"),
                   min_bytes: float = JUDGED_MIN_BYTES) -> NcclCalibration:
    """Fit ``kinds`` link efficiencies and a latency scale to the sizes of ``log`` of at
    least ``min_bytes`` (see the module docstring)."""
    base = base or CommParams()
    rows = [r for r in log.rows if r.size_bytes > 0]  # a 0-byte row times no transfer
    kinds = [k for k in kinds if any(link.kind == k for link in topology.links())]
    dtype = rows[0].dtype if rows else "float"

    def predict(values: Mapping[str, float], subset: Sequence[NcclRow]) -> list[float]:
        bench = run_benchmark(topology, op, [r.size_bytes for r in subset],
                              params=calibrated_params(base, values), dtype=dtype)
        return [b.time_s for b in bench]

    judged = [r for r in rows if r.size_bytes >= min_bytes]
    if len(judged) < 2:
        raise ConfigError(f"the log has {len(judged)} size(s) of at least "
                          f"{min_bytes:.0f} B; a fit needs two or more",
                          source=log.source, hint="lower --min-bytes")
    fit = fit_log_ratios(comm_parameters(base, kinds), predict, judged,
                         [r.time_s for r in judged])
    edges = sorted({*(e for e in SIZE_BANDS if e < min_bytes), float(min_bytes)})
    bands = size_bands(rows, predict({}, rows), predict(fit.values, rows), edges)
    # The bands below the fitted sizes (fit_notes judges the fitted ones).
    notes = tuple(RunNote(
        "fit", f"sizes {band.label}: median |error| {band.median_error_before_pct:.1f} % "
        f"before the fit, {band.median_error_after_pct:.1f} % after; the fitted link "
        f"efficiencies and latency scale suit the sizes >= {format_bytes(min_bytes)} but "
        "do not explain these (a per-call software overhead no parameter models would)",
        "--min-bytes") for band in bands if band.high_bytes <= min_bytes
        and band.median_error_after_pct > band.median_error_before_pct + 0.05)
    notes += empty_rows_note(log.rows) + wrong_rows_note(log.rows)
    result = NcclCalibration.from_fit(base, fit, bands=bands)
    return replace(result, notes=notes + result.fit_notes())


def size_bands(rows: Sequence[NcclRow], before_s: Sequence[float], after_s: Sequence[float],
               edges: Sequence[float]) -> tuple[SizeBand, ...]:
    """The rows' median |error| before and after, per band between ``edges`` (the last
    band open above); bands without a size are left out."""
    bounds = [*edges, float("inf")]
    bands = []
    for low, high in itertools.pairwise(bounds):
        chosen = [i for i, r in enumerate(rows) if low <= r.size_bytes < high]
        if not chosen:
            continue
        bands.append(SizeBand(low, high, len(chosen),
                              _median_error([before_s[i] for i in chosen],
                                            [rows[i].time_s for i in chosen]),
                              _median_error([after_s[i] for i in chosen],
                                            [rows[i].time_s for i in chosen])))
    return tuple(bands)


def _median_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return statistics.median(abs(p - m) / m * 100 for p, m in zip(predicted, measured))
