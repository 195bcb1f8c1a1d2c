"""The shared fit loop: bounded coordinates, the log-ratio objective, the minimiser and the
cross-validation, on synthetic problems whose answers are known in closed form."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from distsim_gpu.scenarios.fit.fitting import (
    Parameter,
    bounded,
    cross_validation_split,
    fit_log_ratios,
    log_ratio_loss,
    median_abs_error_pct,
    minimise,
    nelder_mead,
    unbounded,
)

# --------------------------------------------------------------------------- pieces


@pytest.mark.parametrize("log", [False, True])
def test_bounded_stays_inside_and_inverts(log: bool) -> None:
    low, high = 0.1, 20.0
    for z in (-50.0, -3.0, 0.0, 0.7, 3.0, 50.0):
        assert low <= bounded(z, low, high, log=log) <= high
    for x in (0.2, 1.0, 7.5, 19.0):
        assert bounded(unbounded(x, low, high, log=log), low, high, log=log) == (
            pytest.approx(x, rel=1e-12))


def test_bounded_midpoints() -> None:
    assert bounded(0.0, 0.2, 1.0, log=False) == pytest.approx(0.6)
    assert bounded(0.0, 0.1, 10.0, log=True) == pytest.approx(1.0)  # the geometric mean


def test_unbounded_clamps_values_outside_the_bounds() -> None:
    inside = unbounded(1.0 - 1e-9, 0.2, 1.0, log=False)
    assert unbounded(5.0, 0.2, 1.0, log=False) == inside == pytest.approx(math.log(1e6 - 1))
    assert unbounded(0.0, 0.2, 1.0, log=False) == pytest.approx(-inside, rel=1e-9)


def test_parameter_maps_coordinates_both_ways() -> None:
    scale = Parameter("latency_scale", 0.1, 20.0, start=1.0, log=True)
    assert scale.value(scale.coordinate(1.0)) == pytest.approx(1.0, rel=1e-12)
    assert scale.value(0.0) == pytest.approx(math.sqrt(2.0))


def test_log_ratio_loss_by_hand() -> None:
    assert log_ratio_loss([2.0, 1.0, 0.5], [1.0, 1.0, 1.0]) == pytest.approx(
        2 * math.log(2.0) ** 2)
    assert log_ratio_loss([3.0], [3.0]) == 0.0
    with pytest.raises(ValueError):
        log_ratio_loss([1.0], [1.0, 2.0])


def test_median_abs_error_by_hand() -> None:
    assert median_abs_error_pct([1.1, 0.8, 1.0], [1.0, 1.0, 1.0]) == pytest.approx(10.0)
    assert median_abs_error_pct([2.0, 3.0], [1.0, 4.0]) == pytest.approx((100.0 + 25.0) / 2)
    assert math.isnan(median_abs_error_pct([], []))


def test_cross_validation_split_alternates() -> None:
    assert cross_validation_split(list("abcde")) == (list("ace"), list("bd"))
    assert cross_validation_split([1]) == ([1], [])


def test_nelder_mead_finds_a_quadratic_minimum() -> None:
    target = np.array([1.5, -2.0, 0.25])
    best, value, evaluations = nelder_mead(lambda z: float(np.sum((z - target) ** 2)),
                                           np.zeros(3), iterations=500, tolerance=1e-14)
    assert best == pytest.approx(target, abs=1e-4)
    assert value < 1e-8 and evaluations > 4


# --------------------------------------------------------------------------- fits

SIZES = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def linear(values: Mapping[str, float], sizes: Sequence[float]) -> list[float]:
    """time = rate_factor · size + latency; 1 and 0.5 when not fitted."""
    factor, latency = values.get("factor", 1.0), values.get("latency", 0.5)
    return [factor * size + latency for size in sizes]


PARAMETERS = [Parameter("factor", 0.5, 10.0, start=1.0, log=True),
              Parameter("latency", 0.01, 5.0, start=0.5)]


def test_fit_recovers_an_optimum_inside_the_bounds() -> None:
    measured = [3.0 * size + 0.25 for size in SIZES]
    result = fit_log_ratios(PARAMETERS, linear, SIZES, measured)
    assert result.values["factor"] == pytest.approx(3.0, rel=1e-3)
    assert result.values["latency"] == pytest.approx(0.25, rel=1e-2)
    assert result.median_error_after_pct < 0.05
    # Before: (s + 0.5) / (3 s + 0.25) - 1 at the middle sizes 4 and 8.
    expected = [100 * (1 - (s + 0.5) / (3 * s + 0.25)) for s in (4.0, 8.0)]
    assert result.median_error_before_pct == pytest.approx(sum(expected) / 2)
    assert result.cross_validation_error_pct < 0.1
    assert result.samples == len(SIZES) and result.evaluations > 2 * (len(PARAMETERS) + 1)


def test_fit_stops_at_a_bound_it_cannot_cross() -> None:
    """The data want factor 20, the bound is 10: the fit sits at the bound, and the
    latency goes as high as it can to make up for it."""
    measured = [20.0 * size for size in SIZES]
    result = fit_log_ratios(PARAMETERS, linear, SIZES, measured)
    assert result.values["factor"] <= 10.0
    assert result.values["factor"] == pytest.approx(10.0, rel=1e-2)
    assert result.median_error_after_pct > 20.0  # the model cannot reach the data


def test_cross_validation_by_hand() -> None:
    """One constant ``t`` fitted to times 1, 4, 1, 4, 1.  Log least squares gives the
    geometric mean: all five -> 16^(1/5); the train half (1, 1, 1) -> 1, which misses
    the test half (4, 4) by 75 %."""
    def constant(values: Mapping[str, float], samples: Sequence[int]) -> list[float]:
        return [values.get("t", 2.0)] * len(samples)

    measured = [1.0, 4.0, 1.0, 4.0, 1.0]
    t = Parameter("t", 0.01, 100.0, start=2.0, log=True)
    result = fit_log_ratios([t], constant, list(range(5)), measured)
    fitted = 16.0 ** 0.2
    assert result.values["t"] == pytest.approx(fitted, rel=1e-3)
    assert result.median_error_before_pct == pytest.approx(100.0)  # 2 against 1, 4, 1, 4, 1
    assert result.median_error_after_pct == pytest.approx(100 * (fitted - 1), rel=1e-3)
    assert result.cross_validation_error_pct == pytest.approx(75.0, abs=0.05)


def test_minimise_starts_from_each_parameters_start() -> None:
    calls: list[dict[str, float]] = []

    def spy(values: Mapping[str, float], samples: Sequence[float]) -> list[float]:
        calls.append(dict(values))
        return linear(values, samples)

    minimise(PARAMETERS, spy, SIZES, linear({}, SIZES))
    assert calls[0] == pytest.approx({"factor": 1.0, "latency": 0.5}, rel=1e-5)


def test_one_sample_has_no_cross_validation() -> None:
    result = fit_log_ratios(PARAMETERS[:1], linear, [4.0], [8.5])
    assert result.values["factor"] == pytest.approx(2.0, rel=1e-3)
    assert math.isnan(result.cross_validation_error_pct)
