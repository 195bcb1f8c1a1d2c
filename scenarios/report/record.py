"""What a scenario run reports: headline metrics, per-GPU time and memory, output files.

A :class:`Report` holds one simulated iteration's results in SI units: the iteration time,
throughput (samples and tokens per second), model FLOP/s per GPU and MFU (model FLOP
utilisation: achieved model FLOP/s per GPU over the GPU's dense peak at the training
precision — recomputation does not count, as in Narayanan et al. 2021), and per GPU the
time in compute, communication (overlapped or not), exposed communication, pipeline bubble
and idle, plus the memory it needs.  It also records the resolved configuration the run
used, so it can be reproduced from its own output.

Outputs: :meth:`Report.to_json_dict` (``--json``, ``summary.json``), :func:`format_summary`
(the terminal table, ending with the bottlenecks: critical path and busiest links, see
:mod:`scenarios.bottlenecks`) and :func:`write_output_dir` (``--out DIR``: summary.json,
resolved.yaml, trace.json, PNG plots and report.html, written whole or not at all).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.bottlenecks import add_to_trace, bottlenecks, format_bottlenecks
from distsim_gpu.scenarios.html_report import HtmlUnavailable, run_report_html
from distsim_gpu.scenarios.linkmap import LinkMap, link_map
from distsim_gpu.scenarios.perfetto import per_gpu_chrome_trace
from distsim_gpu.scenarios.plots import PlotsUnavailable, write_plots
from distsim_gpu.scenarios.timelines import Timeline, timelines_of
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.trace import Tracer
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.cost.memory import MemoryBreakdown
from distsim_gpu.workloads.iteration.offload_step import OffloadStep, offload_lines
from distsim_gpu.workloads.iteration.simulator import GpuTimes, IterationResult, PathEntry
from distsim_gpu.workloads.specs.moe_routing import describe_loads, moe_from_mapping

__all__ = [
    "GROUP_TOLERANCE",
    "OUTPUT_FILES",
    "GpuGroup",
    "OutputResult",
    "Report",
    "build_report",
    "format_summary",
    "format_table",
    "group_gpus",
    "write_output_dir",
]

_GiB = 2.0**30

# Every name ``--out`` may write; a directory holding only these (and a summary.json) is a
# previous distsim output and may be replaced.
OUTPUT_FILES = ("summary.json", "resolved.yaml", "trace.json", "timeline.png",
                "breakdown.png", "memory.png", "report.html")


# GPUs of a stage whose times agree within this fraction of the iteration (and whose
# memory agrees within 1 MiB) are shown as one group: replicas of a stage differ by a few
# microseconds of contention that a summary should not spell out GPU by GPU.
GROUP_TOLERANCE = 0.005

_TIME_FIELDS = ("compute_s", "communication_s", "exposed_communication_s", "bubble_s",
                "idle_s")


@dataclass(frozen=True, slots=True)
class GpuGroup:
    """GPUs of one pipeline stage with the same times (within ``GROUP_TOLERANCE`` of the
    iteration) and memory.  Times are the members' means (seconds); ``spread_s`` is the
    largest deviation of any member's time from them; ``memory`` the first member's."""

    stage: int
    gpus: tuple[str, ...]
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    idle_s: float
    spread_s: float
    memory: MemoryBreakdown


def _close(a: GpuTimes, b: GpuTimes, tolerance_s: float) -> bool:
    return (all(abs(getattr(a, f) - getattr(b, f)) <= tolerance_s for f in _TIME_FIELDS)
            and abs(a.peak_memory_bytes - b.peak_memory_bytes) < 2**20)


def group_gpus(per_gpu: Sequence[GpuTimes], iteration_time_s: float,
               tolerance: float = GROUP_TOLERANCE) -> list[GpuGroup]:
    """Group GPUs per stage: a GPU joins the first group whose first member it matches
    within ``tolerance × iteration_time_s`` in every time, else starts a new group."""
    tolerance_s = tolerance * iteration_time_s
    clusters: list[list[GpuTimes]] = []
    for g in sorted(per_gpu, key=lambda x: (x.stage, x.rank)):
        for members in clusters:
            if members[0].stage == g.stage and _close(members[0], g, tolerance_s):
                members.append(g)
                break
        else:
            clusters.append([g])
    groups = []
    for members in clusters:
        means = {f: sum(getattr(m, f) for m in members) / len(members) for f in _TIME_FIELDS}
        spread = max(abs(getattr(m, f) - means[f]) for m in members for f in _TIME_FIELDS)
        groups.append(GpuGroup(members[0].stage, tuple(m.gpu for m in members),
                               spread_s=spread, memory=members[0].memory, **means))
    return groups


@dataclass(frozen=True, slots=True)
class Report:
    """One simulated iteration (seconds, bytes, FLOP/s; ``mfu`` a fraction).

    ``config`` is the resolved scenario (see :meth:`scenarios.scenario.Scenario.resolved`);
    ``tracer`` the simulation's tracer when the run traced (spans, link counters), else
    None; ``bottlenecks`` the critical path and busiest links
    (:func:`scenarios.bottlenecks.bottlenecks`).
    """

    name: str
    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    model_flops: float
    model_tflops_per_gpu: float
    mfu: float
    peak_flops_per_s: float
    num_gpus: int
    microbatches: int
    pipeline_stages: int
    wall_time_s: float
    events: int
    flows: int
    gpu_memory_bytes: float
    per_gpu: tuple[GpuTimes, ...]
    config: dict[str, Any]
    source: str | None = None
    tracer: Tracer | None = field(default=None, repr=False, compare=False)
    bottlenecks: dict[str, Any] = field(default_factory=dict, repr=False)
    folding: str = ""  # which simulation ran (workloads.iteration.IterationResult.folding)
    # The iteration's result, for what only report.html and the per-GPU trace draw
    # (timelines, link map): made when asked, as binning every link of a 16,384-GPU run
    # costs seconds that a search or sweep point would spend for nothing.
    result: IterationResult | None = field(default=None, repr=False, compare=False)
    critical_path: tuple[PathEntry, ...] = field(default=(), repr=False, compare=False)
    # Each stage's offloaded optimizer step (workloads.offload_step); () when none.
    offload: tuple[OffloadStep, ...] = ()
    # Seconds a data-parallel rank's loader needs per iteration (workloads.data_loading);
    # 0 when the scenario gives no loader.
    data_loading_s: float = 0.0

    @property
    def timelines(self) -> tuple[Timeline, ...]:
        """Each simulated schedule and the GPUs it stands for (:mod:`scenarios.timelines`)."""
        return timelines_of(self.result) if self.result is not None else ()

    @property
    def link_map(self) -> LinkMap | None:
        """Link utilisation by link class and place (:mod:`scenarios.linkmap`)."""
        return link_map(self.result) if self.result is not None else None

    def groups(self, tolerance: float = GROUP_TOLERANCE) -> list[GpuGroup]:
        """GPUs with (nearly) equal timings and memory, per pipeline stage (see
        :func:`group_gpus`)."""
        return group_gpus(self.per_gpu, self.iteration_time_s, tolerance)

    def to_json_dict(self) -> dict[str, Any]:
        """Everything as one JSON-ready object (SI units; the resolved config under
        ``config``).  ``wall_time_s`` is the only field that varies between identical runs.
        """
        data = {
            "name": self.name,
            "scenario": self.source,
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "model_flops": self.model_flops,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "peak_flops_per_gpu": self.peak_flops_per_s,
            "num_gpus": self.num_gpus,
            "microbatches": self.microbatches,
            "wall_time_s": self.wall_time_s,
            "events": self.events,
            "flows": self.flows,
            "folding": self.folding,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "per_gpu": [_gpu_dict(g) for g in self.per_gpu],
            "bottlenecks": self.bottlenecks,
            "config": self.config,
        }
        if self.offload:  # absent without offload, as before it existed
            data["offload"] = [step.to_dict() for step in self.offload]
        if self.data_loading_s:  # absent without a data loader
            data["data_loading_s"] = self.data_loading_s
        return data


def _gpu_dict(g: GpuTimes) -> dict[str, Any]:
    return {
        "gpu": g.gpu, "rank": g.rank, "stage": g.stage, "replica": g.replica,
        "tp_rank": g.tp_rank, "compute_s": g.compute_s, "communication_s": g.communication_s,
        "exposed_communication_s": g.exposed_communication_s, "bubble_s": g.bubble_s,
        "idle_s": g.idle_s, "peak_memory_bytes": g.peak_memory_bytes,
        "memory": g.memory.to_dict(),
    }


def build_report(*, name: str, source: str | None, result: IterationResult,
                 global_batch: int, seq_len: int, peak_flops_per_s: float,
                 gpu_memory_bytes: float, config: dict[str, Any], wall_time_s: float,
                 pp: int) -> Report:
    """A :class:`Report` from an iteration's result and the figures it is judged by."""
    t = result.iteration_time_s
    num_gpus = len(result.per_gpu)
    flops_per_gpu = result.model_flops / t / num_gpus if t > 0 else 0.0
    tracer = result.simulation.tracer
    found = bottlenecks(result)
    if tracer.enabled:
        add_to_trace(tracer, result.critical_path, found)
    return Report(
        name=name, iteration_time_s=t,
        samples_per_s=global_batch / t if t > 0 else 0.0,
        tokens_per_s=global_batch * seq_len / t if t > 0 else 0.0,
        model_flops=result.model_flops, model_tflops_per_gpu=flops_per_gpu / 1e12,
        mfu=flops_per_gpu / peak_flops_per_s, peak_flops_per_s=peak_flops_per_s,
        num_gpus=num_gpus, microbatches=result.microbatches, pipeline_stages=pp,
        wall_time_s=wall_time_s, events=result.events, flows=result.flows,
        gpu_memory_bytes=gpu_memory_bytes, per_gpu=result.per_gpu, config=config,
        source=source, tracer=tracer if tracer.enabled else None, bottlenecks=found,
        folding=result.folding, result=result,
        critical_path=result.critical_path, offload=result.offload,
        data_loading_s=result.data_loading_s)


# --------------------------------------------------------------------------- summary



def format_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                 right: set[int] | None = None) -> list[str]:
    """Aligned text columns, two spaces indented; the columns in ``right`` (default: all
    but the first) right-aligned."""
    if right is None:
        right = set(range(1, len(header)))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [str(c).rjust(w) if i in right else str(c).ljust(w)
               for i, (c, w) in enumerate(zip(cells, widths))]
        return "  " + "  ".join(out).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _strategy(config: dict[str, Any]) -> str:
    par = config.get("parallelism", {})
    train = config.get("training", {})
    parts = [f"tp {par.get('tp')} · pp {par.get('pp')} · dp {par.get('dp')}"]
    if par.get("ep", 1) > 1:
        parts[0] += f" · ep {par['ep']}"
    if par.get("cp", 1) > 1:
        parts[0] += f" · cp {par['cp']}"
    if par.get("pp", 1) > 1:
        schedule = f"{par.get('schedule')} schedule"
        if par.get("schedule") == "interleaved":
            schedule += f" ×{par.get('interleave')}"
        parts.append(schedule)
    if par.get("sequence_parallel"):
        parts.append("sequence parallel")
    if par.get("moe_overlap"):
        parts.append("MoE all-to-alls overlapped")
    if par.get("fsdp"):
        parts.append("FSDP")
    elif par.get("zero"):
        parts.append(f"ZeRO-{par['zero']}")
    plan = par.get("operator_sharding")
    if plan:  # OSDP (workloads.operator_sharding)
        listed = plan["sharded"] if plan["default"] == "replicated" else plan["replicated"]
        other = "sharded" if plan["default"] == "replicated" else "replicated"
        parts.append(f"operators {plan['default']}"
                     + (f" but {other} {'+'.join(listed)}" if listed else "")
                     + "".join(f", {op} split {k}" for op, k in plan["split"].items()))
    groups = par.get("layer_groups")
    if groups:  # Galvatron's per-layer strategies (workloads.layer_groups)
        parts.append("layers " + " + ".join(
            f"{g['layers']}×tp{g['tp']}" + (f" {g['recompute']}" if "recompute" in g else "")
            for g in groups))
    offload = par.get("offload")
    if offload:
        parts.append(f"offload optimizer {offload['optimizer']}, params {offload['params']}"
                     + (", delayed update" if offload["delayed_update"] else ""))
    parts.append(f"recompute {train.get('recompute')}; {train.get('precision')}")
    return "; ".join(parts)


def _experts(config: dict[str, Any]) -> list[str]:
    """The router's line (workloads.moe_routing), when the scenario sets ``model.moe``."""
    model = config.get("model", {})
    if "moe" not in model:
        return []
    par = config.get("parallelism", {})
    routing = moe_from_mapping(model["moe"], experts=model["experts"])
    return ["  experts      " + describe_loads(routing, experts=model["experts"],
                                               top_k=model["top_k"], ep=par.get("ep", 1))]


def _batch(config: dict[str, Any], microbatches: int) -> str:
    par = config.get("parallelism", {})
    train = config.get("training", {})
    plural = "micro-batch" if microbatches == 1 else "micro-batches"
    per = "pipeline" if par.get("pp", 1) > 1 else "replica"
    return (f"{train.get('global_batch')} sequences = {microbatches} {plural} of "
            f"{train.get('micro_batch')} per {per} × dp {par.get('dp')}")


def _gpu_text(gpu: dict[str, Any]) -> str:
    """The GPU's name, and its power limit where one is below the rated power."""
    limit, tdp = gpu.get("power_limit"), gpu.get("tdp")
    name = str(gpu.get("name", "?"))
    if limit is None or tdp is None or limit >= tdp:
        return name
    return f"{name} limited to {limit:g} W of {tdp:g} W (compute clocks lower)"


def _data_loading(report: Report) -> list[str]:
    """The loader's line: its time per iteration and whether the GPUs wait for it."""
    if not report.data_loading_s:
        return []
    loader = report.config.get("training", {}).get("data_loader", {})
    workers = loader.get("workers", 1)
    how = (f"{workers} worker{'s' if workers != 1 else ''}" if workers
           else "in the training process")
    wait_s = next((e.duration_s for e in reversed(report.critical_path)
                   if e.kind == "data loading"), 0.0)
    verdict = (f"the GPUs wait {format_duration(wait_s)} for it" if wait_s
               else "hidden behind training")
    return [f"  data loading {format_duration(report.data_loading_s)} per iteration "
            f"({how}): {verdict}"]


def format_summary(report: Report) -> str:
    """The terminal summary: headline metrics with units, then per group of identical GPUs
    the time breakdown (seconds and % of the iteration) and the memory (GiB)."""
    c = report.config
    t = report.iteration_time_s
    cluster = c.get("cluster", {})
    model = c.get("model", {})
    train = c.get("training", {})
    gpu = c.get("compute", {}).get("gpu", {})
    nodes = cluster.get("nodes")
    where = f" ({report.source})" if report.source else ""
    lines = [
        f"distsim run: {report.name}{where}",
        f"  cluster      {cluster.get('name', '?')}: {report.num_gpus} GPUs"
        + (f" on {nodes} node(s)" if nodes else "") + f", {_gpu_text(gpu)}",
        f"  model        {model.get('name', '?')}: {model.get('layers')} layers, hidden "
        f"{model.get('hidden')}, {model.get('heads')} heads, sequence {train.get('seq_len')}",
        f"  strategy     {_strategy(c)}",
        f"  batch        {_batch(c, report.microbatches)}",
        *_experts(c),
        f"  iteration    {format_duration(t)}",
        *_data_loading(report),
        f"  throughput   {report.samples_per_s:,.4g} samples/s, {report.tokens_per_s:,.0f} "
        "tokens/s",
        f"  per GPU      {report.model_tflops_per_gpu:.4g} TFLOP/s of model FLOPs; MFU "
        f"{report.mfu * 100:.1f} % of {report.peak_flops_per_s / 1e12:.4g} TFLOP/s peak "
        f"({train.get('precision')})",
        f"  simulated    {report.events:,} events, {report.flows:,} flows in "
        f"{report.wall_time_s:.3g} s host time" + (
            f" ({report.folding})" if report.folding else ""),
        "",
        "Time per GPU, identical GPUs grouped (% of the iteration; communication may overlap "
        "compute, exposed communication does not):",
    ]
    groups = report.groups()

    def cell(value: float) -> str:
        share = value / t * 100 if t > 0 else 0.0
        return f"{format_duration(value)} {share:5.1f}%"

    time_rows = [
        [str(i + 1), str(grp.stage), str(len(grp.gpus)), grp.gpus[0], cell(grp.compute_s),
         cell(grp.communication_s), cell(grp.exposed_communication_s), cell(grp.bubble_s),
         cell(grp.idle_s)]
        for i, grp in enumerate(groups)]
    lines += format_table(["group", "stage", "GPUs", "first GPU", "compute", "communication",
                           "exposed comm", "bubble", "idle"], time_rows,
                          right={0, 1, 2, 4, 5, 6, 7, 8})
    spread = max((grp.spread_s for grp in groups), default=0.0)
    if t > 0 and spread > 1e-6 * t:
        lines.append(f"  (times are group means; members differ by at most "
                     f"{format_duration(spread)}, {spread / t * 100:.2g}% of the iteration)")
    lines += ["", f"Memory per GPU (GiB; capacity {report.gpu_memory_bytes / _GiB:.4g} GiB):"]
    mem_rows = []
    for i, grp in enumerate(groups):
        m = grp.memory
        share = m.total_bytes / report.gpu_memory_bytes * 100
        mem_rows.append([str(i + 1), f"{m.total_bytes / _GiB:.2f}", f"{share:.0f}%",
                         f"{m.weights_bytes / _GiB:.2f}", f"{m.gradients_bytes / _GiB:.2f}",
                         f"{m.optimizer_bytes / _GiB:.2f}",
                         f"{m.activations_bytes / _GiB:.2f}"])
    lines += format_table(["group", "peak", "of capacity", "weights", "gradients", "optimizer",
                           "activations"], mem_rows, right=set(range(7)))
    lines += offload_lines(report.offload)
    extra = format_bottlenecks(report.bottlenecks, t)
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- --out DIR


@dataclass(frozen=True, slots=True)
class OutputResult:
    """What :func:`write_output_dir` wrote (file names inside ``directory``) and notes
    (e.g. plots skipped)."""

    directory: Path
    files: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _is_previous_output(directory: Path) -> bool:
    names = {p.name for p in directory.iterdir()}
    return "summary.json" in names and names <= set(OUTPUT_FILES)


def write_output_dir(report: Report, directory: str | os.PathLike[str], *,
                     plots: bool = True, html: bool = True,
                     sections: Mapping[str, tuple[Any, str]] | None = None) -> OutputResult:
    """Write ``summary.json``, ``resolved.yaml``, ``trace.json`` (when the run traced),
    PNG plots (when ``plots`` and matplotlib is installed) and ``report.html`` (when
    ``html`` and Plotly is installed, see :mod:`scenarios.html_report`) into
    ``directory``; what was skipped, and why, is in the result's notes.  ``sections``:
    more of the run's findings, each as (its JSON, its text), added to summary.json
    under its name and to report.html's summary (e.g. faults and jobs,
    :mod:`scenarios.disruptions`).

    The directory appears whole or not at all: the files are written into a temporary
    sibling directory that is renamed into place at the end; any failure removes it and
    leaves ``directory`` as it was.  ``directory`` may be absent, empty, or a previous
    distsim output (only files this function writes, with a summary.json), which is
    replaced; anything else is refused with :class:`ConfigError`.
    """
    target = Path(directory)
    label = os.fspath(directory)
    if target.exists():
        if not target.is_dir():
            raise ConfigError("exists and is not a directory", key="--out", source=label)
        if any(target.iterdir()) and not _is_previous_output(target):
            raise ConfigError(
                "exists and holds files distsim did not write", key="--out", source=label,
                hint="give a new or empty directory; distsim replaces only its own previous "
                     "output (" + ", ".join(OUTPUT_FILES) + ")")
    parent = target.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = _make_staging(parent, target.name)
    except OSError as error:
        raise ConfigError(f"cannot create the output directory: {error.strerror or error}",
                          key="--out", source=label) from None
    notes: list[str] = []
    try:
        files = ["summary.json", "resolved.yaml"]
        sections = dict(sections or {})
        summary = {**report.to_json_dict(), **{k: v[0] for k, v in sections.items()}}
        (staging / "summary.json").write_text(
            json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        header = (f"# distsim: the resolved configuration of {report.name!r}, every default "
                  "filled in (SI units).\n# Run it again with: distsim run resolved.yaml\n")
        (staging / "resolved.yaml").write_text(
            header + yaml.safe_dump(report.config, sort_keys=False, allow_unicode=True),
            encoding="utf-8")
        if report.tracer is not None:
            trace, note = per_gpu_chrome_trace(report.tracer, report.timelines,
                                               report.per_gpu)
            with open(staging / "trace.json", "w", encoding="utf-8") as handle:
                # json.dump streams the encoding: no second copy of a large trace as text.
                json.dump(trace, handle, separators=(",", ":"))
            del trace
            files.append("trace.json")
            if note:
                notes.append(note)
        if plots:
            try:
                files += write_plots(report, staging)
            except PlotsUnavailable as missing:
                notes.append(f"plots skipped: {missing}")
        if html:
            try:
                text = format_summary(report) + "".join(v[1] for v in sections.values())
                page = run_report_html(report, text)
            except HtmlUnavailable as missing:
                notes.append(f"report.html skipped: {missing}")
            else:
                (staging / "report.html").write_text(page, encoding="utf-8")
                files.append("report.html")
        _commit(staging, target)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise ConfigError(f"cannot write the output: {error.strerror or error}",
                              key="--out", source=label) from None
        raise
    return OutputResult(target, tuple(files), tuple(notes))


def _make_staging(parent: Path, name: str) -> Path:
    """A new hidden directory beside the target, with the umask's usual permissions
    (``tempfile.mkdtemp`` would make it private, and the rename would keep that)."""
    for _ in range(100):
        staging = parent / f".{name}.{secrets.token_hex(4)}.partial"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging
    raise FileExistsError(f"cannot find a free staging name beside {name}")


def _commit(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, replacing an existing (empty or previous) one."""
    if not target.exists():
        os.rename(staging, target)
        return
    old = staging.with_name(staging.name.replace(".partial", ".old"))
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)

