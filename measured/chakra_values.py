"""What a Chakra node's numbers and attributes may hold, checked once where a trace is read.

Chakra's schema (``et_def.proto``) gives the ranges: node ids, dependencies and the
microsecond times are ``uint64``; ``comm_tag`` is an ``int64``.  The attributes a
simulator reads (``comm_type``, ``comm_size``, ``comm_src``, ``comm_dst``, ``num_ops``,
``stream``, ``tid``) are whole numbers >= 0, ``is_cpu_op`` a bool, ``pg_ranks`` a list of
ranks, distsim's ``duration_s`` a finite number of seconds >= 0.  A value outside its range
(a NaN or infinite duration, a negative time, a text where a number goes, a list where a
tag goes) is a :class:`~simcore.errors.ParseError` naming the node and the attribute, so
nothing past the reader meets it.  JSON numbers are bounded as they are parsed
(:func:`load_json`): no NaN or Infinity, no integer of more digits than a ``uint64`` has,
no nesting deeper than Python's reader can follow.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from distsim_gpu.simcore.errors import ParseError

__all__ = ["MAX_RANK", "MAX_UINT64", "check_attrs", "load_json", "whole"]

#: Node ids, dependencies and microsecond times are uint64 in et_def.proto.
MAX_UINT64 = 2**64 - 1
_INT64 = (-(2**63), 2**63 - 1)  # comm_tag: int64 in et_def.proto
#: The most ranks a process group may name: the largest cluster distsim builds is far
#: below (simcore's bound on nodes is 16,384, a few GPUs each); 2**31 is an int32 rank.
MAX_RANK = 2**31 - 1
# The longest decimal integer a uint64 or int64 needs (20 digits), with its sign.
_MAX_DIGITS = 20
_DIGITS = re.compile(r"-?\d{1,20}")
# Attributes read as whole numbers >= 0 (uint64), and the one signed one.
_WHOLE_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "num_ops", "stream", "tid")


def whole(value: Any, *, what: str, source: str, key: str | None = None,
          lowest: int = 0, highest: int = MAX_UINT64) -> int:
    """``value`` as an int in [lowest, highest]: an int (not a bool), or its decimal digits
    as protobuf's JSON mapping writes 64-bit numbers."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON writers that print every number as a float
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise ParseError(f"{what} must be a whole number in [{lowest:,}, {highest:,}], got "
                         f"{_show(value)}", source=source, key=key)
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _duration_s(value: Any, source: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and 0 <= value <= MAX_UINT64 * 1e-6):
        raise ParseError(f"duration_s must be a finite number of seconds >= 0, got "
                         f"{_show(value)}", source=source, key=key)
    return float(value)


def check_attrs(attrs: Mapping[str, Any], *, node: int, source: str) -> dict[str, Any]:
    """``attrs`` with the attributes distsim reads checked (and ``duration_s`` a float);
    the others as they are."""
    checked = dict(attrs)
    for name in _WHOLE_ATTRS:
        if checked.get(name) is not None:
            checked[name] = whole(checked[name], what=name, source=source,
                                  key=f"node {node}.{name}")
    if checked.get("comm_tag") is not None:
        checked["comm_tag"] = whole(checked["comm_tag"], what="comm_tag", source=source,
                                    key=f"node {node}.comm_tag", lowest=_INT64[0],
                                    highest=_INT64[1])
    if checked.get("duration_s") is not None:
        checked["duration_s"] = _duration_s(checked["duration_s"], source,
                                            f"node {node}.duration_s")
    cpu = checked.get("is_cpu_op")
    if cpu is not None and cpu not in (True, False):  # (0 and 1 are False and True)
        raise ParseError(f"is_cpu_op must be true or false, got {_show(cpu)}", source=source,
                         key=f"node {node}.is_cpu_op")
    ranks = checked.get("pg_ranks")
    if ranks is not None:
        if not isinstance(ranks, (list, tuple)) or not ranks:
            raise ParseError(f"pg_ranks must be a list of ranks, got {_show(ranks)}",
                             source=source, key=f"node {node}.pg_ranks")
        checked["pg_ranks"] = [whole(r, what="pg_ranks", source=source,
                                     key=f"node {node}.pg_ranks", highest=MAX_RANK)
                               for r in ranks]
    return checked


def load_json(text: str, *, source: str) -> Any:
    """The JSON document ``text``, its numbers bounded (module docstring)."""
    def constant(name: str) -> Any:
        raise ParseError(f"{name} is not a JSON number", source=source,
                         hint="times and sizes are finite numbers")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > _MAX_DIGITS:
            raise ParseError(f"a number of {len(digits.lstrip('-')):,} digits: more than a "
                             f"64-bit field holds ({_MAX_DIGITS})", source=source)
        return int(digits)

    def real(digits: str) -> float:
        value = float(digits)
        if not math.isfinite(value):
            raise ParseError(f"the number {digits[:40]} is beyond a double's range",
                             source=source, hint="times and sizes are finite numbers")
        return value

    try:
        return json.loads(text, parse_constant=constant, parse_int=integer, parse_float=real)
    except json.JSONDecodeError as error:
        raise ParseError(f"malformed JSON: {error.msg}", source=source,
                         line=error.lineno) from None
    except RecursionError:
        raise ParseError("JSON nested deeper than distsim reads (a Chakra ET is a few "
                         "levels deep)", source=source) from None
