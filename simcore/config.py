"""``--set KEY=VALUE`` on the command line: dotted paths into a nested configuration.

The value is read as YAML (``2`` is a number, ``true`` a bool, ``[1, 2]`` a list) and
kept as text otherwise (``200 Gbps`` stays a string for the unit parser).  Surrounding
quotes are dropped, so ``--set nic.bandwidth="200 Gbps"`` works from any shell.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from distsim_gpu.simcore.errors import ConfigError

__all__ = ["parse_assignment", "set_path", "split_overrides"]


def parse_assignment(text: str, *, source: str = "--set") -> tuple[str, Any]:
    """``"a.b=3"`` -> ``("a.b", 3)``; a clear error when there is no ``=`` or no key."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"cannot read {text!r}", source=source,
                          hint="write KEY=VALUE with a dotted key, e.g. nic.bandwidth=200Gbps")
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return key, raw[1:-1]
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def set_path(data: dict[str, Any], key: str, value: Any, *, source: str = "--set") -> None:
    """Set ``data[a][b]… = value`` for ``key = "a.b…"``, creating mappings on the way."""
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(parts[:i + 1])} is {child!r}, not a mapping",
                              key=key, source=source)
        node = child
    node[parts[-1]] = value


def split_overrides(assignments: Iterable[tuple[str, Any]],
                    prefixes: Iterable[str]) -> tuple[list[tuple[str, Any]],
                                                      dict[str, list[tuple[str, Any]]]]:
    """Split assignments into the ones under each prefix (prefix removed) and the rest."""
    wanted = list(prefixes)
    rest: list[tuple[str, Any]] = []
    routed: dict[str, list[tuple[str, Any]]] = {p: [] for p in wanted}
    for key, value in assignments:
        head, _, tail = key.partition(".")
        if head in routed and tail:
            routed[head].append((tail, value))
        else:
            rest.append((key, value))
    return rest, routed
