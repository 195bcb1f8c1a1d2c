"""Reading one figure of a cluster spec: a count, a ratio, a name, a bandwidth, a latency.

Shared by the cluster forms (:mod:`topology.cluster`) and the fabric kinds' shape parsers
(:mod:`topology.fabrics`), so that every count is bounded and every ratio read the same
way wherever it is written.  Each reader takes the value, the dotted key it was found at
and the source file, and raises :class:`~simcore.errors.ConfigError` naming that key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from distsim_gpu.simcore.config import check_whole, describe
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.units import parse_bandwidth, parse_latency

__all__ = [
    "MAX_COUNT",
    "MAX_GPUS",
    "MAX_NODES",
    "MAX_NVLINK_DOMAIN",
    "read_bandwidth",
    "read_count",
    "read_latency",
    "read_optional_count",
    "read_ratio",
    "read_string",
]

#: Nodes a cluster may have: 16,384 (131,072 GPUs in 8-GPU boxes), past the largest
#: training clusters built (about 100,000 GPUs).  The bound is there so that a typo
#: (``nodes: 1.0e+30``, ``--nodes 100000``) is an error instead of an endless build.
MAX_NODES = 16_384
#: GPUs on one NVLink domain (``nvlink_domain``): 4,608, eight of the largest domain
#: designed (NVL576); a node of one switch that large models nothing built, and a typo
#: (``nvlink_domain: 1000000``) must not build a million-GPU node.
MAX_NVLINK_DOMAIN = 4_608
#: GPUs a cluster may have in all: 131,072, what MAX_NODES gives in 8-GPU boxes.
MAX_GPUS = 131_072
#: Any other count in a cluster spec (GPUs of a switch node, spines, NICs per leaf, ...).
MAX_COUNT = 2**20

_RATIO = re.compile(r"^\s*([0-9.eE+-]+)\s*:\s*([0-9.eE+-]+)\s*$")


def read_count(value: object, key: str, source: str | None, *, minimum: int,
               maximum: int = MAX_COUNT) -> int:
    """A whole number in ``[minimum, maximum]`` (YAML's ``4.0`` is the count 4)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_whole(value, key=key, minimum=minimum, maximum=maximum, source=source,
                       too_big="more than distsim builds")


def read_optional_count(mapping: Mapping[Any, Any], name: str, source: str | None, *,
                        minimum: int) -> int | None:
    """``fabric.<name>`` as a count, or None ("derive it") when it is not given."""
    value = mapping.get(name)
    return None if value is None else read_count(value, f"fabric.{name}", source,
                                                 minimum=minimum)


def read_ratio(value: object, key: str, source: str | None) -> float:
    """A ratio >= 1 from a number or an ``"N:M"`` string (``"2:1"``)."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        match = _RATIO.match(value)
        try:
            number = (float(match.group(1)) / float(match.group(2)) if match
                      else float(value))
        except (ValueError, ZeroDivisionError):
            number = None
    if number is None or not math.isfinite(number) or number < 1:
        raise ConfigError(f"oversubscription must be a ratio >= 1, got {value!r}", key=key,
                          source=source, hint='e.g. 1 (non-blocking), 2 or "2:1"')
    return number


def read_string(value: object, key: str, source: str | None) -> str:
    """A non-empty string (a name, a model)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"expected a non-empty string, got {describe(value)}", key=key,
                          source=source)
    return value


def read_bandwidth(value: object, key: str, source: str | None) -> float:
    """Bytes per second from a number (SI) or a unit string (``"200 Gbps"``)."""
    return parse_bandwidth(value, key=key, source=source)


def read_latency(value: object, key: str, source: str | None) -> float:
    """Seconds from a float (SI) or a unit string (``"1 us"``); a bare whole number other
    than 0 is refused (:func:`simcore.units.parse_latency`)."""
    return parse_latency(value, key=key, source=source)
