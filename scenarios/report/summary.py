"""The terminal summary of a run: headline metrics, per-GPU time and memory, bottlenecks.

:func:`format_summary` prints what :class:`~scenarios.report.record.Report` holds: the
cluster, the model, strategy and batch (from the typed objects the run was built from),
the iteration time, throughput, model FLOP/s and MFU, then per group of identical GPUs the
time breakdown and the memory, any offloaded optimizer step, and the bottlenecks (critical
path and busiest links, :mod:`scenarios.report.bottlenecks`).  :func:`format_table` is the
aligned-columns helper other commands' tables share.
"""

from __future__ import annotations

from collections.abc import Sequence

from distsim_gpu.scenarios.report.bottlenecks import format_bottlenecks
from distsim_gpu.scenarios.report.record import Report
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.units import format_duration, parse_bandwidth
from distsim_gpu.workloads.cost.traffic import seq_len_of
from distsim_gpu.workloads.iteration.offload_step import offload_lines
from distsim_gpu.workloads.specs.gpus import GpuSpec
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.moe_routing import UNIFORM, describe_loads
from distsim_gpu.workloads.specs.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from distsim_gpu.workloads.strategy.dimensions import strategy_summary
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

__all__ = ["format_notes", "format_summary", "format_table"]

_GiB = 2.0**30


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


def _strategy(par: ParallelConfig, train: TrainingConfig) -> str:
    parts = [strategy_summary(par)]
    if par.tp > 1 and par.tp_mode != "1d":  # (1d, Megatron's, is the default)
        parts.append(f"tp_mode {par.tp_mode}"
                     + (f" depth {par.tp_depth}" if par.tp_depth > 1 else ""))
    if par.pp > 1:
        schedule = f"{par.schedule} schedule"
        if par.schedule == "interleaved":
            schedule += f" ×{par.interleave}"
        parts.append(schedule)
    if par.sequence_parallel:
        parts.append("sequence parallel")
    if par.moe_overlap:
        parts.append("MoE all-to-alls overlapped")
    if par.fb_overlap:
        parts.append("forward-backward pairs overlapped")
    if par.fsdp:
        parts.append("FSDP")
    elif par.zero:
        parts.append(f"ZeRO-{par.zero}")
    plan = par.operator_sharding
    if plan is not None:  # OSDP (workloads.strategy.operator_sharding)
        listed = plan.sharded if plan.default == "replicated" else plan.replicated
        other = "sharded" if plan.default == "replicated" else "replicated"
        parts.append(f"operators {plan.default}"
                     + (f" but {other} {'+'.join(listed)}" if listed else "")
                     + "".join(f", {op} split {k}" for op, k in plan.split.items()))
    if par.layer_groups:  # Galvatron's per-layer strategies (workloads.strategy.layer_groups)
        parts.append("layers " + " + ".join(
            f"{g.layers}×tp{g.tp}" + (f" {g.recompute}" if g.recompute is not None else "")
            for g in par.layer_groups))
    offload = par.offload
    if offload.enabled:
        parts.append(f"offload optimizer {offload.optimizer}, params {offload.params}"
                     + (", delayed update" if offload.delayed_update else ""))
    modules = ("" if train.recompute != "selective"
               or train.recompute_modules == DEFAULT_RECOMPUTE_MODULES
               else f" ({', '.join(train.recompute_modules) or 'nothing'})")
    fp8_swiglu = ", SwiGLU inputs in FP8" if train.activation_func_fp8_input_store else ""
    parts.append(f"recompute {train.recompute}{modules}; {train.precision}{fp8_swiglu}")
    return "; ".join(parts)


def _experts(model: ModelSpec, par: ParallelConfig) -> list[str]:
    """The router's line (workloads.specs.moe_routing), when the model's router is not the
    plain uniform, dropless one (the scenario sets ``model.moe``)."""
    if model.moe == UNIFORM:
        return []
    return ["  experts      " + describe_loads(model.moe, experts=model.experts,
                                               top_k=model.top_k, ep=par.ep)]


def _batch(par: ParallelConfig, train: TrainingConfig, microbatches: int) -> str:
    plural = "micro-batch" if microbatches == 1 else "micro-batches"
    per = "pipeline" if par.pp > 1 else "replica"
    return (f"{train.global_batch} sequences = {microbatches} {plural} of "
            f"{train.micro_batch} per {per} × dp {par.dp}")


def _window(model: ModelSpec) -> str:
    """``; <kind> attention within <tokens> tokens ...`` for a model with local layers."""
    window = model.attention_window
    if window is None:
        return ""
    where = (f", one layer in {window.full_every} in full" if window.full_every
             else " in every layer")
    what = "a sliding window of" if window.kind == "sliding" else "chunks of"
    return f"; attention within {what} {window.tokens} tokens{where}"


def _job_lines(report: Report) -> list[str]:
    """The model, strategy, batch (and router) lines."""
    model, par, train = report.model, report.parallel, report.training
    if model is None or par is None or train is None:  # a Report built by hand
        return []
    if report.job_runs:
        return _jobs_lines(report)
    shared = ([f"  jobs         {report.jobs} share the cluster; these lines and figures are "
               "the first job's"] if report.jobs > 1 else [])
    mtp = f" + {model.mtp_depth} MTP module(s)" if model.mtp_depth else ""
    return [*shared, f"  model        {model.name}: {model.layers} layers{mtp}, hidden "
            f"{model.hidden}, {model.heads} heads, sequence {seq_len_of(model, train)}"
            f"{_window(model)}",
            f"  strategy     {_strategy(par, train)}",
            f"  batch        {_batch(par, train, report.microbatches)}",
            *_experts(model, par)]


def _jobs_lines(report: Report) -> list[str]:
    """Each job's own model, strategy and batch; the figures below are the first's."""
    first = report.job_runs[0].name
    lines = [f"  jobs         {len(report.job_runs)} share the cluster; the figures below are "
             f"job {first}'s (each job's, alone and shared, at the end)"]
    for job in report.job_runs:
        model, train = job.model, job.training
        lines += [f"  job {job.name:<8} {model.name}: {model.layers} layers, hidden "
                  f"{model.hidden}, {model.heads} heads, sequence {seq_len_of(model, train)}",
                  f"               {_strategy(job.parallel, train)}; batch "
                  f"{train.global_batch} sequences, micro-batch {train.micro_batch}"]
    return lines


def _gpu_text(gpu: GpuSpec | None) -> str:
    """The GPU's name, and its power limit where one is below the rated power."""
    if gpu is None:
        return "?"
    limit, tdp = gpu.power_limit_w, gpu.tdp_w
    if not limit or not tdp or limit >= tdp:
        return gpu.name
    return f"{gpu.name} limited to {limit:g} W of {tdp:g} W (compute clocks lower)"


def _data_loading(report: Report) -> list[str]:
    """The loader's line: its time per iteration and whether the GPUs wait for it."""
    if not report.data_loading_s:
        return []
    loader = report.training.data_loader if report.training is not None else None
    workers = loader.workers if loader is not None else 1
    how = (f"{workers} worker{'s' if workers != 1 else ''}" if workers
           else "in the training process")
    wait_s = next((e.duration_s for e in reversed(report.critical_path)
                   if e.kind == "data loading"), 0.0)
    verdict = (f"the GPUs wait {format_duration(wait_s)} for it" if wait_s
               else "hidden behind training")
    return [f"  data loading {format_duration(report.data_loading_s)} per iteration "
            f"({how}): {verdict}"]


def _network_lines(cluster: dict) -> list[str]:
    """The NICs and fabric the run resolved, so that a what-if on them shows in the header
    (a run at 800 Gb/s or 2:1 read like one at 400 Gb/s and 1:1); none where the cluster
    has no NIC or no fabric."""
    nic, fabric = cluster.get("nic"), cluster.get("fabric")
    if not isinstance(nic, dict) or not isinstance(fabric, dict) or "bandwidth" not in nic:
        return []
    speed = parse_bandwidth(nic["bandwidth"]) * 8 / 1e9
    ratios = [(name.removesuffix("oversubscription").replace("_", " "), float(value))
              for name, value in fabric.items()
              if name.endswith("oversubscription") and value and float(value) > 1.0]
    kind = fabric.get("kind", "?")
    tier = ("" if not ratios and kind == "dragonfly"  # (its global links are its own taper)
            else "non-blocking, " if not ratios else
            ", ".join(f"{where}{ratio:g}:1" for where, ratio in ratios) + " oversubscribed, ")
    return [f"  network      {nic.get('count', '?')} NICs a node at {speed:.4g} Gb/s; "
            f"{kind} ({fabric.get('technology', '?')}, {tier}"
            f"{fabric.get('routing', '?')} routing)"]


def _headline(report: Report) -> list[str]:
    """The run's setup and its headline figures, down to the host time it took."""
    t = report.iteration_time_s
    cluster = report.config.get("cluster", {})  # the cluster spec as the run resolved it
    nodes = cluster.get("nodes")
    where = f" ({report.source})" if report.source else ""
    precision = report.training.precision if report.training is not None else None
    return [
        f"distsim run: {report.name}{where}",
        f"  cluster      {cluster.get('name', '?')}: {report.cluster_gpus or report.num_gpus} "
        "GPUs"
        + (f" on {nodes} node(s)" if nodes else "") + f", {_gpu_text(report.gpu)}",
        *_network_lines(cluster),
        *_job_lines(report),
        f"  iteration    {format_duration(t)}",
        *_data_loading(report),
        f"  throughput   {report.samples_per_s:,.4g} samples/s, {report.tokens_per_s:,.0f} "
        "tokens/s",
        f"  per GPU      {report.model_tflops_per_gpu:.4g} TFLOP/s of model FLOPs; MFU "
        f"{report.mfu * 100:.1f} % of {report.peak_flops_per_s / 1e12:.4g} TFLOP/s peak "
        f"({precision})",
        f"  simulated    {report.events:,} events, {report.flows:,} flows in "
        f"{report.wall_time_s:.3g} s host time" + (
            f" ({report.folding})" if report.folding else ""),
    ]


def format_summary(report: Report) -> str:
    """The terminal summary: headline metrics with units, then per group of identical GPUs
    the time breakdown (seconds and % of the iteration) and the memory (GiB)."""
    t = report.iteration_time_s
    lines = [
        *_headline(report),
        "",
        "Time per GPU, identical GPUs grouped (% of the iteration; communication may overlap "
        "compute, exposed communication does not):",
    ]
    groups = report.groups()

    def cell(value: float) -> str:
        share = value / t * 100 if t > 0 else 0.0
        return f"{format_duration(value)} {share:5.1f}%"

    # The GPU's wait for the host (an offloaded optimizer step) has its own column where
    # some GPU has one: compute, host, exposed comm, bubble and idle sum to the iteration.
    host = any(grp.host_s for grp in groups)
    time_rows = [
        [str(i + 1), str(grp.stage), str(len(grp.gpus)), grp.gpus[0], cell(grp.compute_s),
         *([cell(grp.host_s)] if host else []), cell(grp.communication_s),
         cell(grp.exposed_communication_s), cell(grp.bubble_s), cell(grp.idle_s)]
        for i, grp in enumerate(groups)]
    lines += format_table(["group", "stage", "GPUs", "first GPU", "compute",
                           *(["host"] if host else []), "communication", "exposed comm",
                           "bubble", "idle"], time_rows,
                          right={0, 1, 2, *range(4, len(time_rows[0]) if time_rows else 9)})
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
    lines += format_notes(report.notes)
    return "\n".join(lines) + "\n"


def format_notes(notes: Sequence[RunNote]) -> list[str]:
    """The run's notes as terminal lines (none without notes)."""
    if not notes:
        return []
    return ["", "Notes (assumptions that move the answer):",
            *(f"  note: {note}" for note in notes)]
