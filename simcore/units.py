"""Units at the edges: strings such as ``"450 GB/s"`` become SI floats, once, here.

Inside distsim every quantity is a plain float in SI units (seconds, bytes, bytes per
second, FLOP, FLOP/s).  Users write units where they type numbers — YAML, ``--set``, the
command line — and this module is the one place that reads them.  Plain numbers are taken
as already SI, except for a bandwidth and a latency: ``400`` there is far more often 400 Gb/s
or 400 GB/s meant than 400 bytes per second, so a whole number or a number
written as text (YAML reads ``4e11`` as text) is refused with the units that would do; and a
link's ``7`` is 7 us rather than 7 s, so a latency refuses a whole number (other than 0).
A float is taken as SI (bytes per second, seconds): it is what code and presets pass, and
what no one types by accident.

Conventions (as vendors and nccl-tests use them):

* sizes: ``B``, decimal ``kB/KB MB GB TB`` (10³ steps), binary ``KiB MiB GiB TiB``
  (2¹⁰ steps); nccl-tests' bare suffixes ``K M G`` are binary (``-b 8 -e 1G``);
* bandwidth: ``B/s`` family as sizes per second (``GB/s`` = 10⁹ B/s), bit rates
  ``bps kbps Mbps Gbps Tbps`` and ``Gb/s`` (10⁹ bit/s = 1.25·10⁸ B/s);
* time: ``s ms us µs ns`` (and ``min``, ``h``);
* compute: ``FLOP/s`` with ``k M G T P`` prefixes (``"312 TFLOP/s"``);
* counts (of parameters, elements): decimal ``k K M G T`` (``"40M"`` is 4·10⁷, as
  Megatron's and DeepSpeed's sizes in elements are written), and whole.
"""

from __future__ import annotations

import math
import re
from typing import Any

from distsim_gpu.simcore.errors import ParseError

__all__ = [
    "bandwidth_text",
    "bandwidths_with_units",
    "format_bandwidth",
    "format_bytes",
    "format_duration",
    "parse_bandwidth",
    "parse_count",
    "parse_duration",
    "parse_flops",
    "parse_latency",
    "parse_size",
]

# ASCII digits only: Python's ``\d`` and ``float`` also take full-width and other scripts'
# digits ("２００ Gbps"), which no one types on purpose; the exponent has at most four digits.
_NUMBER = r"([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?)"
_QUANTITY = re.compile(rf"^[ \t]*{_NUMBER}[ \t]*([A-Za-zµμ/]*)[ \t]*$")
_MAX_DIGITS = 400  # more digits than any quantity needs; float() of them is slow or inf

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_SIZE_UNITS: dict[str, float] = {"": 1.0, "B": 1.0}
for _p, _f in _DECIMAL.items():
    if _p:
        _SIZE_UNITS[f"{_p}B"] = _f
for _p, _f in _BINARY.items():
    _SIZE_UNITS[f"{_p}B"] = _f
# nccl-tests (and dd) write bare K/M/G/T meaning powers of two.
_SIZE_UNITS.update({"K": 2.0**10, "k": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40,
                    "P": 2.0**50})

_BANDWIDTH_UNITS: dict[str, float] = {}
for _name, _f in _SIZE_UNITS.items():
    if _name.endswith("B"):
        _BANDWIDTH_UNITS[f"{_name}/s"] = _f
        _BANDWIDTH_UNITS[f"{_name}ps"] = _f
for _p, _f in _DECIMAL.items():
    _BANDWIDTH_UNITS[f"{_p}bps"] = _f / 8.0
    _BANDWIDTH_UNITS[f"{_p}b/s"] = _f / 8.0
    _BANDWIDTH_UNITS[f"{_p}bit/s"] = _f / 8.0

# Rates no link or memory has, at either end: a prefix typed wrong (1e-30 Gb/s, 1e30 Gb/s),
# which would otherwise run as days or as nothing.  A what-if's "free" link is 1 PB/s.
_BANDWIDTH_RANGE = (1.0, 1e18)

_TIME_UNITS = {
    "": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6,
    "ns": 1e-9, "min": 60.0, "h": 3600.0,
}

# What a unit-less figure looks like in SI, for the hint of a refused bare number (the
# examples' own figures: 400 Gb/s = 50 GB/s = 5e10 B/s).
_SI_EXAMPLE = {"bandwidth": "'5e10 B/s'", "latency": "'2e-6 s'"}

# A count's suffixes are decimal (``40M`` parameters is 4e7, never 2^20-based).
_COUNT_UNITS = {p: f for p, f in _DECIMAL.items() if p != "P"}

_POWER_UNITS = {"": 1.0, "W": 1.0, "kW": 1e3, "mW": 1e-3}

_FLOPS_UNITS: dict[str, float] = {}
for _p, _f in _DECIMAL.items():
    _FLOPS_UNITS[f"{_p}FLOP/s"] = _f
    _FLOPS_UNITS[f"{_p}FLOPS"] = _f
    _FLOPS_UNITS[f"{_p}flop/s"] = _f
_FLOPS_UNITS[""] = 1.0


def _parse(
    value: object,
    table: dict[str, float],
    what: str,
    example: str,
    *,
    key: str | None,
    source: str | None,
    allow_zero: bool,
    bare: str = "taken",
) -> float:
    """``value`` in SI by ``table``'s units.  ``bare`` says what a number without a unit
    is: ``taken`` as SI, ``refused`` (a whole number or a number as text), or ``whole
    refused`` (a whole number or whole-number text other than 0; a float is SI)."""
    if isinstance(value, bool):
        raise ParseError(f"expected a {what}, got {value!r}", key=key, source=source,
                         hint=f"e.g. {example}")
    whole_only = bare == "whole refused"  # (a latency's bare 0 is 0 in any unit)
    if bare != "taken" and _is_bare_number(value, whole_only=whole_only) \
            and not (whole_only and _is_zero(value)):
        raise ParseError(f"a {what} needs a unit, got the bare number {_short(value)}",
                         key=key, source=source,
                         hint=f"e.g. {example} (a figure already in SI: {_SI_EXAMPLE[what]})")
    if isinstance(value, (int, float)):
        number, factor = _float(value), 1.0
    elif isinstance(value, str):
        match = _QUANTITY.match(value) if len(value) <= _MAX_DIGITS else None
        if not match or match.group(2) not in table:
            raise ParseError(f"cannot read {_short(value)} as a {what}", key=key,
                             source=source, hint=_unit_hint(match, table, example))
        number, factor = float(match.group(1)), table[match.group(2)]
    else:
        raise ParseError(f"expected a {what}, got {type(value).__name__} {_short(value)}",
                         key=key, source=source, hint=f"e.g. {example}")
    result = number * factor
    if not math.isfinite(result):
        raise ParseError(f"{what} {_short(value)} is not finite", key=key, source=source,
                         hint=f"e.g. {example}")
    if result < 0 or (result == 0 and not allow_zero):
        bound = "zero or positive" if allow_zero else "positive"
        raise ParseError(f"{what} must be {bound}, got {_short(value)}", key=key, source=source,
                         hint=f"e.g. {example}")
    return result


def _unit_hint(match: re.Match[str] | None, table: dict[str, float], example: str) -> str:
    """What to write instead; a unit known in another case is named (units are
    case-sensitive: ``Gbps`` is bits, ``GBps`` bytes, so ``gbps`` is not guessed)."""
    units = sorted(u for u in table if u)
    hint = f"write a number and a unit, e.g. {example}; units: {', '.join(units)}"
    if match is None or not match.group(2):
        return hint
    same = [u for u in units if u.lower() == match.group(2).lower()]
    if not same:
        return hint
    meant = " or ".join(_short(f"{match.group(1)} {u}") for u in same)
    bits = "; b is bits, B bytes" if any("b" in u for u in same) else ""
    return f"did you mean {meant}? Units are case-sensitive{bits}. {hint[0].upper()}{hint[1:]}"


def _is_bare_number(value: object, *, whole_only: bool = False) -> bool:
    """A whole number, or a string that is a number with no unit (``whole_only``: a
    whole number, written without a dot or an exponent)."""
    if isinstance(value, int):
        return True
    if not isinstance(value, str) or len(value) > _MAX_DIGITS:
        return False
    match = _QUANTITY.match(value)
    if match is None or match.group(2):
        return False
    return not whole_only or re.fullmatch(r"[-+]?[0-9]+", match.group(1)) is not None


def _is_zero(value: object) -> bool:
    """0 in any unit is 0: a bare zero needs none."""
    if isinstance(value, str):
        match = _QUANTITY.match(value) if len(value) <= _MAX_DIGITS else None
        return match is not None and float(match.group(1)) == 0
    return isinstance(value, (int, float)) and value == 0


def bandwidths_with_units(data: Any) -> Any:
    """``data`` (JSON-like) with every number under a key ending in ``bandwidth`` written
    with its unit (:func:`bandwidth_text`), so a resolved configuration reads back."""
    if isinstance(data, dict):
        return {key: (bandwidth_text(value) if isinstance(key, str)
                      and key.endswith("bandwidth") and isinstance(value, (int, float))
                      and not isinstance(value, bool) else bandwidths_with_units(value))
                for key, value in data.items()}
    if isinstance(data, list):
        return [bandwidths_with_units(item) for item in data]
    return data


def _float(value: int | float) -> float:
    """A number as a float; a whole number too large for one is infinite (and refused)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _short(value: object) -> str:
    """``repr(value)``, cut in the middle past 60 characters: messages name, not print."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...{text[-12:]} ({len(text)} chars)"


def parse_size(value: object, *, key: str | None = None, source: str | None = None,
               allow_zero: bool = True) -> float:
    """Bytes from ``"8 GiB"``, ``"1G"`` (nccl-tests, binary), ``"64 MB"`` or a number."""
    return _parse(value, _SIZE_UNITS, "size", '"8 GiB" or "1G"', key=key, source=source,
                  allow_zero=allow_zero)


def parse_bandwidth(value: object, *, key: str | None = None, source: str | None = None,
                    allow_zero: bool = False) -> float:
    """Bytes per second from ``"450 GB/s"``, ``"400 Gbps"``, ``"25 GiB/s"`` or a float (SI);
    a whole number or a number as text is a :class:`ParseError` (see the module
    docstring): ``"4e11 B/s"`` is SI."""
    rate = _parse(value, _BANDWIDTH_UNITS, "bandwidth", "400Gb/s or 50GB/s", key=key,
                  source=source, allow_zero=allow_zero, bare="refused")
    if rate and not _BANDWIDTH_RANGE[0] <= rate <= _BANDWIDTH_RANGE[1]:
        raise ParseError(f"bandwidth {_short(value)} is {rate:.3g} B/s, outside any link's "
                         "or memory's rate", key=key, source=source,
                         hint="write one between 1 B/s and 1 EB/s, e.g. 400Gb/s or 50GB/s "
                              "(is the unit's prefix right?)")
    return rate


def parse_duration(value: object, *, key: str | None = None, source: str | None = None,
                   allow_zero: bool = True) -> float:
    """Seconds from ``"2 us"``, ``"1.5 ms"``, ``"3 s"`` or a number."""
    return _parse(value, _TIME_UNITS, "duration", '"2 us" or "1.5 ms"', key=key,
                  source=source, allow_zero=allow_zero)


def parse_latency(value: object, *, key: str | None = None, source: str | None = None,
                  ) -> float:
    """Seconds from ``"2 us"`` or a float (SI, ``1e-6`` too), as :func:`parse_duration`,
    but a whole number other than 0 is refused: a link's or a protocol's ``7`` is 7 us
    meant far more often than 7 seconds."""
    return _parse(value, _TIME_UNITS, "latency", '"2 us" or "0.5 us"', key=key,
                  source=source, allow_zero=True, bare="whole refused")


def parse_flops(value: object, *, key: str | None = None, source: str | None = None,
                allow_zero: bool = False) -> float:
    """FLOP per second from ``"312 TFLOP/s"`` or a number."""
    return _parse(value, _FLOPS_UNITS, "compute rate", '"312 TFLOP/s"', key=key,
                  source=source, allow_zero=allow_zero)


def parse_count(value: object, *, key: str | None = None, source: str | None = None,
                allow_zero: bool = False) -> int:
    """A whole count (of parameters, elements) from ``40000000``, ``4e7``, ``"40M"`` or
    ``"1.5M"``: decimal suffixes; a fraction of one (``1.5``) is refused, not truncated."""
    count = _parse(value, _COUNT_UNITS, "count", '40000000, "40M" or "1.5M"', key=key,
                   source=source, allow_zero=allow_zero)
    if count != math.floor(count):
        raise ParseError(f"a count must be whole, got {_short(value)}", key=key, source=source,
                         hint='e.g. 40000000, "40M" or "1.5M" (decimal suffixes)')
    return int(count)


def parse_power(value: object, *, key: str | None = None, source: str | None = None,
                allow_zero: bool = False) -> float:
    """Watts from ``"500 W"``, ``"1 kW"`` or a number."""
    return _parse(value, _POWER_UNITS, "power", '"500 W"', key=key, source=source,
                  allow_zero=allow_zero)


def format_bytes(size_bytes: float) -> str:
    """``1073741824`` -> ``"1 GiB"``; binary prefixes, up to four significant digits."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.4g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def bandwidth_text(bandwidth_bytes_per_s: float) -> str:
    """Bytes/s written back exactly, with its unit: ``2.5e10`` -> ``"25000000000.0 B/s"``
    (what :func:`parse_bandwidth` reads to the same float)."""
    return f"{float(bandwidth_bytes_per_s)!r} B/s"


def format_bandwidth(bandwidth_bytes_per_s: float) -> str:
    """Bytes/s as decimal ``GB/s`` (the unit NVIDIA and nccl-tests print), ``TB/s`` from
    10 TB/s up (a rack's NVLink) so the figure never turns into an exponent."""
    if abs(bandwidth_bytes_per_s) >= 1e13:
        return f"{bandwidth_bytes_per_s / 1e12:.4g} TB/s"
    return f"{bandwidth_bytes_per_s / 1e9:.4g} GB/s"


def format_duration(duration_s: float) -> str:
    """Seconds as the most readable of ``s``, ``ms``, ``us``, ``ns``; below a picosecond
    (rounding noise of a sum of many floats) ``"0 s"``."""
    magnitude = abs(duration_s)
    if magnitude < 1e-12:
        return "0 s"
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if magnitude >= factor:
            return f"{duration_s / factor:.4g} {unit}"
    return f"{duration_s / 1e-9:.4g} ns"
