"""One error family for everything distsim rejects.

Bad input must end in a message a user can act on, never in a traceback: *where* the
problem is (file, key path, line), *what* is wrong, and *what would be valid*.  Every
layer raises a subclass of :class:`DistsimError`; the CLI catches the family, prints
``str(error)`` and exits with status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "DistsimError",
    "ParseError",
    "SimulationError",
    "TopologyError",
    "closest",
]


class DistsimError(Exception):
    """Base of every error distsim raises on purpose.

    ``source`` is a file name (or ``"--set"``, ``"<command line>"``), ``key`` a dotted key
    path inside it, ``line`` a 1-based line number, ``hint`` what would be valid.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.key = key
        self.line = line
        self.hint = hint

    def where(self) -> str:
        """The place as ``file:line: key`` with absent parts left out."""
        place = ""
        if self.source:
            place = self.source
            if self.line is not None:
                place += f":{self.line}"
        if self.key:
            place = f"{place}: {self.key}" if place else self.key
        return place

    def __str__(self) -> str:
        text = self.message
        place = self.where()
        if place:
            text = f"{place}: {text}"
        if self.hint:
            text = f"{text} ({self.hint})"
        return text


class ConfigError(DistsimError):
    """A configuration value or key is wrong (scenario, cluster or override)."""


class ParseError(DistsimError):
    """A file could not be read: malformed YAML, log, trace or unit string."""


class TopologyError(DistsimError):
    """The described cluster is not a usable network (disconnected, dangling link, …)."""


class SimulationError(DistsimError):
    """The simulation itself reached an impossible state (a bug or a deadlock)."""


def closest(word: str, choices: Iterable[str]) -> str:
    """A hint naming the valid choices, the closest first when one is close.

    >>> closest("bandwith", ["bandwidth", "latency"])
    "did you mean 'bandwidth'? valid: bandwidth, latency"
    """
    options = sorted(str(c) for c in choices)
    valid = "valid: " + ", ".join(options) if options else "nothing is valid here"
    near = difflib.get_close_matches(str(word), options, n=1)
    return f"did you mean '{near[0]}'? {valid}" if near else valid
