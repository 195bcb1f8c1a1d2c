"""The grid of a sweep: ``KEY=V1,V2`` texts read into a key and its values, the points
the grids make (their product, or zipped), and each point's short stable id."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError

__all__ = ["Point", "canonical", "describe_point", "parse_grid", "point_id", "sweep_points"]

# A point: its (dotted key, value) overrides, in the grids' order.
Point = tuple[tuple[str, Any], ...]


def parse_grid(text: str) -> tuple[str, list[Any]]:
    """``"KEY=V1,V2"`` -> ``("KEY", [v1, v2])``, each value read like a ``--set`` value.

    Values are split on the commas outside brackets, braces and quotes, so a value may
    be a YAML list or mapping (``k=[a],[a, b]``, ``k=uniform,{zipf: 1.2}``).  Quotes
    around the whole value list are dropped (``k="100 Gbps,200 Gbps"``).  Raises
    :class:`ConfigError` on a missing ``=`` or an empty value (a repeated value is
    :func:`sweep_points`'s to refuse: zipped grids may repeat one).
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"cannot read {text!r}", source="--grid",
                          hint='write KEY=V1,V2,…, e.g. parallelism.tp=1,2,4 or '
                               'cluster.nic.bandwidth="100 Gbps,200 Gbps"')
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    values: list[Any] = []
    for piece in _top_level_pieces(raw, key):
        if not piece.strip():
            raise ConfigError(f"empty value in {raw!r}", source="--grid", key=key,
                              hint="write values separated by single commas, e.g. 1,2,4")
        values.append(parse_assignment(f"{key}={piece.strip()}", source="--grid")[1])
    return key, values


_CLOSING = {"[": "]", "{": "}", "(": ")"}


def _top_level_pieces(raw: str, key: str) -> list[str]:
    """``raw`` split on the commas outside brackets, braces and quotes.  A quote opens only
    where YAML starts a scalar (a value's start, or after ``[ { , :``), so an apostrophe
    inside a word (``bob's``) is a character."""
    pieces, current, stack, quote = [], [], [], ""
    before = ""  # the last character other than a space, "" at a value's start
    for char in raw:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'" and before in ("", "[", "{", ",", ":"):
            quote = char
        elif char in _CLOSING:
            stack.append(_CLOSING[char])
        elif char in _CLOSING.values():
            if not stack or char != stack.pop():
                raise ConfigError(f"unbalanced {char!r} in {raw!r}", source="--grid",
                                  key=key, hint="close every bracket, brace and quote of a "
                                                "value, in order")
        elif char == "," and not stack:
            pieces.append("".join(current))
            current, before = [], ""
            continue
        current.append(char)
        before = before if char == " " else char
    if stack or quote:
        raise ConfigError(f"unbalanced {(stack[-1:] or [quote])[0]!r} in {raw!r}",
                          source="--grid", key=key,
                          hint="close every bracket, brace and quote of a value")
    return [*pieces, "".join(current)]


def sweep_points(grids: Sequence[tuple[str, Sequence[Any]]], *, zip_: bool = False
                 ) -> list[Point]:
    """The points of the grids: their Cartesian product (the last grid varying fastest),
    or with ``zip_`` the grids paired element-wise (all of the same length)."""
    if not grids:
        raise ConfigError("nothing to sweep", source="--grid",
                          hint="give at least one --grid KEY=V1,V2,…")
    keys = [key for key, _ in grids]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError("swept more than once: " + ", ".join(repeated), source="--grid",
                          hint="give each key one --grid with all its values")
    if zip_:
        lengths = {key: len(values) for key, values in grids}
        if len(set(lengths.values())) > 1:
            raise ConfigError(
                "--zip needs grids of the same length, got " +
                ", ".join(f"{key}: {n}" for key, n in lengths.items()), source="--grid",
                hint="give every --grid as many values, or drop --zip for the product")
        combos: Iterable[tuple[Any, ...]] = zip(*(values for _, values in grids))
    else:  # a value repeated in one grid would run its points twice
        for key, values in grids:
            _refuse_repeats([canonical(value) for value in values], values, key)
        combos = itertools.product(*(values for _, values in grids))
    points = [tuple(zip(keys, combo)) for combo in combos]
    if zip_:  # one grid may repeat a value; a whole point may not
        _refuse_repeats([canonical(point) for point in points],
                        [describe_point(point) for point in points], "--zip")
    return points


def _refuse_repeats(texts: Sequence[str], shown: Sequence[Any], key: str) -> None:
    """A clear error when a sweep would run one point twice."""
    seen: set[str] = set()
    for text, value in zip(texts, shown, strict=True):
        if text in seen:
            raise ConfigError(f"{value!r} appears twice", source="--grid", key=key,
                              hint="each point of a sweep runs once; drop the repeat")
        seen.add(text)


def canonical(value: Any) -> str:
    """A value as text that compares equal exactly when the values do (``1`` vs ``"1"``)."""
    return json.dumps(value, sort_keys=True, default=str)


def point_id(point: Point) -> str:
    """A short stable name for a point: 12 hex digits of a hash of its overrides."""
    text = json.dumps([[key, value] for key, value in point], default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def describe_point(point: Point) -> str:
    """``key=value, key=value``: a point as a person reads it."""
    return ", ".join(f"{key}={value}" for key, value in point)
