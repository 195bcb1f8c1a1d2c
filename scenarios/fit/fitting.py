"""Fitting a model's parameters to measured times: the loop both calibrations share.

A calibration moves a few parameters of the model, each inside its bounds, until the
predicted times of a set of samples match the measured ones.  The objective is the sum of
squared *log* ratios of predicted to measured time, so a 100 µs sample and a 100 ms one
count alike (a relative error), and it is minimised with Nelder–Mead (no gradients: a
prediction is a simulation).  Each parameter is searched on an unbounded coordinate
mapped smoothly into its bounds (a logistic, on a log scale for a factor spanning
decades), so the simplex never steps outside them.

The quality of a fit is reported three ways, as median absolute errors in percent: the
model before fitting, after, and cross-validated — fitted on every other sample (in the
order given, which callers sort by size) and tested on the rest, so a user sees how well
the parameters predict samples they were not fitted to.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

__all__ = [
    "FitResult",
    "Parameter",
    "bounded",
    "cross_validation_split",
    "error_pct",
    "fit_log_ratios",
    "k_folds",
    "log_ratio_loss",
    "median_abs_error_pct",
    "minimise",
    "nelder_mead",
    "unbounded",
]

S = TypeVar("S")
# predict(values, samples): the model's times (s) for ``samples`` with the parameters set
# to ``values`` (by name); an empty ``values`` means the model as given, nothing fitted.
Predict = Callable[[Mapping[str, float], Sequence[S]], Sequence[float]]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One fitted parameter: its name, its bounds [low, high], where the search starts,
    and whether it moves on a log scale (a factor spanning decades)."""

    name: str
    low: float
    high: float
    start: float
    log: bool = False

    def value(self, coordinate: float) -> float:
        """The parameter's value at an unbounded search coordinate."""
        return bounded(coordinate, self.low, self.high, log=self.log)

    def coordinate(self, value: float) -> float:
        """The search coordinate of a value (the inverse of :meth:`value`)."""
        return unbounded(value, self.low, self.high, log=self.log)


@dataclass(frozen=True, slots=True)
class FitResult:
    """Fitted values by parameter name, and the median absolute error (%) of the model on
    the samples before and after the fit and cross-validated (NaN without a test half)."""

    values: dict[str, float]
    samples: int
    median_error_before_pct: float
    median_error_after_pct: float
    cross_validation_error_pct: float
    evaluations: int  # objective evaluations, both fits together


def bounded(z: float, low: float, high: float, *, log: bool) -> float:
    """Map an unbounded coordinate into [low, high] smoothly (logistic)."""
    fraction = 1.0 / (1.0 + math.exp(-z))
    if log:
        value = math.exp(math.log(low) + fraction * (math.log(high) - math.log(low)))
        # exp(log(high)) may round one ulp past ``high``: a bound is a promise.
        return min(max(value, low), high)
    return low + fraction * (high - low)


def unbounded(x: float, low: float, high: float, *, log: bool) -> float:
    """The inverse of :func:`bounded` (clamped just inside the bounds)."""
    if log:
        fraction = (math.log(x) - math.log(low)) / (math.log(high) - math.log(low))
    else:
        fraction = (x - low) / (high - low)
    fraction = min(max(fraction, 1e-6), 1 - 1e-6)
    return math.log(fraction / (1 - fraction))


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


def log_ratio_loss(predicted_s: Sequence[float], measured_s: Sequence[float]) -> float:
    """Sum of squared log ratios of predicted to measured time."""
    return sum(math.log(p / m) ** 2 for p, m in zip(predicted_s, measured_s, strict=True))


def error_pct(predicted_s: float, measured_s: float) -> float:
    """Signed error of a prediction in percent of the measured time; NaN when nothing
    (≤ 0) was measured."""
    return 100.0 * (predicted_s - measured_s) / measured_s if measured_s > 0 else float("nan")


def median_abs_error_pct(predicted_s: Sequence[float], measured_s: Sequence[float]) -> float:
    """Median of ``|predicted - measured| / measured`` in percent; NaN for no samples."""
    errors = [abs(error_pct(p, m)) for p, m in zip(predicted_s, measured_s, strict=True)]
    return statistics.median(errors) if errors else float("nan")


def cross_validation_split(samples: Sequence[S]) -> tuple[Sequence[S], Sequence[S]]:
    """(train, test): the samples at even positions and those at odd positions."""
    return samples[0::2], samples[1::2]


def k_folds(samples: Sequence[S], k: int) -> list[tuple[list[S], list[S]]]:
    """``k`` (train, test) splits for k-fold cross-validation: sample ``i`` (in the order
    given) is tested in fold ``i mod k`` and trains every other fold's fit."""
    if not 1 <= k <= max(len(samples), 1):
        raise ValueError(f"k = {k} folds for {len(samples)} samples")
    folds = []
    for fold in range(k):
        test = [s for i, s in enumerate(samples) if i % k == fold]
        train = [s for i, s in enumerate(samples) if i % k != fold]
        folds.append((train, test))
    return folds


def minimise(parameters: Sequence[Parameter], predict: Predict[S], samples: Sequence[S],
             measured_s: Sequence[float]) -> tuple[dict[str, float], int]:
    """The parameter values (by name) minimising :func:`log_ratio_loss` of ``predict`` on
    ``samples``, searched from each parameter's start; and the objective evaluations."""

    def values_at(z: np.ndarray) -> dict[str, float]:
        return {p.name: p.value(z[i]) for i, p in enumerate(parameters)}

    def loss(z: np.ndarray) -> float:
        return log_ratio_loss(predict(values_at(z), samples), measured_s)

    start = np.array([p.coordinate(p.start) for p in parameters])
    best, _, evaluations = nelder_mead(loss, start)
    return values_at(best), evaluations


def fit_log_ratios(parameters: Sequence[Parameter], predict: Predict[S],
                   samples: Sequence[S], measured_s: Sequence[float]) -> FitResult:
    """Fit ``parameters`` to ``samples`` (with their measured times), and cross-validate.

    ``predict(values, subset)`` gives the model's times for ``subset``; it is called with
    an empty ``values`` for the error before the fit.
    """
    before = median_abs_error_pct(predict({}, samples), measured_s)
    values, evaluations = minimise(parameters, predict, samples, measured_s)
    after = median_abs_error_pct(predict(values, samples), measured_s)
    train, test = cross_validation_split(samples)
    train_s, test_s = cross_validation_split(measured_s)
    cv_values, cv_evaluations = minimise(parameters, predict, train, train_s)
    cross = median_abs_error_pct(predict(cv_values, test), test_s) if test else float("nan")
    return FitResult(values, len(samples), before, after, cross, evaluations + cv_evaluations)
