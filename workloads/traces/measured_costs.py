"""Profiled cost tables from traces: ``distsim trace costs TRACES… -o costs.yaml``.

A cost table (:mod:`workloads.cost.compute`) says how long one pass of one layer takes on one
tensor-parallel rank at a shape.  This module measures it from traces and writes it in
the format :class:`~workloads.cost.compute.TableCosts` reads, so a scenario can use it directly
(``compute: {costs: costs.yaml}``).  Two kinds of trace are read:

* **distsim's own trace.json** (:mod:`measured.distsim_trace`): every compute span of a
  layer pass carries its cost-table kind and pass in its args (``layer``, ``pass``,
  ``index``), and the trace's metadata the shape keys (micro-batch, sequence length,
  hidden, tp, sequence parallelism) and the GPU.  One *instance* is one micro-batch's pass
  of one layer on one rank group: the sum of its spans (a layer is traced as its attention
  and MLP halves), divided by the group's straggler slowdown — the cost, not the
  straggler.  Rows: ``transformer_layer``/``moe_layer`` × fwd, bwd, recompute (as the run
  had them), ``embedding`` and ``loss`` × fwd, bwd.
* **a PyTorch profiler (Kineto) trace of a real job** (:mod:`measured.kineto`): a layer
  instance is a CPU annotation — ``nn.Module: LlamaDecoderLayer_0`` (python_function),
  a ``record_function`` scope (user_annotation) or an operator — whose name matches
  ``--layer`` (default :data:`DEFAULT_LAYER_REGEX`); of nested matches the outermost.
  Its **forward** time is the GPU time of the kernels launched inside the scope on its
  thread (CUDA runtime call ``correlation`` = kernel ``correlation``; NCCL kernels are
  left out: the simulator models communication itself; memcpy and memset count).  Its
  **backward** time is the GPU time of the kernels launched inside the autograd backward
  ops (cpu_ops with a ``Fwd thread id``) whose ``Sequence number`` is one of the forward
  ops' inside the scope.  A scope that runs *inside* a backward op is activation
  recomputation: its kernels are the **recompute** pass (full recompute).  Shape keys
  come from options, the GPU from the trace's ``deviceProperties`` (``--gpu`` overrides).

Each row's time is the **median** over its instances (all ranks and steps); the number of
instances and their spread (min … max) are written in the table header's ``notes``.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from distsim_gpu.measured.distsim_trace import DistsimTrace
from distsim_gpu.measured.records import CpuEvent, GpuEvent, RankTrace
from distsim_gpu.measured.traces import load_traces, read_trace_file
from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.intervals import union, union_length
from distsim_gpu.workloads.cost.compute import TABLE_PASSES, CostRow, TableHeader, write_cost_table
from distsim_gpu.workloads.specs.gpus import GPU_PRESETS, canonical_gpu_name
from distsim_gpu.workloads.specs.models import get_model

__all__ = [
    "DEFAULT_LAYER_REGEX",
    "LAYER_KINDS",
    "ExtractOptions",
    "ExtractedCosts",
    "Sample",
    "ShapeKeys",
    "costs_from_distsim",
    "costs_from_kineto",
    "extract_costs",
    "format_costs",
    "operator_costs_from_kineto",
    "scope_gpu_times",
    "scope_kernels",
]

#: Transformer-block module names of common implementations (Hugging Face GPT-2, GPT-J,
#: GPT-NeoX, BLOOM, BERT, Llama/Mistral/Mixtral/Qwen/any ``…DecoderLayer``, Megatron-LM's
#: ``ParallelTransformerLayer``/``TransformerLayer``, PyTorch's ``TransformerEncoderLayer``
#: …), as a name, an ``nn.Module: Name_0`` annotation or a ``record_function`` label.
#: ResNet-style ``BasicBlock``/``Bottleneck`` and sub-modules (``LlamaAttention``) do not
#: match.
DEFAULT_LAYER_REGEX = (r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]*(?:DecoderLayer|EncoderLayer|"
                       r"TransformerLayer|TransformerBlock)|GPT2Block|GPTJBlock|BloomBlock|"
                       r"GPTNeoXLayer|BertLayer|CLIPEncoderLayer)(?:_\d+)?(?![A-Za-z])")

#: The cost-table kinds a matched Kineto layer scope can be written as.
LAYER_KINDS = ("transformer_layer", "moe_layer")
# Categories whose events can be a layer scope.
_SCOPE_CATEGORIES = frozenset({"python_function", "user_annotation", "cpu_op"})
_TOP_NAMES = 12  # annotation names listed when no scope matched


@dataclass(frozen=True, slots=True)
class ShapeKeys:
    """The shape a trace was measured at: a cost table's keys besides kind and pass."""

    micro_batch: int
    seq_len: int
    hidden: int
    tp: int = 1
    sequence_parallel: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """The instances of one row: ``kind`` × ``pass_`` at ``shape`` on ``gpu`` (seconds)."""

    gpu: str
    kind: str
    pass_: str
    shape: ShapeKeys
    times_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def row(self) -> CostRow:
        """The cost-table row: the median of the instances."""
        s = self.shape
        return CostRow(self.gpu, self.kind, self.pass_, s.micro_batch, s.seq_len, s.hidden,
                       s.tp, self.median_s, s.sequence_parallel)

    def spread(self) -> str:
        """``kind pass: N instances, min…max ms`` for the header notes."""
        return (f"{self.kind} {self.pass_}: {len(self.times_s)} instance(s), "
                f"{min(self.times_s) * 1e3:.6g}..{max(self.times_s) * 1e3:.6g} ms")


@dataclass(frozen=True, slots=True)
class ExtractedCosts:
    """A cost table measured from traces, with what it was measured from."""

    header: TableHeader
    samples: tuple[Sample, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def rows(self) -> tuple[CostRow, ...]:
        return tuple(s.row() for s in self.samples)

    def write(self, path: str | Path) -> None:
        """Write the table (YAML or CSV by suffix), atomically."""
        write_cost_table(path, self.header, self.rows)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready object: header, rows (seconds) with instance counts and spread."""
        return {
            "header": {f.name: getattr(self.header, f.name) for f in fields(TableHeader)},
            "rows": [{"gpu": s.gpu, "kind": s.kind, "pass": s.pass_,
                      "micro_batch": s.shape.micro_batch, "seq_len": s.shape.seq_len,
                      "hidden": s.shape.hidden, "tp": s.shape.tp,
                      "sequence_parallel": s.shape.sequence_parallel,
                      "time_s": s.median_s, "instances": len(s.times_s),
                      "min_s": min(s.times_s), "max_s": max(s.times_s)}
                     for s in self.samples],
            "warnings": list(self.warnings),
        }


def _describe(sources: Sequence[str]) -> str:
    """The inputs in a few words: every name up to three, else the first and a count."""
    unique = list(dict.fromkeys(sources))
    if len(unique) <= 3:
        return ", ".join(unique)
    return f"{unique[0]} and {len(unique) - 1} more"


def _today() -> str:
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def _notes(samples: Sequence[Sample], extra: str = "") -> str:
    text = "median over instances; " + "; ".join(s.spread() for s in samples)
    return f"{text}; {extra}" if extra else text


def _sorted_samples(buckets: dict[tuple[Any, ...], list[float]]) -> tuple[Sample, ...]:
    order = {k: i for i, k in enumerate(("transformer_layer", "moe_layer", "embedding",
                                         "loss"))}
    passes = {p: i for i, p in enumerate(TABLE_PASSES)}
    samples = [Sample(gpu, kind, pass_, shape, tuple(times))
               for (gpu, kind, pass_, shape), times in buckets.items()]
    samples.sort(key=lambda s: (s.gpu, order.get(s.kind, 9), s.kind, passes.get(s.pass_, 9),
                                s.shape.micro_batch, s.shape.seq_len))
    return tuple(samples)


# ------------------------------------------------------------------ distsim traces
def _meta_int(meta: dict[str, Any], key: str, source: str) -> int:
    return check_whole(meta.get(key), key=f"otherData.distsim.{key}", source=source,
                       hint="the trace's run metadata; write the trace with 'distsim run "
                            "--out DIR' of this version")


def costs_from_distsim(traces: Sequence[DistsimTrace], *,
                       gpu: str | None = None) -> ExtractedCosts:
    """A cost table from distsim traces (see the module docstring); ``gpu`` overrides the
    traces' GPU name."""
    buckets: dict[tuple[Any, ...], list[float]] = {}
    models: set[str] = set()
    precisions: set[str] = set()
    for trace in traces:
        meta, source = trace.metadata, trace.source
        shape = ShapeKeys(_meta_int(meta, "micro_batch", source),
                          _meta_int(meta, "seq_len", source),
                          _meta_int(meta, "hidden", source), _meta_int(meta, "tp", source),
                          bool(meta.get("sequence_parallel", False)))
        microbatches = _meta_int(meta, "microbatches", source)
        name = gpu or meta.get("gpu")
        if not isinstance(name, str) or not name:
            raise ConfigError("the trace does not say its GPU", source=source, key="--gpu",
                              hint="give --gpu NAME")
        name = canonical_gpu_name(name)
        for value, into in ((meta.get("model"), models), (meta.get("precision"), precisions)):
            if isinstance(value, str) and value:
                into.add(value)
        slowdown = {g.name: g.slowdown for g in trace.groups}
        # Spans of one (group, kind, pass, layer) in time order: per micro-batch the same
        # number of spans (a layer pass is its attention and MLP halves).
        runs: dict[tuple[str, str, str, Any], list[float]] = {}
        for span in trace.spans:
            kind, pass_ = span.args.get("layer"), span.args.get("pass")
            if span.process not in slowdown or not isinstance(kind, str) \
                    or not isinstance(pass_, str):
                continue
            key = (span.process, kind, pass_, span.args.get("index"))
            runs.setdefault(key, []).append(span.duration_s / slowdown[span.process])
        for (_process, kind, pass_, _index), durations in runs.items():
            if len(durations) % microbatches:
                raise ConfigError(f"{len(durations)} {kind} {pass_} spans on one rank group "
                                  f"are not {microbatches} equal micro-batches",
                                  source=source, hint="a trace of one iteration, as "
                                  "'distsim run --out' writes it")
            per = len(durations) // microbatches
            times = buckets.setdefault((name, kind, pass_, shape), [])
            times.extend(sum(durations[i:i + per]) for i in range(0, len(durations), per))
    if not buckets:
        raise ConfigError("no compute spans with a layer kind and pass in the trace",
                          source=_describe([t.source for t in traces]),
                          hint="write the trace with 'distsim run --out DIR' of this version")
    samples = _sorted_samples(buckets)
    header = TableHeader(
        software="distsim (simulated run)", date=_today(),
        source="distsim trace costs from " + _describe([t.source for t in traces])
        + " (compute spans per layer pass and micro-batch, straggler slowdown removed)",
        gpu=samples[0].gpu, precision=", ".join(sorted(precisions)),
        model=", ".join(sorted(models)), notes=_notes(samples))
    return ExtractedCosts(header, samples)


# ------------------------------------------------------------------ Kineto traces
@dataclass(slots=True)
class _RankIndex:
    """One rank's CPU side, indexed for interval queries."""

    launches: dict[Any, tuple[list[float], list[int]]]  # tid -> (start times, correlations)
    gpu_time: dict[int, float]  # correlation -> GPU seconds (non-NCCL events)
    forward_ops: dict[Any, tuple[list[float], list[CpuEvent]]]  # tid -> ops with a sequence
    backward: dict[int, list[CpuEvent]]  # sequence number -> backward ops
    backward_spans: dict[Any, list[tuple[float, float]]]  # tid -> merged backward intervals


def _index(trace: RankTrace) -> _RankIndex:
    gpu_time: dict[int, float] = {}
    for kernel in trace.gpu_events:
        if kernel.kind != "communication" and kernel.correlation is not None:
            gpu_time[kernel.correlation] = gpu_time.get(kernel.correlation, 0.0) \
                + kernel.duration_s
    launches: dict[Any, tuple[list[float], list[int]]] = {}
    forward: dict[Any, tuple[list[float], list[CpuEvent]]] = {}
    backward: dict[int, list[CpuEvent]] = {}
    spans: dict[Any, list[tuple[float, float]]] = {}
    for event in trace.cpu_events:  # in start order
        if event.correlation is not None:
            starts, corrs = launches.setdefault(event.tid, ([], []))
            starts.append(event.start_s)
            corrs.append(event.correlation)
        if event.category != "cpu_op" or event.sequence is None:
            continue
        if event.fwd_tid is None:
            starts_f, ops = forward.setdefault(event.tid, ([], []))
            starts_f.append(event.start_s)
            ops.append(event)
        else:
            backward.setdefault(event.sequence, []).append(event)
            spans.setdefault(event.tid, []).append((event.start_s, event.end_s))
    merged = {tid: union(intervals) for tid, intervals in spans.items()}
    return _RankIndex(launches, gpu_time, forward, backward, merged)


def _inside(spans: list[tuple[float, float]], start: float, end: float) -> bool:
    index = bisect.bisect_right(spans, (start, float("inf"))) - 1
    return index >= 0 and spans[index][0] <= start and end <= spans[index][1]


def _launched(index: _RankIndex, tid: Any, start: float, end: float) -> list[int]:
    starts, corrs = index.launches.get(tid, ([], []))
    low, high = bisect.bisect_left(starts, start), bisect.bisect_right(starts, end)
    return corrs[low:high]


def _scopes(trace: RankTrace, pattern: re.Pattern[str]) -> list[CpuEvent]:
    """The outermost matching scope events of each thread, in start order."""
    by_tid: dict[Any, list[CpuEvent]] = {}
    for event in trace.cpu_events:
        if event.category in _SCOPE_CATEGORIES and pattern.search(event.name):
            by_tid.setdefault(event.tid, []).append(event)
    outer: list[CpuEvent] = []
    for events in by_tid.values():
        end = float("-inf")
        for event in sorted(events, key=lambda e: (e.start_s, -e.end_s)):
            if event.start_s >= end:  # not nested in (or overlapping) the previous one
                outer.append(event)
                end = event.end_s
    return sorted(outer, key=lambda e: e.start_s)


def _annotation_names(traces: Sequence[RankTrace]) -> str:
    counts: Counter[str] = Counter()
    for trace in traces:
        for event in trace.cpu_events:
            if event.category in ("python_function", "user_annotation"):
                counts[event.name] += 1
    if not counts:
        return "the traces hold no python_function or user_annotation events (profile " \
               "with with_modules=True or wrap layers in record_function)"
    common = ", ".join(f"{name!r} ×{n}" for name, n in counts.most_common(_TOP_NAMES))
    return f"most common annotations: {common}"


def _trace_gpu(traces: Sequence[RankTrace], gpu: str | None) -> str:
    """The table's GPU: ``--gpu`` as given (a custom GPU's name, too), else the traces'
    GPU when it is a preset — a name as the driver spells it (``NVIDIA H800``) would make a
    table no scenario selects, so it is refused with the names that would do."""
    if gpu is not None:
        return canonical_gpu_name(gpu)
    names = sorted({canonical_gpu_name(t.gpu_model) for t in traces if t.gpu_model})
    if not names:
        raise ConfigError("the traces do not record their GPU (no deviceProperties)",
                          key="--gpu", hint="give --gpu NAME, e.g. --gpu h100-sxm")
    if len(names) > 1:
        raise ConfigError("the traces come from different GPUs: " + ", ".join(names),
                          key="--gpu", hint="extract one GPU's traces at a time, or --gpu")
    if names[0] not in GPU_PRESETS:
        raise ConfigError(f"the traces' GPU {names[0]!r} is not a GPU preset, so no "
                          "scenario's compute.gpu would select the table's rows",
                          key="--gpu", hint="name the GPU the scenario runs: --gpu PRESET "
                          f"({', '.join(GPU_PRESETS)}), or the name of its compute.gpu")
    return names[0]


def costs_from_kineto(traces: Sequence[RankTrace], *, shape: ShapeKeys,
                      layer: str = DEFAULT_LAYER_REGEX, kind: str = "transformer_layer",
                      gpu: str | None = None, model: str = "") -> ExtractedCosts:
    """A cost table of layer ``kind`` from Kineto traces (see the module docstring).

    Raises :class:`ConfigError` when no scope matches ``layer`` (listing the most common
    annotation names) or no scope launched a kernel; a trace without backward ops gives
    forward rows only, with a warning.
    """
    sources = _describe([t.source for t in traces])
    try:
        pattern = re.compile(layer)
    except re.error as error:
        raise ConfigError(f"not a regular expression: {error}", key="--layer") from None
    check_choice(kind, LAYER_KINDS, key="--kind", what="layer kind")
    name = _trace_gpu(traces, gpu)
    times: dict[str, list[float]] = {"fwd": [], "bwd": [], "recompute": []}
    scopes_found = sum(_trace_times(trace, pattern, times) for trace in traces)
    if not scopes_found:
        which = ("the default --layer pattern (common transformer blocks)"
                 if layer == DEFAULT_LAYER_REGEX else f"--layer {layer!r}")
        raise ConfigError(f"no layer scope matches {which}", source=sources,
                          key="--layer", hint=_annotation_names(traces))
    if not times["fwd"]:
        raise ConfigError(f"{scopes_found} layer scope(s) matched, but none launched a "
                          "GPU kernel that the trace links to it (correlation)",
                          source=sources, key="--layer",
                          hint="profile with CUDA activities, or match the scope that wraps "
                               "the layer's forward")
    warnings = []
    if not times["bwd"]:
        warnings.append("no backward found: no autograd op's sequence number matches a "
                        "forward op inside the layer scopes; wrote fwd rows only")
    buckets = {(name, kind, pass_, shape): values for pass_, values in times.items() if values}
    samples = _sorted_samples(buckets)
    header = TableHeader(
        software="PyTorch profiler (Kineto) trace", date=_today(),
        source=f"distsim trace costs from {sources}: layer scopes matching /{layer}/; fwd "
               "= GPU time of kernels launched in the scope, bwd = of kernels launched by "
               "autograd ops with the sequence numbers of its forward ops",
        gpu=name, model=model, notes=_notes(samples, "; ".join(warnings)))
    return ExtractedCosts(header, samples, tuple(warnings))


def _trace_times(trace: RankTrace, pattern: re.Pattern[str],
                 times: dict[str, list[float]]) -> int:
    """Add the GPU times of ``trace``'s layer scopes to ``times``; return how many matched."""
    scopes = _scopes(trace, pattern)
    if not scopes:
        return 0
    index = _index(trace)
    for scope in scopes:
        recompute = _inside(index.backward_spans.get(scope.tid, []), scope.start_s,
                            scope.end_s)
        own = _launched(index, scope.tid, scope.start_s, scope.end_s)
        forward_s = sum(index.gpu_time.get(c, 0.0) for c in own)
        if forward_s > 0:
            times["recompute" if recompute else "fwd"].append(forward_s)
        backward_s = _backward_s(index, scope, own)
        if backward_s > 0:
            times["bwd"].append(backward_s)
    return len(scopes)


def _backward_s(index: _RankIndex, scope: CpuEvent, own: list[int]) -> float:
    """GPU seconds of the kernels the backward of ``scope``'s forward ops launched."""
    # Backward: the autograd ops of the forward ops this scope ran (a recompute
    # scope's ops have their own sequence numbers: the backward that follows it).
    starts, ops = index.forward_ops.get(scope.tid, ([], []))
    low = bisect.bisect_left(starts, scope.start_s)
    high = bisect.bisect_right(starts, scope.end_s)
    sequences = {op.sequence for op in ops[low:high]
                 if op.sequence is not None and op.end_s <= scope.end_s}
    intervals: dict[Any, list[tuple[float, float]]] = {}
    for sequence in sequences:
        for op in index.backward.get(sequence, []):
            intervals.setdefault(op.tid, []).append((op.start_s, op.end_s))
    claimed = set(own)
    backward_s = 0.0
    for tid, spans in intervals.items():
        for start, end in union(spans):
            for corr in _launched(index, tid, start, end):
                if corr not in claimed:  # a nested recompute's kernels are its own
                    claimed.add(corr)
                    backward_s += index.gpu_time.get(corr, 0.0)
    return backward_s


def scope_kernels(traces: Sequence[RankTrace], pattern: str, *, key: str = "pattern",
                  ) -> dict[str, list[list[GpuEvent]]]:
    """Per annotation name matching ``pattern`` (outermost scopes), one list per instance:
    the non-NCCL GPU events launched inside it — by its thread, or by any thread when its
    own launched none (an autograd backward runs on the engine's thread).  ``key``: what
    an invalid ``pattern`` is called in the error (the option the user gave it as)."""
    try:
        matcher = re.compile(pattern)
    except re.error as error:
        raise ConfigError(f"not a regular expression: {error}", key=key) from None
    out: dict[str, list[list[GpuEvent]]] = {}
    for trace in traces:
        scopes = _scopes(trace, matcher)
        if not scopes:
            continue
        index = _index(trace)
        events: dict[int, list[GpuEvent]] = {}
        for kernel in trace.gpu_events:
            if kernel.kind != "communication" and kernel.correlation is not None:
                events.setdefault(kernel.correlation, []).append(kernel)
        for scope in scopes:
            launched = _launched(index, scope.tid, scope.start_s, scope.end_s) or [
                c for tid in index.launches
                for c in _launched(index, tid, scope.start_s, scope.end_s)]
            out.setdefault(scope.name, []).append(
                [kernel for corr in launched for kernel in events.get(corr, ())])
    return out


def scope_gpu_times(traces: Sequence[RankTrace], pattern: str, *, exclude: str | None = None,
                    key: str = "pattern") -> dict[str, list[tuple[float, float]]]:
    """Per annotation name matching ``pattern``, one ``(compute_s, excluded_s)`` per
    instance: how long the GPU ran the kernels :func:`scope_kernels` finds, split by
    ``exclude`` (a kernel-name regex, e.g. a communication library's kernels that are
    not NCCL's).  Each is the length of the union of the kernels' intervals, not the sum
    of their durations: a scope whose kernels run on two streams at once (DeepSeek's
    expert weight gradients) holds the GPU for less than their sum, and a cost model that
    runs them one after the other at the whole GPU's rate predicts that time."""
    try:
        skip = re.compile(exclude) if exclude else None
    except re.error as error:
        raise ConfigError(f"not a regular expression: {error}", key="exclude") from None
    out: dict[str, list[tuple[float, float]]] = {}
    for name, instances in scope_kernels(traces, pattern, key=key).items():
        for kernels in instances:
            spans: tuple[list[tuple[float, float]], ...] = ([], [])  # compute, excluded
            for kernel in kernels:
                excluded = skip is not None and bool(skip.search(kernel.name))
                spans[excluded].append((kernel.start_s, kernel.end_s))
            out.setdefault(name, []).append((union_length(spans[0]), union_length(spans[1])))
    return out


_OPERATOR_SCOPE = re.compile(r"^(?P<kind>[A-Za-z_][A-Za-z0-9_.]*?)(?:\((?P<pass>[FBW])\))?$")


def operator_costs_from_kineto(traces: Sequence[RankTrace], *, shape: ShapeKeys,
                               operators: str, gpu: str | None = None, model: str = "",
                               exclude: str | None = None) -> ExtractedCosts:
    """A per-operator cost table from Kineto traces: every scope matching ``operators``
    (a regex over annotation names such as ``qkv``, ``attn_softmax(F)``, ``mlp_fc1(B)``)
    is a row of kind = its name without the pass suffix, lower-cased.  Pass ``fwd`` for
    ``(F)`` or no suffix; ``bwd`` for ``(B)`` and ``(W)`` — the data and weight gradients
    of one instance added (paired in order) when the trace splits them.  A scenario whose
    cost table holds these rows takes them for those operators and the roofline for the
    rest (:class:`~distsim_gpu.workloads.cost.compute.table_costs.TableCosts`)."""
    sources = _describe([t.source for t in traces])
    name = _trace_gpu(traces, gpu)
    measured = scope_gpu_times(traces, operators, exclude=exclude, key="--operators")
    parts: dict[tuple[str, str], dict[str, list[float]]] = {}
    for scope, instances in measured.items():
        match = _OPERATOR_SCOPE.match(scope.strip())
        if match is None:
            continue
        split = match.group("pass") or "F"
        pass_ = "fwd" if split == "F" else "bwd"
        times = parts.setdefault((match.group("kind").lower(), pass_), {})
        times.setdefault(split, []).extend(c for c, _ in instances)
    if not parts:
        raise ConfigError(f"no operator scope matches {operators!r}", source=sources,
                          key="--operators", hint=_annotation_names(traces))
    buckets: dict[tuple[Any, ...], list[float]] = {}
    for (kind, pass_), by_split in parts.items():
        lists = list(by_split.values())
        values = [sum(v) for v in zip(*lists)] if len(lists) > 1 else lists[0]
        if any(v > 0 for v in values):
            buckets[(name, kind, pass_, shape)] = values
    samples = _sorted_samples(buckets)
    header = TableHeader(
        software="PyTorch profiler (Kineto) trace", date=_today(),
        source=f"distsim trace costs from {sources}: operator scopes matching "
               f"/{operators}/; each row the GPU time of the kernels launched in the scope",
        gpu=name, model=model, notes=_notes(samples))
    return ExtractedCosts(header, samples)


# ------------------------------------------------------------------ reading inputs
def _is_json_file(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith((".json", ".json.gz"))


@dataclass(frozen=True, slots=True)
class ExtractOptions:
    """How :func:`extract_costs` reads its traces: the layer scopes (``layer``, a regex)
    and the table kind they fill, the shape a Kineto trace ran with (``micro_batch``,
    ``seq_len``, ``hidden`` — default the ``model`` preset's — ``tp``,
    ``sequence_parallel``; a distsim trace records its own), the ``gpu``, and
    ``operators`` (a regex over scope names) to measure per-operator rows instead of whole
    layers (:func:`operator_costs_from_kineto`)."""

    layer: str = DEFAULT_LAYER_REGEX
    kind: str = "transformer_layer"
    micro_batch: int | None = None
    seq_len: int | None = None
    hidden: int | None = None
    model: str | None = None
    tp: int = 1
    sequence_parallel: bool = False
    gpu: str | None = None
    operators: str | None = None


def extract_costs(paths: Sequence[str | Path],
                  options: ExtractOptions = ExtractOptions()) -> ExtractedCosts:
    """Read ``paths`` (distsim trace.json files, or Kineto files, archives, directories)
    and extract a cost table as ``options`` say."""
    layer, kind, gpu, operators = options.layer, options.kind, options.gpu, options.operators
    micro_batch, seq_len, hidden = options.micro_batch, options.seq_len, options.hidden
    model, tp, sequence_parallel = options.model, options.tp, options.sequence_parallel
    distsim: list[DistsimTrace] = []
    kineto: list[RankTrace] = []
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        # A directory's trace files one by one: a distsim trace.json among them is read
        # with its span args, not as bare kernels.
        found = sorted(p for p in path.iterdir() if _is_json_file(p)) if path.is_dir() else []
        files.extend(found or [path])
    for path in files:
        if _is_json_file(path):
            traces, simulated = read_trace_file(path)  # read once: one kind or the other
            if simulated is not None:
                distsim.append(simulated)
            else:
                kineto.extend(traces)
        else:
            kineto.extend(load_traces([path]))
    if distsim and kineto:
        raise ConfigError("both distsim and profiler traces given", key="TRACES",
                          hint="extract costs from one kind of trace at a time")
    if distsim:
        extracted = costs_from_distsim(distsim, gpu=gpu)
        given = [k for k, v in (("--micro-batch", micro_batch), ("--seq-len", seq_len),
                                ("--hidden", hidden), ("--model", model)) if v is not None]
        if given:
            note = (f"{', '.join(given)} ignored: a distsim trace records its shape")
            extracted = ExtractedCosts(extracted.header, extracted.samples,
                                       (*extracted.warnings, note))
        return extracted
    if model is not None:  # a preset: the header names what the table was measured on
        preset = get_model(model, key="--model")
        hidden = preset.hidden if hidden is None else hidden
    missing = [k for k, v in (("--micro-batch", micro_batch), ("--seq-len", seq_len),
                              ("--hidden or --model", hidden)) if v is None]
    if missing:
        raise ConfigError("a profiler trace does not say its shape: give "
                          + ", ".join(missing), key=missing[0],
                          hint="the micro-batch, sequence length and hidden size the job "
                               "ran with, and --tp if tensor-parallel")
    shape = ShapeKeys(check_whole(micro_batch, key="--micro-batch"),
                      check_whole(seq_len, key="--seq-len"), check_whole(hidden, key="--hidden"),
                      check_whole(tp, key="--tp"), sequence_parallel)
    if operators is not None:
        return operator_costs_from_kineto(kineto, shape=shape, operators=operators, gpu=gpu,
                                          model=model or "")
    return costs_from_kineto(kineto, shape=shape, layer=layer, kind=kind, gpu=gpu,
                             model=model or "")


# ------------------------------------------------------------------ the table in text
def format_costs(extracted: ExtractedCosts, output: str) -> str:
    """The terminal table of an extracted cost table written to ``output``: per row its
    shape, median time, number of instances and spread (ms)."""
    lines = [f"# wrote {len(extracted.samples)} row(s) to {output} (gpu "
             f"{extracted.header.gpu}); times in ms, median over instances"]
    table = [("kind", "pass", "mb", "seq", "hidden", "tp", "sp", "time", "n", "min", "max")]
    for s in extracted.samples:
        table.append((s.kind, s.pass_, str(s.shape.micro_batch), str(s.shape.seq_len),
                      str(s.shape.hidden), str(s.shape.tp),
                      "yes" if s.shape.sequence_parallel else "no",
                      f"{s.median_s * 1e3:.4f}", str(len(s.times_s)),
                      f"{min(s.times_s) * 1e3:.4f}", f"{max(s.times_s) * 1e3:.4f}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines) + "\n"
