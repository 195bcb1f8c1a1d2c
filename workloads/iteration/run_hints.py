"""What the simulator knows of a run that shapes its op streams.

:class:`~workloads.iteration.streams.StreamBuilder` builds the plain ops of each stage from
the strategy alone; the simulator knows more — the closed form of a tensor-parallel
collective that may run exclusively (so the streams fuse it with its neighbours), whether
data-parallel traffic can ever touch a tensor-parallel group's links, and how the expert
all-to-alls run — and hands it over as one :class:`RunHints` record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PLAIN", "RunHints", "TpTime"]

#: The closed-form time of a tensor-parallel collective: (op, size_bytes, stage) -> s.
TpTime = Callable[[str, float, int], float]


@dataclass(frozen=True, slots=True)
class RunHints:
    """What the simulator knows of the run that shapes its streams.

    ``tp_time_s`` (the closed form of an exclusive TP collective) makes the streams fused
    (what the simulator runs); without it they are the plain ops.  ``exclusive_tp``: the
    tensor-parallel collectives may be marked ``exclusive`` — in the passes before the
    stage launches its first data-parallel collective, the only time they can be — or in
    every pass when ``dp_apart`` (data-parallel collectives never touch a TP group's links,
    see :func:`workloads.iteration.folding.dp_apart_from_tp`).  ``all_to_all``: how the
    expert all-to-alls run (DeepEP's dispatch sends FP8 under a low-precision run).
    """

    exclusive_tp: bool = False
    tp_time_s: TpTime | None = None
    dp_apart: bool = False
    all_to_all: str = "flat"


#: No hints: the plain ops (what tests and the lower bound build).
PLAIN = RunHints()
