"""Tracing: what happened when, recorded as spans and counters, exported for Perfetto.

A :class:`Tracer` collects *spans* (a named interval on a track: a GPU stream, a
collective) and *counters* (a value over time on a track: a link's utilisation).  Tracks
are grouped by *process* (e.g. ``"n0.gpu3"``) and named by *thread* (e.g. ``"compute"``),
which is how the Chrome trace event format and Perfetto lay them out.  A disabled tracer
records nothing and costs one attribute check per call.  A process recorded once for
several (a rank group for its GPUs) may be written as the several (``expand``), and a copy
that ran one thread's spans faster than the process and waited out the rest (a GPU beside
a straggler in lockstep) as it ran them (:class:`Paced`).

The exported object carries ``otherData`` (the trace-event format's free metadata field):
``{"generator": "distsim", ...}`` plus whatever the simulation put in
:attr:`Tracer.metadata`, so a reader can tell distsim's own traces from a profiler's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distsim_gpu.simcore.intervals import paced_end

__all__ = ["GENERATOR", "Counter", "Paced", "Span", "Tracer"]

#: ``otherData.generator`` of every exported trace: how a reader recognises distsim's.
GENERATOR = "distsim"


@dataclass(frozen=True, slots=True)
class Span:
    """A named interval ``[start_s, end_s]`` on track ``(process, thread)``."""

    process: str
    thread: str
    name: str
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counter:
    """Value ``value`` of counter ``name`` on ``process`` from ``time_s`` on."""

    process: str
    name: str
    time_s: float
    value: float


@dataclass(frozen=True, slots=True)
class Paced:
    """Copies of expanded processes that ran the spans of ``thread`` faster than the
    process did: copy ``p`` ran ``shares[p]`` of each span's time and waited out the
    rest, written right after it as a span on ``wait_thread`` named and with the
    arguments ``waits[p]`` gives.  A copy not in ``shares`` ran them as recorded."""

    shares: Mapping[str, float]
    waits: Mapping[str, tuple[str, Mapping[str, Any]]]
    thread: str
    wait_thread: str


class Tracer:
    """Collects spans and counters; ``to_chrome_trace`` renders them (times in µs).

    ``metadata`` (JSON-ready values) is exported under ``otherData``, next to the
    ``generator`` marker.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.spans: list[Span] = []
        self.counters: list[Counter] = []
        self._last_value: dict[tuple[str, str], float] = {}
        self.metadata: dict[str, Any] = {}

    def span(self, process: str, thread: str, name: str, start_s: float, end_s: float,
             **args: Any) -> None:
        if self.enabled:
            self.spans.append(Span(process, thread, name, start_s, end_s, args))

    def counter(self, process: str, name: str, time_s: float, value: float) -> None:
        """Record a counter's value from ``time_s`` on; a repeat of its last value is
        dropped, since it would draw nothing new (flow solves repeat loads often)."""
        if self.enabled and self._last_value.get((process, name)) != value:
            self._last_value[(process, name)] = value
            self.counters.append(Counter(process, name, time_s, value))

    def to_chrome_trace(self, expand: Mapping[str, Sequence[str]] | None = None,
                        paced: Paced | None = None) -> dict[str, Any]:
        """The trace as a Chrome trace-event JSON object (``traceEvents``, µs times).

        ``expand`` writes a process as several: the spans of process ``p`` once on each
        process of ``expand[p]`` (a track that stands for many — a rank group for its
        GPUs — shown as the many), those processes first and in the order given.  A
        span argument that names an expanded process follows the copy: on the ``i``-th
        copy it names the ``i``-th process of that one's expansion (or its last, when
        it has fewer).  ``paced``: copies that ran a thread's spans faster and waited
        (:class:`Paced`); each such span is written shortened, then the wait.
        """
        expand = expand or {}
        pids: dict[str, int] = {}
        tids: dict[tuple[str, str], int] = {}
        events: list[dict[str, Any]] = []

        def pid_of(process: str) -> int:
            if process not in pids:
                pids[process] = len(pids) + 1
                events.append({"ph": "M", "name": "process_name", "pid": pids[process],
                               "tid": 0, "args": {"name": process}})
                events.append({"ph": "M", "name": "process_sort_index", "pid": pids[process],
                               "tid": 0, "args": {"sort_index": pids[process]}})
            return pids[process]

        def tid_of(process: str, thread: str) -> int:
            key = (process, thread)
            if key not in tids:
                tids[key] = len(tids) + 1
                events.append({"ph": "M", "name": "thread_name", "pid": pid_of(process),
                               "tid": tids[key], "args": {"name": thread}})
            return tids[key]

        for targets in expand.values():
            for target in targets:
                pid_of(target)
        for s in self.spans:
            targets = expand.get(s.process) or (s.process,)
            for i, target in enumerate(targets):
                args = _follow(s.args, expand, i) if expand and s.args else s.args
                share = 1.0 if paced is None or s.thread != paced.thread \
                    else paced.shares.get(target, 1.0)
                end = s.end_s if share == 1.0 else paced_end(s.start_s, s.end_s, share)
                events.append({"ph": "X", "name": s.name, "pid": pid_of(target),
                               "tid": tid_of(target, s.thread), "ts": s.start_s * 1e6,
                               "dur": (end - s.start_s) * 1e6, "args": args})
                if paced is not None and end < s.end_s:
                    name, wait_args = paced.waits[target]
                    events.append({"ph": "X", "name": name, "pid": pid_of(target),
                                   "tid": tid_of(target, paced.wait_thread), "ts": end * 1e6,
                                   "dur": (s.end_s - end) * 1e6, "args": dict(wait_args)})
        for c in self.counters:
            events.append({"ph": "C", "name": c.name, "pid": pid_of(c.process), "tid": 0,
                           "ts": c.time_s * 1e6, "args": {c.name: c.value}})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"generator": GENERATOR, **self.metadata}}

    def to_json(self) -> str:
        return json.dumps(self.to_chrome_trace(), separators=(",", ":"))


def _follow(args: dict[str, Any], expand: Mapping[str, Sequence[str]],
            i: int) -> dict[str, Any]:
    """``args`` with each value naming an expanded process replaced by its ``i``-th copy."""
    out = args
    for key, value in args.items():
        if isinstance(value, str) and value in expand and expand[value]:
            if out is args:
                out = dict(args)
            copies = expand[value]
            out[key] = copies[min(i, len(copies) - 1)]
    return out
