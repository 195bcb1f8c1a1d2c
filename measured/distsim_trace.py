"""Read distsim's own ``trace.json`` back: one :class:`~distsim_gpu.measured.records.RankTrace`
per GPU.

``distsim run --out`` writes a Chrome trace (:mod:`simcore.trace`) whose ``otherData``
says ``"generator": "distsim"`` and, under ``otherData.distsim``, what the run was: the
shape keys of a cost table (micro-batch, sequence length, hidden size, tensor
parallelism, sequence parallelism, GPU), the iteration time and the *rank groups*.  A
process of the trace is a rank group — the ``tp`` GPUs of one pipeline stage of one
data-parallel replica, which run the same kernels in lockstep — so its spans are every
member GPU's.  This module turns such a trace into the records the Kineto reader
produces (:mod:`distsim_gpu.measured.records`), so ``distsim trace summary`` and everything
built on :func:`distsim_gpu.measured.traces.load_traces` read a simulated run as they read
a measured one:

* one :class:`RankTrace` per GPU: ``rank`` its global index, ``world_size`` the cluster's
  GPU count, ``gpu_model`` the simulated GPU, one ``ProfilerStep`` ``[0, iteration]``;
* its group's spans as GPU events, one stream per track: ``compute`` spans as kind
  ``compute``, the ``tp comm``/``dp comm``/``ep comm``/``pp send`` tracks as
  ``communication`` with the collective kind the span's args name; a pipeline send is a
  ``recv`` on the receiving group too (the transfer keeps both busy, as the simulator
  counts it);
* a member faster than its group's pace (``paces``: its share of the group's compute, the
  straggler's being 1) runs each ``compute`` span for its share of it and waits out the
  rest right after, in the group's next collective: a ``communication`` event named
  ``wait for <the straggler>`` with no collective kind (no kernel was launched for it),
  as the run's per-GPU breakdown counts it.  A per-GPU trace (``distsim run --out``)
  holds those waits as spans already, marked by a ``waits_for`` argument.

The raw spans, with their args (layer kind, pass), stay available as
:class:`DistsimTrace` for cost extraction (:mod:`distsim_gpu.workloads.traces.measured_costs`).
:class:`DistsimReader` takes the events one at a time, as the streaming loader
(:mod:`distsim_gpu.measured.traces`) decodes them; the loader tells this format from
Kineto's by :func:`is_distsim_trace`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from distsim_gpu.measured.records import GpuEvent, ProfilerStep, RankTrace
from distsim_gpu.simcore.config import check_number
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.intervals import paced_end
from distsim_gpu.simcore.trace import GENERATOR

__all__ = [
    "COMPUTE_TRACK",
    "WAIT_ARG",
    "DistsimReader",
    "DistsimTrace",
    "GroupInfo",
    "TraceSpan",
    "is_distsim_trace",
    "pace_setter",
    "parse_distsim_trace",
    "wait_name",
]

_US = 1e-6  # Chrome trace times are microseconds.
COMPUTE_TRACK = "compute"
_COMM_TRACKS = frozenset({"tp comm", "dp comm", "ep comm", "pp send"})
#: The argument that marks a span as a GPU waiting for a slower peer (not a kernel).
WAIT_ARG = "waits_for"
# The simulator's collective names as the Kineto reader spells collective kinds.
_KINDS = {"alltoall": "all_to_all"}


@dataclass(frozen=True, slots=True)
class TraceSpan:
    """One complete event of a distsim trace (seconds): track ``(process, thread)``."""

    process: str
    thread: str
    name: str
    start_s: float
    end_s: float
    args: dict[str, Any]

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A rank group: the process ``name`` of its spans and the GPUs it stands for."""

    name: str
    stage: int
    replica: int
    gpus: tuple[str, ...]
    ranks: tuple[int, ...]
    slowdown: float = 1.0
    # Each GPU's share of the group's compute (empty: all 1, the group's pace).
    paces: tuple[float, ...] = ()

    @property
    def straggler(self) -> str:
        """The GPU that sets the group's pace (its first slowest)."""
        return pace_setter(self.gpus, self.paces)


def pace_setter(gpus: Sequence[str], paces: Sequence[float]) -> str:
    """Of a group's ``gpus`` with their ``paces`` (shares of its compute; empty: all 1),
    the GPU that sets its pace: the first slowest, the one its faster members wait for."""
    return gpus[list(paces).index(max(paces))] if paces else gpus[0]


def wait_name(straggler: str) -> str:
    """The name of a faster member's wait for ``straggler``, wherever it is drawn."""
    return f"wait for {straggler}"


@dataclass(frozen=True, slots=True)
class DistsimTrace:
    """A decoded distsim trace: its run metadata (``otherData.distsim``), rank groups and
    spans (in file order)."""

    source: str
    metadata: dict[str, Any]
    groups: tuple[GroupInfo, ...]
    spans: tuple[TraceSpan, ...]

    @property
    def iteration_time_s(self) -> float:
        """The simulated iteration's length (the metadata's, else the last span's end)."""
        value = self.metadata.get("iteration_time_s")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return max((s.end_s for s in self.spans), default=0.0)

    def rank_traces(self) -> list[RankTrace]:
        """One :class:`RankTrace` per GPU, in rank order (see the module docstring)."""
        world = self.metadata.get("world_size")
        world_size = world if isinstance(world, int) and not isinstance(world, bool) else None
        gpu = self.metadata.get("gpu")
        gpu_model = gpu if isinstance(gpu, str) else None
        steps = (ProfilerStep(0, 0.0, self.iteration_time_s),)
        streams: dict[tuple[str, str], int] = {}
        by_group: dict[str, list[GpuEvent]] = {g.name: [] for g in self.groups}
        for span in self.spans:
            if span.process not in by_group:
                continue  # links, critical path: not a GPU's
            if span.thread == COMPUTE_TRACK:
                kind = "compute"
            elif span.thread in _COMM_TRACKS:
                kind = "communication"
            else:
                continue
            stream = streams.setdefault((span.process, span.thread), len(streams) + 1)
            collective = span.args.get("collective")
            collective = _KINDS.get(collective, collective) if isinstance(collective, str) \
                else None
            if kind == "communication" and collective is None and WAIT_ARG not in span.args:
                collective = "other"
            by_group[span.process].append(GpuEvent(
                name=span.name, kind=kind, start_s=span.start_s,
                duration_s=span.duration_s, stream=stream, collective=collective))
            peer = span.args.get("to")
            if span.thread == "pp send" and isinstance(peer, str) and peer in by_group:
                recv = streams.setdefault((peer, "pp recv"), len(streams) + 1)
                by_group[peer].append(GpuEvent(
                    name=span.name, kind="communication", start_s=span.start_s,
                    duration_s=span.duration_s, stream=recv, collective="recv"))
        traces: list[RankTrace] = []
        wait_stream = len(streams) + 1
        for group in self.groups:
            events = tuple(sorted(by_group[group.name], key=lambda k: k.start_s))
            for gpu_name, rank, share in zip(group.gpus, group.ranks,
                                             group.paces or (1.0,) * len(group.gpus)):
                traces.append(RankTrace(
                    source=f"{self.source}:{gpu_name}", rank=rank, world_size=world_size,
                    gpu_model=gpu_model, steps=steps, gpu_events=events if share == 1.0
                    else _paced(events, share, wait_name(group.straggler), wait_stream)))
        traces.sort(key=lambda t: t.rank if t.rank is not None else -1)
        return traces


def _paced(events: tuple[GpuEvent, ...], share: float, wait: str,
           stream: int) -> tuple[GpuEvent, ...]:
    """``events`` as a GPU ran them that takes ``share`` of each compute event's time and
    waits out the rest (an event ``wait`` on ``stream``) right after."""
    out: list[GpuEvent] = []
    for event in events:
        if event.kind != "compute":
            out.append(event)
            continue
        end = event.start_s + event.duration_s
        mid = paced_end(event.start_s, end, share)
        out.append(replace(event, duration_s=mid - event.start_s))
        if end > mid:
            out.append(GpuEvent(name=wait, kind="communication", start_s=mid,
                                duration_s=end - mid, stream=stream))
    return tuple(sorted(out, key=lambda k: k.start_s))


def is_distsim_trace(data: Any) -> bool:
    """Whether a decoded trace document was written by distsim (``otherData.generator``)."""
    if not isinstance(data, dict):
        return False
    other = data.get("otherData")
    return isinstance(other, dict) and other.get("generator") == GENERATOR


def _group(name: str, raw: Any, source: str) -> GroupInfo:
    key = f"otherData.distsim.groups.{name}"
    if not isinstance(raw, dict):
        raise ParseError("a rank group must be an object", source=source, key=key)
    gpus, ranks = raw.get("gpus"), raw.get("ranks")
    if (not isinstance(gpus, list) or not isinstance(ranks, list) or len(gpus) != len(ranks)
            or not gpus or not all(isinstance(g, str) for g in gpus)
            or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks)):
        raise ParseError("needs 'gpus' (names) and 'ranks' (integers) of equal length",
                         source=source, key=key)
    slowdown = check_number(raw.get("slowdown", 1.0), key=f"{key}.slowdown", above=True,
                            source=source, error=ParseError)
    paces = raw.get("paces", [])
    if not isinstance(paces, list) or (paces and len(paces) != len(gpus)):
        raise ParseError(f"'paces' must list one share per GPU ({len(gpus)}), got {paces!r}",
                         source=source, key=f"{key}.paces")
    shares = tuple(check_number(p, key=f"{key}.paces", above=True, maximum=1.0, source=source,
                                error=ParseError) for p in paces)
    stage, replica = raw.get("stage", 0), raw.get("replica", 0)
    return GroupInfo(name, stage if isinstance(stage, int) else 0,
                     replica if isinstance(replica, int) else 0,
                     tuple(gpus), tuple(ranks), slowdown, shares)


def parse_distsim_trace(data: Any, source: str) -> DistsimTrace:
    """Decode a distsim trace document (see :func:`is_distsim_trace`).

    Raises :class:`ParseError` when the run metadata (``otherData.distsim`` with its rank
    groups) is missing or malformed; events that are not complete spans with numeric
    times are ignored (Perfetto ignores them too).
    """
    if not is_distsim_trace(data):
        raise ParseError("not a distsim trace (no otherData.generator = \"distsim\")",
                         source=source)
    meta = data["otherData"].get("distsim")
    if isinstance(meta, dict) and isinstance(meta.get("jobs"), int):
        raise ParseError(f"a trace of {meta['jobs']} jobs sharing a cluster: their rank "
                         "groups are not told apart per GPU", source=source,
                         key="otherData.distsim.jobs",
                         hint="trace each job from a scenario of its own")
    if not isinstance(meta, dict) or not isinstance(meta.get("groups"), dict):
        raise ParseError("a distsim trace without run metadata (otherData.distsim.groups)",
                         source=source, key="otherData.distsim",
                         hint="write the trace with 'distsim run --out DIR' of this version")
    groups = tuple(_group(str(name), raw, source) for name, raw in meta["groups"].items())
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise ParseError("no 'traceEvents' list", source=source, key="traceEvents")
    return DistsimTrace(source, meta, groups, _spans(events))


def _spans(events: list[Any]) -> tuple[TraceSpan, ...]:
    """The complete events with numeric times, on the tracks the metadata events name
    (a metadata event may come after the spans it names)."""
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    complete: list[dict[str, Any]] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        phase = event.get("ph")
        if phase == "M":
            args = event.get("args")
            label = args.get("name") if isinstance(args, dict) else None
            if isinstance(label, str):
                if event.get("name") == "process_name":
                    processes[event.get("pid")] = label
                elif event.get("name") == "thread_name":
                    threads[(event.get("pid"), event.get("tid"))] = label
        elif phase == "X":
            complete.append(event)
    spans: list[TraceSpan] = []
    for event in complete:
        ts, dur, name = event.get("ts"), event.get("dur"), event.get("name")
        if (isinstance(ts, bool) or isinstance(dur, bool) or not isinstance(ts, int | float)
                or not isinstance(dur, int | float) or not isinstance(name, str)):
            continue
        pid = event.get("pid")
        args = event.get("args")
        start = ts * _US
        spans.append(TraceSpan(processes.get(pid, str(pid)),
                               threads.get((pid, event.get("tid")), str(event.get("tid"))),
                               name, start, start + dur * _US,
                               args if isinstance(args, dict) else {}))
    return tuple(spans)


class DistsimReader:
    """Keeps, of a document's events fed one at a time, those a distsim trace is made of.

    Whether the document is distsim's is known only at its end (``otherData`` follows the
    events), so the streaming loader feeds every event to this reader and to the Kineto
    one alike.  This one keeps the complete spans without a category and the metadata
    events that name processes and threads: all of a distsim trace, a handful of events
    of a Kineto trace.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.events: list[dict[str, Any]] = []

    def add(self, index: int, event: Any) -> None:
        """Keep ``event`` if a distsim trace could hold it (``index`` is unused: the
        signature is the readers' common one)."""
        if type(event) is dict and "cat" not in event and event.get("ph") in ("X", "M"):
            self.events.append(event)

    def finish(self, data: Any) -> DistsimTrace:
        """The decoded trace: ``data``'s other members with the kept events (raises
        :class:`ParseError` as :func:`parse_distsim_trace` does)."""
        if not isinstance(data, dict):
            return parse_distsim_trace(data, self.source)
        return parse_distsim_trace({**data, "traceEvents": self.events}, self.source)
