"""YAML files read safely, with the line of every key kept for error messages.

Configuration files (clusters, scenarios) are read with ``yaml.safe_load`` only.  A
syntax error becomes a :class:`~simcore.errors.ParseError` with the file and line; a
later validation error about key ``a.b[2]`` can name its line with :func:`line_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.simcore.errors import ConfigError, ParseError

__all__ = ["key_lines", "line_of", "read_yaml"]


def key_lines(text: str) -> dict[str, int]:
    """1-based line of every dotted key path of a YAML text (``a.b``, ``a.c[2]``)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, path: str, depth: int) -> None:
        if depth > 32:  # aliases can nest a node in itself
            return
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = f"{path}.{key_node.value}" if path else str(key_node.value)
                lines.setdefault(key, key_node.start_mark.line + 1)
                walk(value_node, key, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                key = f"{path}[{i}]"
                lines.setdefault(key, item.start_mark.line + 1)
                walk(item, key, depth + 1)

    if root is not None:
        walk(root, "", 0)
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

    ``what`` names the kind of file in messages ("cluster", "scenario").
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no {what} file here", source=path) from None
    except IsADirectoryError:
        raise ConfigError(f"a {what} is a YAML file, this is a directory",
                          source=path) from None
    except OSError as error:
        raise ConfigError(f"cannot read {what} file: {error.strerror or error}",
                          source=path) from None
    except UnicodeDecodeError:
        raise ParseError(f"{what} file is not UTF-8 text", source=path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ParseError(f"invalid YAML: {problem}", source=path,
                         line=None if mark is None else mark.line + 1) from None
    return data, key_lines(text)
