"""Run notes: an assumption the run made that moves its answer, said in its output.

A :class:`RunNote` records one thing the user did not give and the run filled in, or
something it left out: a cost-table row extrapolated beyond what was measured, a figure
taken from a default, a fault's stall.  Each output (terminal, ``--json``, ``summary.json``,
``report.html``) prints the run's notes, so no such choice is silent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NOTE_KINDS", "RunNote", "unique"]

#: What a note can say: a value outside what was measured (``extrapolated``), a figure the
#: run took from a default (``defaulted``), something given that the run did not use
#: (``ignored``), a fault's effect (``fault``), a headline that hides its parts
#: (``headline``), what a fit could not explain (``fit``), a limit the run meets that the
#: model leaves out, so that its answer is optimistic (``unmodelled``).
NOTE_KINDS = ("extrapolated", "defaulted", "ignored", "fault", "headline", "fit",
              "unmodelled")


@dataclass(frozen=True, slots=True)
class RunNote:
    """One note: its ``kind`` (one of :data:`NOTE_KINDS`), the ``message`` a reader sees,
    and the configuration ``key`` it is about (dotted, as in the scenario), if any."""

    kind: str
    message: str
    key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in NOTE_KINDS:
            raise ValueError(f"note kind {self.kind!r}: valid kinds are "
                             + ", ".join(NOTE_KINDS))

    def __str__(self) -> str:
        where = f" [{self.key}]" if self.key else ""
        return f"{self.kind}{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "message", "key"}`` (``key`` None when the note names none)."""
        return {"kind": self.kind, "message": self.message, "key": self.key}


def unique(notes: list[RunNote] | tuple[RunNote, ...]) -> tuple[RunNote, ...]:
    """``notes`` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(notes))
