"""Where a rank group's iteration goes, and the critical path through all of them.

A :class:`RankGroup` accumulates its time on the main stream as **compute**, **exposed
communication**, **bubble** and **idle** (the split is explained in
:mod:`workloads.iteration`), the intervals when any collective of the group was in flight,
and its main stream's *segments*: contiguous stretches from time 0, each saying what it
was spent on and what it waited for when it began.  A :class:`Meeting` is a collective
among rank groups: it starts when the last member arrives and remembers what that last
arrival had waited for; :class:`Meetings` holds the open ones and books the time a group
spends waiting for one.

:func:`critical_path` walks those links back from the group that finished last — to the
sender of a late activation, to the last arrival at a collective, to the previous
collective of a communication stream — and returns the chain that set the iteration's
length.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy
from distsim_gpu.workloads.iteration.ops import Compute, Fused, Recv
from distsim_gpu.workloads.strategy.dimensions import critical_kinds

__all__ = ["CRITICAL_KINDS", "Meeting", "Meetings", "PathEntry", "RankGroup", "critical_path",
           "critical_path_kinds", "started"]


def critical_path_kinds() -> tuple[str, ...]:
    """What a stretch of the critical path can be, in report order: compute, the GPU's
    wait for the host's work (``host``: an offloaded optimizer step's PCIe copies and
    CPU-Adam), each registered dimension's communication (:func:`critical_kinds`,
    registered ones included), the pipeline's bubble and the data loader."""
    return ("compute", "host", *critical_kinds(), "bubble wait", "data loading")


#: The built-in dimensions' kinds (:func:`critical_path_kinds` for the registry's now).
CRITICAL_KINDS = critical_path_kinds()


@dataclass(frozen=True, slots=True)
class PathEntry:
    """One stretch ``[start_s, end_s]`` of the iteration's critical path: what rank group
    ``group`` (first GPU ``gpu``) spent it on (``kind``, one of :func:`critical_path_kinds`).
    A ``compute`` entry is a run of local ops, which may include tensor-parallel
    collectives timed by their closed form: ``tp_comm_s`` of it."""

    start_s: float
    end_s: float
    kind: str
    label: str
    group: str
    gpu: str
    tp_comm_s: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class RankGroup:
    """One rank group's identity and its accumulated time accounting.

    ``path`` holds the main stream's segments ``(start_s, end_s, kind, info, dep)``,
    contiguous from 0 (plain tuples: there are hundreds of thousands).  ``info`` is what the segment
    ran (a :class:`~workloads.iteration.ops.Fused` op, a :class:`~workloads.iteration.ops.Recv`, or
    a label); ``dep`` what it waited for when it started: ``None`` (this group's previous segment),
    ``(group, n)`` (that group's segment ``n - 1``) or a :class:`Meeting` (a collective that held it
    back on its stream).

    ``paces``: each member's share of the group's compute time (its own straggler factor
    over ``slowdown``; 1 for the slowest).  A faster member computes that share of each
    compute span and waits out the rest in the group's next collective, so in a run where
    some member is (``split``) ``compute_intervals`` holds the compute spans as flat
    ``start, end`` pairs (what the per-GPU breakdown and the trace split; a folded image
    shares its simulated group's); else None.
    """

    __slots__ = ("bubble_s", "calls", "comm_intervals", "compute_intervals", "compute_s",
                 "end_s", "exposed_s", "gpus", "handles", "host_s", "idle_s", "name",
                 "paces", "path", "pending", "replica", "slowdown", "stage", "streams")

    def __init__(self, stage: int, replica: int, gpus: tuple[str, ...], slowdown: float,
                 paces: tuple[float, ...] | None = None, split: bool = False):
        self.stage = stage
        self.replica = replica
        self.gpus = gpus
        self.slowdown = slowdown
        self.paces = paces or (1.0,) * len(gpus)
        # A flat array, not tuples: a jittered run splits every group's compute.
        self.compute_intervals: array[float] | None = (
            array("d") if split or self.paced else None)
        self.name = f"stage {stage} replica {replica} ({gpus[0]}" + (
            f" +{len(gpus) - 1})" if len(gpus) > 1 else ")")
        self.compute_s = 0.0
        self.host_s = 0.0  # waiting for the host's work (Fused.host_s), not GPU compute
        self.exposed_s = 0.0
        self.bubble_s = 0.0
        self.idle_s = 0.0
        self.end_s = 0.0
        self.comm_intervals: list[tuple[float, float]] = []
        self.pending: list[Meeting] = []  # async collectives waited for at the end
        self.handles: dict[str, Meeting] = {}  # async collectives waited for by handle
        self.streams: dict[str, Meeting] = {}  # the last collective of each stream
        # Per communicator (data parallel, an expert block, a context-parallel ring), how
        # many of its calls it has joined: the n-th of each is the same call for every
        # peer (they run the same stream).
        self.calls: dict[str, int] = {}
        self.path: list[tuple[float, float, str, Any, Any]] = []

    def add_fused(self, start_s: float, end_s: float, op: Fused, computed_s: float) -> None:
        """Account ``op``, run over ``[start_s, end_s]`` with ``computed_s`` of compute:
        its closed-form collectives as exposed communication, the host's part of it
        (``op.host_s``) as ``host``, the rest as the GPU's compute; on the critical path
        the host's part its own ``host`` stretch, after the GPU's (an offloaded step is
        fused alone, so the split is exact where it occurs)."""
        host_s = op.host_s
        self.compute_s += computed_s - host_s
        self.host_s += host_s
        self.exposed_s += op.comm_s
        if not host_s:
            self.path.append((start_s, end_s, "compute", op, None))
            return
        if op.comm_s or op.compute_s != host_s:  # GPU work or collectives beside it
            self.path.append((start_s, end_s - host_s, "compute", op, None))
            start_s = end_s - host_s
        label = next(s.label for s in op.steps if isinstance(s, Compute) and s.host)
        self.path.append((start_s, end_s, "host", label, None))

    @property
    def paced(self) -> bool:
        """Whether some member is faster than the group (and waits for it)."""
        return any(share != 1.0 for share in self.paces)


class Meeting:
    """A collective among rank groups: it starts when the last member arrives."""

    __slots__ = ("arrivals", "arrived", "cause", "done", "end_s", "kind", "label", "start_s")

    def __init__(self, env: simpy.Environment) -> None:
        self.arrived = 0
        self.arrivals: dict[RankGroup, float] = {}
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.done = env.event()
        # What the last arrival waited for (a path ``dep``, see RankGroup.path).
        self.cause: Any = None
        self.label = ""
        # The critical-path kind of waiting for it (its communicator's, see
        # workloads.strategy.dimensions): set where it is launched asynchronously.
        self.kind = "dp comm"


class Meetings:
    """The collectives among rank groups still waiting for members, and the accounting of
    the groups that wait for them.  ``key`` names a call: the n-th of its kind among the
    same members (they run the same stream)."""

    __slots__ = ("_open", "env")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._open: dict[Any, Meeting] = {}

    def unfinished(self) -> bool:
        """Whether some collective has members that never came (a deadlock)."""
        return any(m.arrived for m in self._open.values())

    def meet(self, key: Any, group: RankGroup, members: list[RankGroup],
             launch: Callable[[], simpy.Event]) -> Meeting:
        """``group`` arrives at the collective ``key`` now; the last arrival launches it."""
        meeting = self.get(key)
        self.arrive(meeting, key, group, members, launch)
        return meeting

    def get(self, key: Any) -> Meeting:
        """The open collective ``key`` (new if nobody arrived yet)."""
        meeting = self._open.get(key)
        if meeting is None:
            meeting = self._open[key] = Meeting(self.env)
        return meeting

    def arrive(self, meeting: Meeting, key: Any, group: RankGroup, members: list[RankGroup],
               launch: Callable[[], simpy.Event], cause: Any = None) -> None:
        """``cause``: what held the arrival back (a previous collective of its stream);
        None: the group's main stream, arriving now."""
        meeting.arrived += 1
        meeting.arrivals[group] = self.env.now
        if meeting.arrived < len(members):
            return
        del self._open[key]
        meeting.start_s = self.env.now
        meeting.cause = cause if cause is not None else (group, len(group.path))
        done = launch()

        def finish(_event: simpy.Event) -> None:
            meeting.end_s = self.env.now
            for member in members:
                member.comm_intervals.append((meeting.start_s, self.env.now))
            meeting.done.succeed()

        done.callbacks.append(finish)

    def wait(self, group: RankGroup, meeting: Meeting, *, kind: str, label: str,
             flush: bool = False) -> Generator[simpy.Event, Any, None]:
        """Wait for a collective.  Waiting for late peers is idle — or bubble when it is
        the pipeline's ``flush``; the rest (the transfer, and earlier collectives on the
        same stream) is exposed communication."""
        began = self.env.now
        if not meeting.done.triggered:
            yield meeting.done
        ready = max(began, meeting.arrivals.get(group, began))
        start = meeting.start_s if meeting.start_s is not None else ready
        late = max(start - ready, 0.0)
        if flush:
            group.bubble_s += late
        else:
            group.idle_s += late
        group.exposed_s += self.env.now - began - late
        self.record_wait(group, meeting, began, kind, label)

    def record_wait(self, group: RankGroup, meeting: Meeting, began: float, kind: str,
                    label: str) -> None:
        """A wait for a collective on the critical path: from its start, following what
        its last arrival waited for.  One that had started before the wait began ran
        beside the group's own work since (a bucket's all-reduce behind the backward of
        the layers below): the wait is the collective's tail, and the path follows the
        collective back to its start and its last arrival, not the group's work, which
        had slack (speeding it up would not end the wait sooner)."""
        now = self.env.now
        start = meeting.start_s
        if start is not None and start > began:
            group.path.append((start, now, kind, label, meeting.cause))
        elif now > began:
            group.path.append((began, now, kind, label, meeting if start is not None
                               else None))


def started(meeting: Meeting, default: float) -> float:
    """When a collective started (``default`` if it never did)."""
    return meeting.start_s if meeting.start_s is not None else default


def critical_path(groups: list[RankGroup], iteration_s: float,
                  weights: list[int] | None = None) -> tuple[PathEntry, ...]:
    """Walk back from the group that finished last to time 0, following at each
    segment what it waited for when it started; stretches no segment explains (there
    should be none but rounding) are ``bubble wait``.  ``weights``: per group, how many
    rank groups it stands for (folded; 1 each by default), for the walk's bound."""
    if not groups:
        return ()
    walk = _Walk(iteration_s)
    group = max(groups, key=lambda g: g.end_s)
    n = len(group.path)
    # A bound on the walk (against a cycle), as the full run's: each group's segments
    # counted once per rank group it stands for.
    counts = weights or [1] * len(groups)
    steps = sum(len(g.path) * k for g, k in zip(groups, counts)) + sum(counts) + 16
    while n > 0 and steps > 0:
        steps -= 1
        start, end, kind, info, dep = group.path[n - 1]
        walk.emit(start, end, kind, info, group)
        while isinstance(dep, Meeting) and steps > 0:
            # Held back by the previous collective of the same stream.
            steps -= 1
            walk.emit(dep.start_s or 0.0, dep.end_s or 0.0, dep.kind, dep.label, group)
            dep = dep.cause
        if dep is None:
            n -= 1
        elif isinstance(dep, tuple):
            group, n = dep
    if walk.cursor > walk.tiny:
        walk.emit(0.0, 0.0, "bubble wait", "waiting", group)
    walk.out.reverse()
    return tuple(walk.out)


class _Walk:
    """The critical path being assembled backwards from ``cursor``."""

    __slots__ = ("cursor", "out", "tiny")

    def __init__(self, iteration_s: float) -> None:
        self.tiny = 1e-12 * iteration_s
        self.out: list[PathEntry] = []
        self.cursor = iteration_s

    def emit(self, start: float, end: float, kind: str, info: Any, group: RankGroup) -> None:
        end = min(end, self.cursor)
        start = min(start, end)
        if self.cursor - end > self.tiny:
            self.out.append(PathEntry(end, self.cursor, "bubble wait", "waiting", group.name,
                                      group.gpus[0]))
        if end > start:
            tp = min(info.comm_s, end - start) if isinstance(info, Fused) else 0.0
            label, last = _path_label(info), self.out[-1] if self.out else None
            if (last is not None and last.start_s == end and tp == 0 == last.tp_comm_s
                    and (last.kind, last.label, last.group) == (kind, label, group.name)):
                # One collective reached twice (its tail waited for, then its start): one
                # stretch.
                self.out[-1] = PathEntry(start, last.end_s, kind, label, group.name,
                                         group.gpus[0])
            else:
                self.out.append(PathEntry(start, end, kind, label, group.name,
                                          group.gpus[0], tp))
        self.cursor = start


def _path_label(info: Any) -> str:
    """A critical-path entry's label from what a segment recorded (built only here)."""
    if isinstance(info, (Fused, Recv)):
        return info.label
    return str(info)
