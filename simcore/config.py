"""The configuration toolkit: one place that edits and checks nested configuration.

Every YAML-shaped input (clusters, scenarios, communication parameters, cost knobs) is a
tree of mappings and lists.  This module holds the few operations all of them need, so a
wrong input reads the same wherever it is written:

* ``--set KEY=VALUE`` overrides (:func:`parse_assignment`, :func:`set_path`): a dotted key
  path (``nic.bandwidth``) into the tree; a list is indexed by position, written
  ``links.3.bandwidth`` or ``links[3].bandwidth``.  The value is read as YAML (``2`` is a
  number, ``true`` a bool, ``[1, 2]`` a list) and kept as text otherwise (``200 Gbps``
  stays a string for the unit parser); surrounding quotes are dropped, so
  ``--set nic.bandwidth="200 Gbps"`` works from any shell.
* checks (:func:`check_mapping`, :func:`check_keys`, :func:`check_choice`,
  :func:`check_bool`, :func:`check_whole`, :func:`check_number`) that raise
  :class:`~simcore.errors.ConfigError` (or, for a data file's content,
  :class:`~simcore.errors.ParseError`) with the file, the dotted key, the line where the
  caller knows it, and what would be valid (a did-you-mean hint from
  :func:`~simcore.errors.closest`).
"""

from __future__ import annotations

import math
import numbers
import re
import reprlib
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError, closest
from distsim_gpu.simcore.yamlfile import YamlSyntaxError, line_of, load_yaml_text

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "Where",
    "check_bool",
    "check_choice",
    "check_keys",
    "check_mapping",
    "check_number",
    "check_whole",
    "describe",
    "number_text_hint",
    "parse_assignment",
    "parse_path",
    "path_key",
    "set_path",
    "split_overrides",
]

PathToken = str | int

# One dotted part: a name, then any number of ``[i]`` list positions.
_PATH_PART = re.compile(r"^([^.\[\]=]+)((?:\[\d+\])*)$")
_PATH_HINT = "write dotted keys, e.g. nic.bandwidth or links.3.bandwidth (or links[3])"
# Long values are cut in messages: a message names the value, it does not print the file.
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def describe(value: object) -> str:
    """``"int 2"``, ``"list [1, 2]"``: a value's type and a short repr, for messages."""
    return f"{type(value).__name__} {_REPR.repr(value)}"


# --------------------------------------------------------------------------- overrides


def parse_assignment(text: str, *, source: str = "--set") -> tuple[str, Any]:
    """``"a.b=3"`` -> ``("a.b", 3)``; a clear error when there is no ``=`` or no key."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{text!r} is not KEY=VALUE", source=source,
                          hint="write KEY=VALUE with a dotted key, e.g. nic.bandwidth=200Gbps")
    parse_path(key, source=source)
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return key, raw[1:-1]
    try:
        value = load_yaml_text(raw, source)[0] if raw else ""
    except YamlSyntaxError:
        value = raw  # not YAML: keep the text, the schema will judge it
    except ParseError as error:  # YAML past a bound (depth, digits) or a bad tag (!!float x)
        error.key, error.line = key, None
        raise
    return key, value


def parse_path(key: str, *, source: str | None = "--set") -> tuple[PathToken, ...]:
    """``"links[3].kind"`` -> ``("links", 3, "kind")``; ``"links.3"`` -> ``("links", "3")``.

    A bracketed position is an ``int`` (it must index a list); a dotted part stays a string
    and indexes a list only when the tree holds a list there (see :func:`set_path`).
    """
    tokens: list[PathToken] = []
    for part in key.split("."):
        match = _PATH_PART.match(part.strip())
        if not match:
            raise ConfigError(f"cannot read key path {key!r}", source=source, hint=_PATH_HINT)
        tokens.append(match.group(1).strip())
        tokens.extend(int(i) for i in re.findall(r"\[(\d+)\]", match.group(2)))
    return tuple(tokens)


def path_key(key: str) -> str:
    """``key`` as errors name it: list positions in brackets (``links.3.kind`` ->
    ``links[3].kind``), so an error can be matched to the override that caused it.

    A part that is all digits is taken for a list position: configuration mappings have
    no all-digit keys.
    """
    parts = [part.strip() for part in key.split(".")]
    return "".join(f"[{p}]" if p.isdigit() and i else (f".{p}" if i else p)
                   for i, p in enumerate(parts))


def set_path(data: dict[str, Any], key: str, value: Any, *, source: str = "--set",
             shorthand: Mapping[str, str] | None = None,
             dotted_names_under: Collection[str] = ()) -> None:
    """Set ``data[a][b]… = value`` for ``key = "a.b…"``, in place.

    Missing mappings on the way are created; a list on the way is indexed by position
    (``links.3`` or ``links[3]``), which must exist.  ``shorthand`` maps the dotted path of a
    group that may be written as a bare string to the key that string stands for
    (``{"fabric": "kind"}``: ``fabric: fat-tree`` becomes ``{kind: fat-tree}`` before
    ``fabric.spines`` is set in it).  Under a group named in ``dotted_names_under`` the
    rest of the key is one name, dots and all (GPU names: ``stragglers.n0.gpu3``).
    """
    tokens = _tokens(key, source, dotted_names_under)
    node: Any = data
    for depth, token in enumerate(tokens[:-1]):
        here = _render(tokens[:depth + 1])
        child = _get(node, token, tokens[:depth], key, source)
        if child is None:
            if isinstance(tokens[depth + 1], int):
                raise ConfigError(f"no list item [{tokens[depth + 1]}] to set: {here} is not "
                                  "set", key=key, source=source)
            child = {}
        elif isinstance(child, str) and shorthand and here in shorthand:
            child = {shorthand[here]: child}
        _put(node, token, child, tokens[:depth], key, source)
        node = child
    _put(node, tokens[-1], value, tokens[:-1], key, source)


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


def _tokens(key: str, source: str, dotted_names_under: Collection[str]
            ) -> tuple[PathToken, ...]:
    for group in dotted_names_under:
        head, dot, rest = key.partition(group + ".")
        if dot and not head.strip() and rest.strip():
            return (*parse_path(group, source=source), rest.strip())
    return parse_path(key, source=source)


def _render(tokens: Iterable[PathToken]) -> str:
    """The dotted path of ``tokens`` as a user writes it (``links[3].kind``)."""
    text = ""
    for token in tokens:
        if isinstance(token, int):
            text += f"[{token}]"
        else:
            text = f"{text}.{token}" if text else token
    return text


def _position(node: list[Any], token: PathToken, at: tuple[PathToken, ...], key: str,
              source: str) -> int:
    """The list position ``token`` names in ``node`` (which sits at path ``at``)."""
    where = _render(at) or "the top level"
    if isinstance(token, str) and not token.isdigit():
        raise ConfigError(f"{where} is a list; {token!r} is not a position in it", key=key,
                          source=source, hint=f"index a list by a whole number, e.g. "
                                              f"{_render((*at, '0'))}")
    index = int(token)
    if index >= len(node):
        raise ConfigError(f"no list item [{index}] to set: {where} has {len(node)} item(s)",
                          key=key, source=source,
                          hint=f"valid positions: 0 to {len(node) - 1}" if node
                          else "the list is empty")
    return index


def _check_container(node: Any, token: PathToken, at: tuple[PathToken, ...], key: str,
                     source: str) -> None:
    wanted = "a list" if isinstance(token, int) else "a mapping"
    if not isinstance(node, list if isinstance(token, int) else (dict, list)):
        raise ConfigError(f"{_render(at) or 'the top level'} is {describe(node)}, not "
                          f"{wanted}", key=key, source=source)


def _get(node: Any, token: PathToken, at: tuple[PathToken, ...], key: str,
         source: str) -> Any:
    _check_container(node, token, at, key, source)
    if isinstance(node, list):
        return node[_position(node, token, at, key, source)]
    return node.get(token)


def _put(node: Any, token: PathToken, value: Any, at: tuple[PathToken, ...], key: str,
         source: str) -> None:
    _check_container(node, token, at, key, source)
    if isinstance(node, list):
        node[_position(node, token, at, key, source)] = value
    else:
        node[token] = value


# --------------------------------------------------------------------------- checks


class Where(TypedDict, total=False):
    """Where a checked value was written, for its error (each optional): the file
    (``source``), its key -> line map (``lines``) or, where the caller has none, the
    ``line`` itself (a CSV row), and the :class:`DistsimError` class raised (``error``:
    :class:`ParseError` for a data file's content; :class:`ConfigError` by default)."""

    source: str | None
    lines: Mapping[str, int] | None
    line: int | None
    error: type[DistsimError]


_WHERE_KEYS = Where.__optional_keys__


def _check_where(where: Where) -> None:
    """A misspelt place argument is a caller's bug: raise as a misspelt keyword would."""
    if where and not where.keys() <= _WHERE_KEYS:
        unknown = sorted(where.keys() - _WHERE_KEYS)[0]
        raise TypeError(f"unexpected keyword argument {unknown!r}")


def _fail_at(message: str, key: str | None, where: Where, hint: str | None = None,
             ) -> DistsimError:
    """:func:`_fail` with the place given as a :class:`Where`."""
    return _fail(message, key, where.get("source"), where.get("lines"), hint,
                 line=where.get("line"), error=where.get("error", ConfigError))


def _fail(message: str, key: str | None, source: str | None,
          lines: Mapping[str, int] | None, hint: str | None = None, *,
          line: int | None = None, error: type[DistsimError] = ConfigError) -> DistsimError:
    """``error`` at ``key``; its line from ``lines`` where they hold the key, else ``line``."""
    found = line_of(key, lines) if key and lines else None
    return error(message, key=key, source=source, line=line if found is None else found,
                 hint=hint)


def check_mapping(value: Any, *, key: str | None, source: str | None = None,
                  lines: Mapping[str, int] | None = None, optional: bool = False,
                  hint: str | None = None) -> Mapping[Any, Any]:
    """``value`` if it is a mapping (``{}`` for ``None`` when ``optional``), else an error
    at ``key`` naming what it is instead (``hint``: what a valid one looks like)."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(f"expected a mapping, got {describe(value)}", key, source, lines, hint)
    return value


def check_bool(value: Any, *, key: str | None, source: str | None = None,
               lines: Mapping[str, int] | None = None, line: int | None = None,
               error: type[DistsimError] = ConfigError) -> bool:
    """``value`` if it is a bool (YAML ``true``/``false``, not ``1`` or ``"yes"``); else
    ``must be true or false, got <value>`` at ``key``."""
    if not isinstance(value, bool):
        raise _fail(f"must be true or false, got {value!r}", key, source, lines, line=line,
                    error=error)
    return value


def check_whole(value: Any, *, key: str | None, minimum: int = 1, maximum: int | None = None,
                hint: str | None = None,
                too_big: str = "larger than any job distsim is meant to simulate",
                **where: Unpack[Where]) -> int:
    """``value`` if it is a whole number (an ``int``, not a ``bool``) of at least
    ``minimum`` and at most ``maximum``; else ``must be a whole number >= <minimum>, got
    <value>`` (or ``must be at most <maximum>``, with ``too_big`` saying why the bound is
    there) at ``key``, in the place ``where`` says (:class:`Where`); ``hint`` says
    what a value means (``"0 takes the default"``).  Bounds keep a typo (``1e30`` layers)
    from allocating without end; see each caller for its own."""
    _check_where(where)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail_at(f"must be a whole number >= {minimum}, got {_REPR.repr(value)}", key,
                       where, hint)
    if maximum is not None and value > maximum:
        raise _fail_at(f"must be at most {maximum:,}, got {_REPR.repr(value)}", key, where,
                       hint or too_big)
    return value


def check_number(value: Any, *, key: str | None, minimum: float = 0.0, above: bool = False,
                 maximum: float | None = None, hint: str | None = None,
                 **where: Unpack[Where]) -> float:
    """``value`` as a float if it is a finite real number (not a bool) of at least
    ``minimum`` (above it when ``above``) and at most ``maximum``; else ``must be a finite
    number >= 0`` / ``> 0`` / ``a number in (0, 1]``, ``got <value>``, at ``key``.
    ``hint`` and ``where`` as for :func:`check_whole`."""
    _check_where(where)
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and _finite(value)
          and (value > minimum if above else value >= minimum)
          and (maximum is None or value <= maximum))
    if ok:
        return float(value)
    low = f"({minimum:g}" if above else f"[{minimum:g}"
    bound = (f"a finite number {'>' if above else '>='} {minimum:g}" if maximum is None
             else f"a number in {low}, {maximum:g}]")
    raise _fail_at(f"must be {bound}, got {_REPR.repr(value)}", key, where,
                   hint or number_text_hint(value))


_EXPONENT_TEXT = re.compile(r"^([-+]?[0-9][0-9_]*)[eE]([-+]?)([0-9]+)$")


def number_text_hint(value: Any) -> str | None:
    """How to write ``value`` when it is a number YAML read as text: YAML 1.1 (PyYAML,
    ``--set``) reads a float in exponent form only with a dot and a signed exponent, so
    ``1e9`` and ``2e0`` are strings; None for anything else."""
    found = _EXPONENT_TEXT.match(value.strip()) if isinstance(value, str) else None
    if not found:
        return None
    mantissa, sign, digits = found.groups()
    return (f"YAML reads {value.strip()} as text, not a number: write "
            f"{float(value.replace('_', ''))!r} or {mantissa}.0e{sign or '+'}{digits}")


def _finite(value: numbers.Real) -> bool:
    """Finite as a float: a whole number of 400 digits is not (it overflows a float)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def check_keys(mapping: Mapping[Any, Any], valid: Collection[str], *, prefix: str = "",
               what: str = "key", context: str = "",
               synonyms: Mapping[str, str] | None = None, **where: Unpack[Where]) -> None:
    """Every key of ``mapping`` (found at dotted path ``prefix``) is one of ``valid``.

    The first unknown key is named by its full dotted path, with the closest valid key as
    a hint, or, where ``synonyms`` holds it (another tool's name for a setting), what it
    says to write instead.  The message is ``unknown <what><context>``: ``what`` says what
    the keys name (``"protocol"``), ``context`` why the set is what it is (``" for preset
    'switch'"``).  ``where`` (:class:`Where`) is the place: the file, its lines or the line
    itself when the caller knows it but has no ``lines`` map (a CSV row), the error class
    raised.
    """
    _check_where(where)
    for raw in mapping:
        if isinstance(raw, str) and raw in valid:
            continue
        name = str(raw)
        known = (synonyms or {}).get(name)
        raise _fail_at(f"unknown {what}{context}", f"{prefix}.{name}" if prefix else name,
                       where, closest(name, valid) if known is None
                       else f"a framework's name: {known}")


def check_choice(value: Any, valid: Collection[str], *, key: str | None,
                 what: str | None = None, fold_case: bool = False,
                 **where: Unpack[Where]) -> str:
    """``value`` if it is one of ``valid`` (lower-cased first when ``fold_case``).

    The error says ``unknown <what> <value>``; ``what`` defaults to the last part of
    ``key`` (``communication.algorithm`` -> ``algorithm``).  ``key`` is ``None`` where
    the caller cannot say where the value was written (a library call's argument).
    ``where`` as for :func:`check_keys`.
    """
    _check_where(where)
    text = str(value).lower() if fold_case else value
    if isinstance(text, str) and text in valid:
        return text
    what = what or (key.rsplit(".", 1)[-1].split("[", 1)[0] if key else "value")
    raise _fail_at(f"unknown {what} {value!r}", key, where, closest(str(text), valid))
