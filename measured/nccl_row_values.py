"""The numbers of one nccl-tests row: each half's time and bandwidths, in SI units.

:mod:`measured.nccl_log` finds the rows and their grammar; this module reads a row's
measured columns and names the file, line and column of one that is not a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distsim_gpu.simcore.errors import ParseError

__all__ = ["BYTES_PER_S_PER_GB_S", "SECONDS_PER_US", "TIME_COLUMNS", "RowPlace",
           "measured_halves", "wrong_results"]

# nccl-tests prints times in microseconds and bandwidths in GB/s (10^9 bytes per second).
SECONDS_PER_US = 1e-6
BYTES_PER_S_PER_GB_S = 1e9

TIME_COLUMNS = frozenset({"time", "cputime"})


@dataclass(frozen=True, slots=True)
class RowPlace:
    """Where a row is, to build its error messages."""

    source: str
    line: int
    hint: str

    def error(self, what: str) -> ParseError:
        if len(what) > 200:  # (a token of 5,000 digits is named, not printed)
            what = f"{what[:120]}...{what[-60:]}"
        return ParseError(f"malformed nccl-tests row: {what}", source=self.source,
                          line=self.line, hint=self.hint)

    def number(self, token: str, where: str, expected: str, *,
               allow_negative: bool = False) -> float:
        try:
            value = float(token)
        except ValueError:
            raise self.error(f"{where} is {token!r}, expected {expected}") from None
        if not math.isfinite(value) or (value < 0 and not allow_negative):
            raise self.error(f"{where} is {token!r}, expected {expected} (finite, not "
                             "negative)")
        return value


def measured_halves(tokens: list[str], position: int, halves: tuple[tuple[str, ...], ...],
                     place: RowPlace) -> list[tuple[float, float, float]]:
    """Each half's (time s, algbw B/s, busbw B/s), its other columns checked as numbers."""
    measured: list[tuple[float, float, float]] = []
    for half_name, group in zip(("out-of-place", "in-place"), halves, strict=False):
        found: dict[str, float] = {}
        for column in group:
            token = tokens[position]
            position += 1
            where = f"{half_name} {column}"
            if column in TIME_COLUMNS:
                found["time"] = place.number(token, where, "a time in microseconds")
            elif column in ("algbw", "busbw"):
                found[column] = place.number(token, where, "a bandwidth in GB/s")
            elif token.upper() != "N/A":  # #wrong, #bitdiff, per-iteration statistics
                place.number(token, where, "a number or N/A", allow_negative=True)
        measured.append((found["time"] * SECONDS_PER_US,
                         found["algbw"] * BYTES_PER_S_PER_GB_S,
                         found["busbw"] * BYTES_PER_S_PER_GB_S))
    return measured


def wrong_results(tokens: list[str], position: int,
                  halves: tuple[tuple[str, ...], ...]) -> int:
    """The row's ``#wrong`` count over its halves (N/A: 0), as :func:`measured_halves`
    has checked them: nccl-tests' own check of the results, which a comparison of times
    would otherwise pass over in silence."""
    total = 0
    for group in halves:
        for column in group:
            token = tokens[position]
            position += 1
            if column == "#wrong" and token.upper() != "N/A":
                total += max(0, round(float(token)))
    return total
