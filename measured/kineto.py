"""Read a PyTorch-profiler (Kineto) Chrome trace: one rank's events -> :class:`RankTrace`.

A Kineto trace is one JSON object per rank: ``traceEvents`` (complete events, phase ``X``,
with ``ts``/``dur`` in microseconds), ``distributedInfo`` (rank, world size) and
``deviceProperties`` (the GPUs).  Of the events distsim keeps what a training-step
breakdown needs:

* the CPU annotations ``ProfilerStep#N`` (one per profiled training step),
* the GPU events: ``kernel`` (compute or NCCL), ``gpu_memcpy`` and ``gpu_memset``,
* the launch time of each GPU event (its ``cuda_runtime`` launch with the same
  ``correlation`` id), so a kernel can be attributed to the step that launched it,
* the CPU side as :class:`~distsim_gpu.measured.records.CpuEvent` records: operators
  (``cpu_op``), user annotations (``record_function`` scopes such as ``nccl:all_reduce``
  or ``## backward ##``), Python functions and CUDA runtime calls, with their thread, the
  launch ``correlation`` id, the autograd ``Sequence number`` / ``Fwd thread id`` that tie
  a backward op to its forward, and, for user annotations, the recorded input shapes and
  types (``record_shapes``: how a ``nccl:<op>`` scope tells its message size) — what
  replay and cost extraction need to know who launched what, who waited, and how large a
  message was.

NCCL kernels (name contains ``nccl``) get their collective kind from the kernel name
(``ncclKernel_AllReduce_RING_LL_Sum_float`` → ``all_reduce``) and, where the kernel args
carry them (PyTorch ≥ 2.1 with NCCL metadata: ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Ranks``), the message size and
the process group.

:class:`KinetoReader` takes the events one at a time, as the streaming loader
(:mod:`distsim_gpu.measured.traces`) decodes them, and reduces each at once to a compact
record, so memory holds the records, never a decoded document; :func:`parse_trace` does
the same for a document already in memory.  Files, archives and the choice between this
format and distsim's own are the loader's business, not this module's.

What cannot be used is not fatal: an event with a non-numeric ``ts``/``dur``, a missing
name or an unknown phase is skipped and recorded in :attr:`RankTrace.skipped`; so is an
NCCL kernel's ``dtype`` of no known width (the kernel is kept, its size taken from its
operator's inputs where it has one, else unknown), rather than passed over.  Only a
document that is unusable as a whole (not an object, no ``traceEvents`` list) raises
:class:`~distsim_gpu.simcore.errors.ParseError` naming the source.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import re
import sys
from pathlib import PurePosixPath
from typing import Any

from distsim_gpu.measured.records import (
    CpuEvent,
    GpuEvent,
    ProfilerStep,
    RankTrace,
    collective_kind,
    dtype_bytes,
)
from distsim_gpu.simcore.errors import ParseError

__all__ = ["KinetoReader", "check_document", "parse_trace"]

_US = 1e-6  # Kineto timestamps and durations are microseconds.

# Every phase of the Chrome trace-event format; only ``X`` carries what distsim reads.
_KNOWN_PHASES = frozenset("BEXiIPCbneSTpFstfMNODRc()")

_GPU_CATEGORIES = {"kernel": None, "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "cuda_runtime",
                             "cuda_driver", "cpu_instant_event"})

# Step numbers and ids of up to 18 ASCII digits (any more is not a counter: 5,000 digits
# would pass Python's int-conversion limit); numbers of 10^300 and more are not readings.
_STEP_NAME = re.compile(r"^ProfilerStep#([0-9]{1,18})$")
_DIGITS = re.compile(r"-?[0-9]{1,18}")
_HUGE = 10**300
# More ranks than any job has run with (the largest, 10^5 GPUs); a world_size past it is a
# corrupt file, and would have distsim build a cluster to match.
MAX_WORLD_SIZE = 2**20
_RANK_IN_NAME = re.compile(r"(?:worker|rank)[-_]?(\d+)", re.IGNORECASE)
_MAX_SKIP_NOTES = 20


def _dims(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    dims: list[tuple[int, ...]] = []
    for shape in value:
        if isinstance(shape, list) and all(_int(v) is not None for v in shape):
            dims.append(tuple(int(v) for v in shape))
        else:
            dims.append(())  # a non-tensor input (TensorList, scalar): no shape
    return tuple(dims)


def _types(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v if isinstance(v, str) else "" for v in value)


def _number(value: Any) -> float | None:
    kind = type(value)  # exact types: bool is not a number here
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int and abs(value) < _HUGE:
        return float(value)
    return None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    return None


def _ranks(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return tuple(int(v) for v in value)
    return None


class _Skips:
    """Collects what was skipped: the first few in detail, then a count."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.more = 0

    def add(self, note: str) -> None:
        if len(self.notes) < _MAX_SKIP_NOTES:
            self.notes.append(note)
        else:
            self.more += 1

    def result(self) -> tuple[str, ...]:
        if self.more:
            return (*self.notes, f"... and {self.more} more skipped events")
        return tuple(self.notes)


def _nccl_fields(name: str, args: dict[str, Any]) -> dict[str, Any]:
    coll_arg = args.get("Collective name")
    fields: dict[str, Any] = {
        "collective": collective_kind(name, coll_arg if isinstance(coll_arg, str) else None),
        "in_nelems": _int(args.get("In msg nelems")),
        "out_nelems": _int(args.get("Out msg nelems")),
        "group_size": _int(args.get("Group size")),
        "group_ranks": _ranks(args.get("Process Group Ranks")),
    }
    dtype = args.get("dtype")
    fields["dtype"] = dtype if isinstance(dtype, str) else None
    nelems = [n for n in (fields["in_nelems"], fields["out_nelems"]) if n is not None]
    width = dtype_bytes(fields["dtype"]) if fields["dtype"] else None
    fields["message_bytes"] = max(nelems) * width if nelems and width else None
    return fields


class KinetoReader:
    """Reduces one Kineto document's events, fed one at a time, to a :class:`RankTrace`.

    Feed every element of ``traceEvents`` to :meth:`add` in order, then hand the rest of
    the document (its other top-level members) to :meth:`finish`.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.skips = _Skips()
        self.steps: list[ProfilerStep] = []
        self.cpu_events: list[CpuEvent] = []
        self.launches: dict[int, float] = {}
        # Per GPU event: name, kind, ts, dur, stream, device, correlation, NCCL fields —
        # a tuple until finish(), when the launch times are all known.
        self.gpu_events: list[tuple[Any, ...]] = []

    def add(self, index: int, event: Any) -> None:
        """Keep what one element of ``traceEvents`` holds (see the module docstring)."""
        # The hot path of an import: one call per event, so checks are inline.
        if type(event) is not dict:
            self.skips.add(f"traceEvents[{index}]: not an object")
            return
        phase = event.get("ph")
        if phase != "X":
            if not isinstance(phase, str) or phase not in _KNOWN_PHASES:
                self.skips.add(f"traceEvents[{index}]: unknown phase {phase!r}")
            return
        name = event.get("name")
        ts = _number(event.get("ts"))
        dur = _number(event.get("dur"))
        if type(name) is not str or ts is None or dur is None or dur < 0:
            self.skips.add(_bad_event_note(index, event, ts, dur))
            return
        category = event.get("cat")
        if type(category) is not str:  # (a list or object here is not a category)
            category = None
        args = event.get("args")
        if type(args) is not dict:
            args = {}
        name = sys.intern(name)  # repeated kernel and operator names share one string
        if category in _GPU_CATEGORIES:
            kind = _GPU_CATEGORIES[category]
            nccl: dict[str, Any] | None = None
            if "nccl" in name.lower():
                kind = "communication"
                nccl = _nccl_fields(name, args)
                if nccl["dtype"] and dtype_bytes(nccl["dtype"]) is None:
                    self.skips.add(f"traceEvents[{index}]: NCCL kernel {name[:60]!r} has "
                                   f"dtype {nccl['dtype'][:30]!r}, of no width known here "
                                   "(float, bfloat16, half, float8_e4m3fn, int8, ...): its "
                                   "bytes come from its operator's inputs, if it has one")
            self.gpu_events.append((name, kind or "compute", ts, dur, _int(args.get("stream")),
                                    _int(args.get("device")), _int(args.get("correlation")),
                                    nccl))
            return
        corr = None
        if category == "cuda_runtime" or category == "cuda_driver":
            corr = _int(args.get("correlation"))
            if corr is not None:
                self.launches[corr] = ts * _US
        elif category in ("user_annotation", "cpu_instant_event", "python_function", None):
            match = _STEP_NAME.match(name)
            if match:
                self.steps.append(ProfilerStep(int(match.group(1)), ts * _US, dur * _US))
                return
        if category in _CPU_CATEGORIES:
            self.cpu_events.append(_cpu_event(name, category, event.get("tid"), ts, dur, corr,
                                              args))

    def finish(self, data: Any) -> RankTrace:
        """The record, with rank, world size and GPU model from the document's other
        members (``distributedInfo``, ``deviceProperties``).  Raises :class:`ParseError`
        when ``data`` is not a Kineto document (see :func:`check_document`)."""
        check_document(data, self.source)
        gpu_events: list[GpuEvent] = []
        for name, kind, ts, dur, stream, device, corr, nccl in self.gpu_events:
            gpu_events.append(GpuEvent(
                name=name, kind=kind, start_s=ts * _US, duration_s=dur * _US,
                stream=stream, device=device,
                launch_s=self.launches.get(corr) if corr is not None else None,
                correlation=corr, **(nccl or {})))
        gpu_events.sort(key=lambda k: k.start_s)
        self.steps.sort(key=lambda s: s.start_s)
        self.cpu_events.sort(key=lambda e: e.start_s)
        gpu_events = _with_comm_annotations(gpu_events, self.cpu_events)
        rank, world_size, gpu_model = _identity(data, self.source)
        return RankTrace(source=self.source, rank=rank, world_size=world_size,
                         gpu_model=gpu_model, steps=tuple(self.steps),
                         gpu_events=tuple(gpu_events), skipped=self.skips.result(),
                         cpu_events=tuple(self.cpu_events))


def _bad_event_note(index: int, event: dict[str, Any], ts: float | None,
                    dur: float | None) -> str:
    """Why a complete event cannot be used, for :attr:`RankTrace.skipped`."""
    name = event.get("name")
    problems = []
    if not isinstance(name, str):
        problems.append("no name")
    if ts is None:
        problems.append(f"ts is not a number ({event.get('ts')!r})")
    if dur is None or dur < 0:
        problems.append(f"dur is not a non-negative number ({event.get('dur')!r})")
    label = name if isinstance(name, str) else "?"
    return f"traceEvents[{index}] {label!r}: " + ", ".join(problems)


def _cpu_event(name: str, category: str, tid: Any, ts: float, dur: float, corr: int | None,
               args: dict[str, Any]) -> CpuEvent:
    # Shapes matter only for the annotations that carry a message (nccl:<op>);
    # decoding every operator's would cost a third of the import.
    shaped = category == "user_annotation"
    return CpuEvent(
        name=name, category=category, tid=tid if isinstance(tid, int | str) else None,
        start_s=ts * _US, duration_s=dur * _US, correlation=corr,
        sequence=_int(args.get("Sequence number")),
        fwd_tid=_int(args.get("Fwd thread id")),
        input_dims=_dims(args.get("Input Dims")) if shaped else (),
        input_types=_types(args.get("Input type")) if shaped else ())


def _identity(data: dict[str, Any], source: str) -> tuple[int | None, int | None, str | None]:
    """Rank, world size and GPU model: ``distributedInfo`` and ``deviceProperties``; the
    rank, where the profiler did not record it, from the file name (``worker3``,
    ``rank-1``)."""
    dist = data.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    rank = _int(dist.get("rank"))
    if rank is None:
        match = _RANK_IN_NAME.search(PurePosixPath(source.split(":")[-1]).name)
        rank = int(match.group(1)) if match else None
    gpu_model = None
    devices = data.get("deviceProperties")
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        model = devices[0].get("name")
        gpu_model = model if isinstance(model, str) else None
    world_size = _int(dist.get("world_size"))
    for name, value in (("rank", rank), ("world_size", world_size)):
        if value is not None and not 0 <= value < MAX_WORLD_SIZE + (name == "world_size"):
            raise ParseError(f"{name} {value:.6g} is not a rank count distsim reads",
                             source=source, key=f"distributedInfo.{name}",
                             hint=f"at most {MAX_WORLD_SIZE:,} ranks")
    return rank, world_size, gpu_model


def check_document(data: Any, source: str) -> None:
    """Raise :class:`ParseError` unless ``data`` is an object with a ``traceEvents`` list."""
    if not isinstance(data, dict):
        raise ParseError(f"expected a JSON object, found a {type(data).__name__}",
                         source=source, hint="a Kineto trace is {\"traceEvents\": [...], ...}")
    events = data.get("traceEvents")
    if not isinstance(events, list):
        found = "missing" if events is None else f"a {type(events).__name__}"
        raise ParseError(f"no 'traceEvents' list ({found})", source=source, key="traceEvents",
                         hint="expected a PyTorch profiler (Kineto) Chrome trace")


def parse_trace(data: Any, source: str) -> RankTrace:
    """Reduce one decoded Kineto JSON document to a :class:`RankTrace`.

    ``source`` names it in errors and in the result.  Raises :class:`ParseError` when
    ``data`` is not an object with a ``traceEvents`` list.
    """
    check_document(data, source)
    reader = KinetoReader(source)
    for index, event in enumerate(data["traceEvents"]):
        reader.add(index, event)
    return reader.finish(data)


def _with_comm_annotations(gpu_events: list[GpuEvent],
                           cpu_events: list[CpuEvent]) -> list[GpuEvent]:
    """Attach to each NCCL kernel the ``nccl:<op>`` annotation its launch happened in.

    PyTorch wraps every c10d call in a ``record_function("nccl:<op>")`` scope whose
    recorded input is the message; older traces carry the size nowhere else.
    """
    scopes: dict[Any, list[CpuEvent]] = {}
    launches: dict[int, CpuEvent] = {}
    for event in cpu_events:
        if event.category == "user_annotation" and event.name.startswith("nccl:"):
            scopes.setdefault(event.tid, []).append(event)
        elif event.correlation is not None:
            launches[event.correlation] = event
    if not scopes:
        return gpu_events
    starts = {tid: [e.start_s for e in events] for tid, events in scopes.items()}
    result = []
    for kernel in gpu_events:
        launch = launches.get(kernel.correlation) if kernel.correlation is not None else None
        if kernel.kind != "communication" or launch is None or launch.tid not in scopes:
            result.append(kernel)
            continue
        events = scopes[launch.tid]
        index = bisect.bisect_right(starts[launch.tid], launch.start_s) - 1
        scope = events[index] if index >= 0 else None
        if scope is None or scope.end_s < launch.start_s:
            result.append(kernel)
            continue
        size = kernel.message_bytes
        if size is None:
            size = scope.input_bytes(0)
        result.append(dataclasses.replace(kernel, comm_op=scope.name.removeprefix("nccl:"),
                                          message_bytes=size))
    return result
