"""YAML read safely and within bounds, with the line of every key kept for error messages.

Configuration files (clusters, scenarios, cost tables) and ``--set`` values are read with
:class:`BoundedLoader`, PyYAML's ``SafeLoader`` (no Python objects) with limits that keep
a hostile or broken file from taking the process down:

* nesting deeper than :data:`MAX_DEPTH` (100) is refused before PyYAML's recursive
  composer overflows the stack (a real configuration nests under ten deep);
* anchors and aliases are allowed, but the document they expand to may hold at most
  :data:`MAX_NODES` (2,000,000) nodes and nest at most :data:`MAX_DEPTH` deep — a
  "billion laughs" file of nine nested aliases would otherwise expand to 10⁹ values
  downstream — and an alias may not refer to a node that contains it;
* a whole number written with more than :data:`MAX_INT_DIGITS` (400) digits is refused
  (no quantity distsim reads needs more than twenty; Python refuses to convert past 4,300);
* a value that its tag cannot construct (``!!float x``) is a syntax error at its line;
* a YAML 1.1 base-60 number stays text (``2:1`` is not 121, as in YAML 1.2);
* a key written twice in one mapping is a syntax error at its second line (YAML says keys
  are unique; PyYAML keeps the last, which silently drops the first).

Any of these, and any YAML syntax error, becomes a :class:`~simcore.errors.ParseError` with
the file and line; a later validation error about key ``a.b[2]`` can name its line with
:func:`line_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.fileio import read_input_text

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_NODES",
    "BoundedLoader",
    "YamlSyntaxError",
    "key_lines",
    "line_of",
    "load_yaml_text",
    "read_yaml",
]

MAX_DEPTH = 100
MAX_NODES = 2_000_000
MAX_INT_DIGITS = 400
# A configuration file is kilobytes; a written-out cluster of 100k links a few tens of MB.
MAX_YAML_BYTES = 64 * 2**20


class YamlSyntaxError(ParseError):
    """The text is not YAML at all (a scanner or parser error), as opposed to YAML that
    breaks a bound or a tag; ``--set`` keeps such a value as plain text."""


class BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses deep nesting, over-long integers and values its tag
    cannot build, as YAML errors with a position (see the module docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as error:  # int("x"), float("x") of a tag
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_short(node.value)} as {node.tag.split(':')[-1]}"
                f" ({error.__class__.__name__})", node.start_mark) from None

    def construct_yaml_int(self, node: Any) -> int | str:
        if ":" in str(node.value):
            return str(node.value)  # base 60 (see _BASE_60)
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a whole number of {digits} digits is too long (at most "
                f"{MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)


    def construct_yaml_float(self, node: Any) -> float | str:
        if ":" in str(node.value):
            return str(node.value)  # base 60 (see _BASE_60)
        return super().construct_yaml_float(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            _refuse_repeated_keys(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_repeated_keys(node: yaml.MappingNode) -> None:
    """A syntax error at the second of two equal keys written in one mapping (keys a
    ``<<`` merge brings in may be overridden: that is what a merge is for)."""
    first: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
            continue
        name = key_node.value
        if name in first:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark,
                f"key {_short(name)} appears twice (first at line "
                f"{first[name].line + 1}); keep one", key_node.start_mark)
        first[name] = key_node.start_mark


# _BASE_60: YAML 1.1 reads ``1:2:3`` as the number 3723 (base 60, meant for times) and
# ``2:1`` as 121; YAML 1.2 dropped that, and no one means a count or a ratio so.  Such a
# scalar stays text: ``oversubscription: 2:1`` is the ratio, ``nodes: 1:2:3`` an error.


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:36]}...{text[-4:]}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand past the bounds or into a cycle.

    Iterative, memoised by node: shared (aliased) nodes are measured once, so a billion
    laughs costs as many steps as it has distinct nodes."""
    measured: dict[int, tuple[int, int]] = {}  # id -> (expanded nodes, expanded depth)
    open_nodes: set[int] = set()  # started, not finished: the ancestors of the current one
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            kids = [measured[id(k)] for k in _children(node)]
            size = 1 + sum(s for s, _ in kids)
            depth = 1 + max((d for _, d in kids), default=0)
            open_nodes.discard(key)
            if size > MAX_NODES or depth > MAX_DEPTH:
                what = (f"more than {MAX_NODES:,} values" if size > MAX_NODES
                        else f"more than {MAX_DEPTH} levels deep")
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand this to {what}", node.start_mark)
            measured[key] = (size, depth)
            continue
        if key in measured:
            continue
        if key in open_nodes:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that "
                                              "contains it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in measured)


def _compose(text: str, source: str) -> tuple[BoundedLoader, yaml.Node | None]:
    try:
        loader = BoundedLoader(text)  # (the reader checks the characters here already)
    except yaml.YAMLError as error:
        raise _parse_error(error, source) from None
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node)
    except yaml.YAMLError as error:
        loader.dispose()
        raise _parse_error(error, source) from None
    return loader, node


def _parse_error(error: yaml.YAMLError, source: str) -> ParseError:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    syntax = isinstance(error, (yaml.scanner.ScannerError, yaml.parser.ParserError,
                                yaml.reader.ReaderError))
    return (YamlSyntaxError if syntax else ParseError)(
        f"invalid YAML: {problem}", source=source,
        line=None if mark is None else mark.line + 1)


def load_yaml_text(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """The YAML document in ``text`` and the line of each key (see :func:`key_lines`);
    :class:`ParseError` naming ``source`` (a file, ``"--set"``) for a syntax error or a
    document past the bounds."""
    loader, node = _compose(text, source)
    try:
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as error:
        raise _parse_error(error, source) from None
    finally:
        loader.dispose()
    return data, {} if node is None else _node_lines(node)


def key_lines(text: str) -> dict[str, int]:
    """1-based line of every dotted key path of a YAML text (``a.b``, ``a.c[2]``); ``{}``
    when the text does not read."""
    try:
        loader, node = _compose(text, "<text>")
    except ParseError:
        return {}
    loader.dispose()
    return {} if node is None else _node_lines(node)


def _node_lines(root: yaml.Node) -> dict[str, int]:
    """The line of each key path under ``root``; an aliased node is walked once, where it
    is first met (its later uses take the line of the key holding the alias)."""
    lines: dict[str, int] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in reversed(node.value):
                key = f"{path}.{key_node.value}" if path else str(key_node.value)
                lines[key] = key_node.start_mark.line + 1
                stack.append((value_node, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in reversed(list(enumerate(node.value))):
                key = f"{path}[{i}]"
                lines[key] = item.start_mark.line + 1
                stack.append((item, key))
    return lines


def line_of(key: str, lines: Mapping[str, int]) -> int | None:
    """The line of ``key`` or of its nearest enclosing key that the file has."""
    while key:
        if key in lines:
            return lines[key]
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    return None


def read_yaml(path: str, what: str) -> tuple[Any, dict[str, int]]:
    """The YAML document in ``path`` and the line of each key; clear errors otherwise.

    ``what`` names the kind of file in messages ("cluster", "scenario").  The file is
    read through :func:`~simcore.fileio.read_input_text` (a regular file, at most 64 MiB,
    UTF-8) and parsed by :func:`load_yaml_text`.
    """
    text = read_input_text(path, what, limit_bytes=MAX_YAML_BYTES)
    return load_yaml_text(text, path)
