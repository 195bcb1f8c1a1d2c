"""Import PyTorch-profiler (Kineto) Chrome-trace JSON files, one :class:`RankTrace` per rank.

A Kineto trace is one JSON object per rank: ``traceEvents`` (complete events, phase ``X``,
with ``ts``/``dur`` in microseconds), ``distributedInfo`` (rank, world size) and
``deviceProperties`` (the GPUs).  Of the events distsim keeps what a training-step
breakdown needs:

* the CPU annotations ``ProfilerStep#N`` (one per profiled training step),
* the GPU events: ``kernel`` (compute or NCCL), ``gpu_memcpy`` and ``gpu_memset``,
* the launch time of each GPU event (its ``cuda_runtime`` launch with the same
  ``correlation`` id), so a kernel can be attributed to the step that launched it,
* the CPU side as :class:`CpuEvent` records: operators (``cpu_op``), user annotations
  (``record_function`` scopes such as ``nccl:all_reduce`` or ``## backward ##``), Python
  functions and CUDA runtime calls, with their thread, the launch ``correlation`` id, the
  autograd ``Sequence number`` / ``Fwd thread id`` that tie a backward op to its forward,
  and, for user annotations, the recorded input shapes and types (``record_shapes``:
  how a ``nccl:<op>`` scope tells its message size) — what replay and cost
  extraction need to know who launched what, who waited, and how large a message was.

NCCL kernels (name contains ``nccl``) get their collective kind from the kernel name
(``ncclKernel_AllReduce_RING_LL_Sum_float`` → ``all_reduce``) and, where the kernel args
carry them (PyTorch ≥ 2.1 with NCCL metadata: ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Ranks``), the message size and
the process group.

Inputs may be a ``.json`` or ``.json.gz`` file, a ``.tar.gz`` holding one JSON per rank
(read member by member, never extracted to disk) or a directory of per-rank files.  Each
file is streamed (:mod:`measured.jsonstream`): events are decoded one at a time from the
decompressing file object and reduced at once to compact records, so memory holds the
records, never a decoded document, and one file is read at a time.

What cannot be used is not fatal: an event with a non-numeric ``ts``/``dur``, a missing
name or an unknown phase is skipped and recorded in :attr:`RankTrace.skipped`.  Only a file
that is unusable as a whole (not JSON, truncated, empty, no ``traceEvents`` list) raises
:class:`~simcore.errors.ParseError` naming the file (and tar member).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import re
import sys
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from distsim_gpu.measured.jsonstream import scan_document
from distsim_gpu.simcore.errors import ParseError

__all__ = [
    "DTYPE_BYTES",
    "CpuEvent",
    "Kernel",
    "ProfilerStep",
    "RankTrace",
    "collective_kind",
    "dtype_bytes",
    "load_trace_file",
    "load_traces",
    "parse_trace",
    "read_trace_file",
]

_US = 1e-6  # Kineto timestamps and durations are microseconds.

#: Bytes per element for the ``dtype`` names PyTorch writes into NCCL kernel args.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}

# Every phase of the Chrome trace-event format; only ``X`` carries what distsim reads.
_KNOWN_PHASES = frozenset("BEXiIPCbneSTpFstfMNODRc()")

_GPU_CATEGORIES = {"kernel": None, "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "cuda_runtime",
                             "cuda_driver", "cpu_instant_event"})

# Collective words as NCCL kernel names spell them, longest first so ``AllReduce`` is not
# read as ``Reduce``.
_COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "sendrecv"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
)

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"(?:worker|rank)[-_]?(\d+)", re.IGNORECASE)
_MAX_SKIP_NOTES = 20


@dataclass(frozen=True, slots=True)
class ProfilerStep:
    """One ``ProfilerStep#N`` CPU annotation: step ``number``, start and duration in seconds."""

    number: int
    start_s: float
    duration_s: float

    @property
    def end_s(self) -> float:
        """End of the step window in seconds."""
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU event: a kernel, memcpy or memset (times in seconds, trace clock).

    ``kind`` is ``"communication"`` (NCCL), ``"memcpy"``, ``"memset"`` or ``"compute"``.
    For NCCL kernels ``collective`` is the collective kind (``"all_reduce"``,
    ``"sendrecv"``, …) and, where the kernel args say, ``in_nelems``/``out_nelems``,
    ``dtype``, ``message_bytes`` (the larger of input and output element count times the
    element size, nccl-tests' "size"; ``None`` when the dtype is not recorded),
    ``group_size`` and ``group_ranks``.  ``launch_s`` is when the CPU launched it, where
    the trace links the two by ``correlation`` (kept, to find the launching CPU call).
    ``comm_op`` is the operation of the ``nccl:<op>`` annotation the kernel was launched
    in (``all_to_all`` for the ``SendRecv`` kernels that implement it); where the kernel
    args give no size, ``message_bytes`` comes from that annotation's recorded input.
    """

    name: str
    kind: str
    start_s: float
    duration_s: float
    stream: int | None = None
    device: int | None = None
    launch_s: float | None = None
    correlation: int | None = None
    collective: str | None = None
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    message_bytes: int | None = None
    group_size: int | None = None
    group_ranks: tuple[int, ...] | None = None
    comm_op: str | None = None

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class CpuEvent:
    """One CPU-side complete event (times in seconds, trace clock).

    ``category`` is Kineto's ``cat`` (``cpu_op``, ``user_annotation``, ``python_function``,
    ``cuda_runtime``, ``cuda_driver``); ``tid`` the thread.  ``correlation`` links a CUDA
    runtime call to the GPU event it launched; ``sequence`` and ``fwd_tid`` are autograd's
    ``Sequence number`` and ``Fwd thread id``; ``input_dims`` and ``input_types`` are the
    recorded shapes and dtypes of a user annotation (empty unless the profiler ran with
    ``record_shapes``; not kept for operators, which nothing reads them from).
    """

    name: str
    category: str
    tid: int | str | None
    start_s: float
    duration_s: float
    correlation: int | None = None
    sequence: int | None = None
    fwd_tid: int | None = None
    input_dims: tuple[tuple[int, ...], ...] = ()
    input_types: tuple[str, ...] = ()

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.start_s + self.duration_s

    def input_bytes(self, index: int = 0) -> int | None:
        """Bytes of input ``index`` from its recorded shape and dtype, where both are known
        (``None`` otherwise): how a ``nccl:*`` annotation tells its message size."""
        if index >= len(self.input_dims) or index >= len(self.input_types):
            return None
        width = dtype_bytes(self.input_types[index])
        if width is None:
            return None
        count = 1
        for extent in self.input_dims[index]:
            count *= extent
        return count * width


@dataclass(frozen=True, slots=True)
class RankTrace:
    """What distsim keeps of one rank's Kineto trace.

    ``source`` names the file (``archive.tar.gz:member`` for a tar member); ``rank`` comes
    from ``distributedInfo.rank``, else from the file name (``worker3``, ``rank-1``), else is
    ``None``; ``skipped`` says what could not be read.  ``kernels`` and ``cpu_events`` are in
    start order.
    """

    source: str
    rank: int | None
    world_size: int | None
    gpu_model: str | None
    steps: tuple[ProfilerStep, ...]
    kernels: tuple[Kernel, ...]
    skipped: tuple[str, ...] = ()
    cpu_events: tuple[CpuEvent, ...] = ()

    def nccl_counts(self) -> dict[str, int]:
        """Number of NCCL kernels per collective kind, over the whole trace."""
        counts: dict[str, int] = {}
        for kernel in self.kernels:
            if kernel.collective is not None:
                counts[kernel.collective] = counts.get(kernel.collective, 0) + 1
        return dict(sorted(counts.items()))


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a dtype as PyTorch spells it in traces (``float``, ``Float``,
    ``c10::BFloat16``, ``long int``); ``None`` if unknown.

    >>> dtype_bytes("long int"), dtype_bytes("c10::Half"), dtype_bytes("Float")
    (8, 2, 4)
    """
    key = name.strip().lower().removeprefix("c10::").replace(" ", "")
    key = {"longint": "long", "unsignedchar": "uint8", "signedchar": "int8"}.get(key, key)
    return DTYPE_BYTES.get(key)


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


def collective_kind(name: str, collective_arg: str | None = None) -> str:
    """The collective kind of an NCCL kernel from its name (else its ``Collective name``).

    >>> collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ...)")
    'all_reduce'
    >>> collective_kind("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    'sendrecv'
    """
    base = name.split("(", 1)[0]
    for part in base.split("_"):
        word = part.lower()
        for key, kind in _COLLECTIVES:
            if word == key:
                return kind
    for text in (base.lower().replace("_", ""), (collective_arg or "").lower().replace("_", "")):
        for key, kind in _COLLECTIVES:
            if key in text:
                return kind
    return "other"


def _number(value: Any) -> float | None:
    kind = type(value)  # exact types: bool is not a number here
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
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
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
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


class _TraceBuilder:
    """Reduces a Kineto document's events, one at a time, to a :class:`RankTrace`."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.skips = _Skips()
        self.steps: list[ProfilerStep] = []
        self.cpu_events: list[CpuEvent] = []
        self.launches: dict[int, float] = {}
        # Per GPU event: name, kind, ts, dur, stream, device, correlation, NCCL fields.
        self.gpu_events: list[tuple[Any, ...]] = []

    def add(self, index: int, event: Any) -> None:
        """Keep what one element of ``traceEvents`` holds (see the module docstring)."""
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
            problems = []
            if not isinstance(name, str):
                problems.append("no name")
            if ts is None:
                problems.append(f"ts is not a number ({event.get('ts')!r})")
            if dur is None or dur < 0:
                problems.append(f"dur is not a non-negative number ({event.get('dur')!r})")
            label = name if isinstance(name, str) else "?"
            self.skips.add(f"traceEvents[{index}] {label!r}: " + ", ".join(problems))
            return
        category = event.get("cat")
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
            tid = event.get("tid")
            # Shapes matter only for the annotations that carry a message (nccl:<op>);
            # decoding every operator's would cost a third of the import.
            shaped = category == "user_annotation"
            self.cpu_events.append(CpuEvent(
                name=name, category=category, tid=tid if isinstance(tid, int | str) else None,
                start_s=ts * _US, duration_s=dur * _US, correlation=corr,
                sequence=_int(args.get("Sequence number")),
                fwd_tid=_int(args.get("Fwd thread id")),
                input_dims=_dims(args.get("Input Dims")) if shaped else (),
                input_types=_types(args.get("Input type")) if shaped else ()))

    def finish(self, data: dict[str, Any]) -> RankTrace:
        """The record, with rank, world size and GPU model from the document's other
        members (``distributedInfo``, ``deviceProperties``)."""
        source = self.source
        dist = data.get("distributedInfo")
        dist = dist if isinstance(dist, dict) else {}
        rank = _int(dist.get("rank"))
        if rank is None:
            match = _RANK_IN_NAME.search(PurePosixPath(source.split(":")[-1]).name)
            rank = int(match.group(1)) if match else None
        world_size = _int(dist.get("world_size"))
        gpu_model = None
        devices = data.get("deviceProperties")
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            model = devices[0].get("name")
            gpu_model = model if isinstance(model, str) else None

        kernels: list[Kernel] = []
        for name, kind, ts, dur, stream, device, corr, nccl in self.gpu_events:
            kernels.append(Kernel(
                name=name, kind=kind, start_s=ts * _US, duration_s=dur * _US,
                stream=stream, device=device,
                launch_s=self.launches.get(corr) if corr is not None else None,
                correlation=corr, **(nccl or {})))
        kernels.sort(key=lambda k: k.start_s)
        self.steps.sort(key=lambda s: s.start_s)
        self.cpu_events.sort(key=lambda e: e.start_s)
        kernels = _with_comm_annotations(kernels, self.cpu_events)
        return RankTrace(source=source, rank=rank, world_size=world_size, gpu_model=gpu_model,
                         steps=tuple(self.steps), kernels=tuple(kernels),
                         skipped=self.skips.result(), cpu_events=tuple(self.cpu_events))


def _check_document(data: Any, source: str) -> None:
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
    _check_document(data, source)
    builder = _TraceBuilder(source)
    for index, event in enumerate(data["traceEvents"]):
        builder.add(index, event)
    return builder.finish(data)


def _with_comm_annotations(kernels: list[Kernel], cpu_events: list[CpuEvent]) -> list[Kernel]:
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
        return kernels
    starts = {tid: [e.start_s for e in events] for tid, events in scopes.items()}
    result = []
    for kernel in kernels:
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


def _read_stream(stream: IO[bytes], source: str,
                 compressed: bool) -> tuple[list[RankTrace], Any | None]:
    """Stream one document (:mod:`measured.jsonstream`) into compact records; for
    distsim's own trace.json also its :class:`~measured.distsim_trace.DistsimTrace`.

    A distsim trace (every simulated GPU in one file) is told by its ``otherData`` marker,
    which comes after the events; so the events a Kineto trace never has — complete spans
    without a category, and the metadata naming processes and threads — are kept aside
    for it (a Kineto trace has a handful).
    """
    builder = _TraceBuilder(source)
    uncategorised: list[dict[str, Any]] = []

    def on_event(index: int, event: Any) -> None:
        builder.add(index, event)
        if type(event) is dict and "cat" not in event and event.get("ph") in ("X", "M"):
            uncategorised.append(event)

    data = scan_document(stream, source, compressed=compressed, on_item=on_event)
    # Imported here: the distsim reader builds on this module's records.
    from distsim_gpu.measured.distsim_trace import is_distsim_trace, parse_distsim_trace
    if is_distsim_trace(data):
        simulated = parse_distsim_trace({**data, "traceEvents": uncategorised}, source)
        return simulated.rank_traces(), simulated
    _check_document(data, source)
    return [builder.finish(data)], None


def _load_stream(stream: IO[bytes], source: str, compressed: bool) -> list[RankTrace]:
    return _read_stream(stream, source, compressed)[0]


def _is_gz(name: str) -> bool:
    return name.lower().endswith(".gz")


def _is_trace_name(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(".json") or lower.endswith(".json.gz")


def _is_tar_name(name: str) -> bool:
    lower = name.lower()
    return lower.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz"))


def load_trace_file(path: str | Path) -> RankTrace:
    """Read one ``.json`` or ``.json.gz`` Kineto file (raises :class:`ParseError`)."""
    traces = _load_file(path)
    if len(traces) != 1:
        raise ParseError(f"holds {len(traces)} GPUs (a distsim trace)", source=str(path),
                         hint="read it with load_traces")
    return traces[0]


def read_trace_file(path: str | Path) -> tuple[list[RankTrace], Any | None]:
    """One ``.json``/``.json.gz`` file: its rank traces and, for a distsim trace.json, the
    :class:`~measured.distsim_trace.DistsimTrace` with its spans' args (else ``None``).
    Raises :class:`ParseError`."""
    path = Path(path)
    source = str(path)
    try:
        if path.stat().st_size == 0:
            raise ParseError("empty file", source=source,
                             hint="expected a PyTorch profiler (Kineto) Chrome trace")
        with path.open("rb") as stream:
            return _read_stream(stream, source, _is_gz(path.name))
    except OSError as error:
        raise ParseError(f"cannot read: {error.strerror or error}", source=source) from None


def _load_file(path: str | Path) -> list[RankTrace]:
    return read_trace_file(path)[0]


def _read_tar(path: Path) -> list[RankTrace]:
    """Every trace member of a tar archive, read in archive order, returned in name order."""
    return sorted(_iter_tar(path), key=lambda trace: trace.source)


def _iter_tar(path: Path) -> Iterator[RankTrace]:
    source = str(path)
    found = False
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                name = member.name
                parts = PurePosixPath(name).parts
                if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
                    raise ParseError(f"unsafe member name {name!r}", source=source,
                                     hint="members must be relative paths without '..'")
                if not member.isfile() or not _is_trace_name(name):
                    continue
                found = True
                member_source = f"{source}:{name}"
                if member.size == 0:
                    raise ParseError("empty file", source=member_source,
                                     hint="expected a PyTorch profiler (Kineto) Chrome trace")
                stream = archive.extractfile(member)
                if stream is not None:
                    with stream:
                        yield from _load_stream(stream, member_source, _is_gz(name))
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise ParseError(f"not a readable tar archive: {error}", source=source) from None
    if not found:
        raise ParseError("no *.json or *.json.gz member in the archive", source=source)


def _iter_path(path: Path) -> Iterator[RankTrace]:
    if not path.exists():
        raise ParseError("no such file or directory", source=str(path),
                         hint="give a .json, .json.gz, .tar.gz or a directory of them")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and _is_trace_name(p.name))
        if not files:
            raise ParseError("no *.json or *.json.gz files in the directory", source=str(path))
        for file in files:
            yield from _load_file(file)
    elif _is_tar_name(path.name):
        yield from _read_tar(path)
    else:
        yield from _load_file(path)


def load_traces(paths: Iterable[str | Path]) -> list[RankTrace]:
    """Read every trace under ``paths`` (files, tar archives, directories), in order.

    Tar members and directory entries are read in name order; one file is decoded at a
    time.  Raises :class:`ParseError` for a missing path or an unusable file.
    """
    traces: list[RankTrace] = []
    for path in paths:
        traces.extend(_iter_path(Path(path)))
    return traces
