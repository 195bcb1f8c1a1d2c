"""A run's notes: what the scenario left to defaults or estimates that moves the answer.

:func:`run_notes` gathers them after the run (:mod:`simcore.notes`): the cost table's
extrapolated rows, the kinds a fallback timed, the table rows that matched nothing (each
job's table, with several jobs), and each fault whose fabric re-route stalls the job
(the subnet manager's delay, :mod:`topology.faults`), an NVMe offload timed with the
node preset's estimated drive bandwidth, a low-precision GEMM rate no kernel table
measured (the roofline's ``notes``), a DeepEP exchange on fewer SMs than its NVLink
rate needs (:mod:`collectives.deepep`), compute slowed by the SMs overlapped NCCL
collectives hold, at NCCL's figure for a DGX node (:mod:`workloads.iteration.nccl_sms`),
an FP8 run's amax all-reduce left out for want of a roofline to say its recipe,
forward-backward pairs on the V with too few micro-batches for DeepSeek's own order,
userbuffers' reduce-scatter pipelines at Transformer Engine's default SMs and splits, a
MoE model's router left perfectly even, ZeRO-2 under a pipeline run as ZeRO-1, NVLink's
efficiency on a GPU generation that has no figure of its own taken from H100's, kernel
rates no table of the run's GPU measured (:mod:`workloads.cost.compute.kernel_fits`) and
a GPU run on a cluster built for another (:mod:`scenarios.gpu_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from distsim_gpu.collectives.deepep import nvlink_copy_rate, sm_bound_factor
from distsim_gpu.collectives.ep_kernels import EP_KERNELS
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.scenarios.gpu_notes import gpu_cluster_notes
from distsim_gpu.scenarios.idle_notes import expert_exchange_absent, idle_notes
from distsim_gpu.scenarios.tp_span_notes import tp_span_notes
from distsim_gpu.simcore.notes import RunNote, unique
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.topology import Topology
from distsim_gpu.topology.fabric_notes import fabric_notes, spans_nodes
from distsim_gpu.topology.faults import Fault
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from distsim_gpu.topology.routing import END_TO_END_POLICIES
from distsim_gpu.workloads.cost.compute import RooflineCosts, roofline_behind
from distsim_gpu.workloads.cost.compute.kernel_fits import kernel_fit_notes
from distsim_gpu.workloads.cost.compute.stacks import ONE_BUCKET
from distsim_gpu.workloads.cost.tp_overlap import TE_PIPELINE_SMS, TE_PIPELINE_SPLITS
from distsim_gpu.workloads.iteration.nccl_sms import nccl_streams
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.moe_routing import moe_loads
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = ["RunParts", "alltoall_choice_notes", "amax_notes", "deepep_notes", "fault_notes",
           "kv_replication_notes", "nccl_sm_notes", "nvlink_efficiency_notes", "offload_notes",
           "routing_notes", "run_notes", "schedule_notes", "tp_overlap_notes",
           "zero2_pipeline_notes"]


def offload_notes(parallel: ParallelConfig, topology: Topology) -> list[RunNote]:
    """A note when the optimizer state goes to NVMe drives whose bandwidth nobody gave:
    the node preset's figures are an estimate (topology.presets)."""
    offload = parallel.offload
    if "nvme" not in (offload.optimizer, offload.params):
        return []
    preset = NODE_PRESETS.get(str(topology.config.get("preset")))
    given = dict(offload.host)
    if preset is None or preset.host is None:
        return []  # no preset figures: host_figure asks for them by name
    host = preset.host
    defaulted = [(key, value) for key, value in (
        ("drive_read_bandwidth", host.drive_read_bytes_per_s),
        ("drive_write_bandwidth", host.drive_write_bytes_per_s)) if key not in given]
    return [RunNote("defaulted", f"NVMe offload: {key.replace('_', ' ')} "
                    f"{value / 1e9:.3g} GB/s per drive is the {preset.name} preset's "
                    "estimate (its guide does not name the drive)",
                    f"parallelism.offload.host.{key}") for key, value in defaulted]


def deepep_notes(comm: CommParams, costs: object, topology: Topology, *,
                 exchanges: bool = True) -> list[RunNote]:
    """Notes of an ``all_to_all: deepep`` run: its kernels' caveat (DeepEP's host wait for
    each dispatch's token counts, HybridEP's copies taken as unbound by their SMs;
    ``EpKernels.caveat``), or that ``ep_kernels`` is idle without it; the kernels' copy
    fraction taken from a fit on another GPU generation; their SMs not counted
    (``compute.comm_sms`` 0); or those SMs binding DeepEP's NVLink copies at B200's figure
    an SM, not the user's (:func:`~collectives.deepep.sm_bound_factor`).  None where no
    expert all-to-all runs (``exchanges`` False: :mod:`scenarios.idle_notes` says so)."""
    kernels = EP_KERNELS[comm.ep_kernels]
    if comm.all_to_all == "deepep" and not exchanges:
        return []
    if comm.all_to_all != "deepep":
        return [] if kernels.name == "deepep" else [RunNote(
            "defaulted", f"communication.ep_kernels {kernels.name} names the kernels of "
            f"all_to_all: deepep; this run's all-to-alls are {comm.all_to_all}, so it "
            "changes nothing", "communication.ep_kernels")]
    roofline = roofline_behind(costs)
    notes = [kernels.caveat]
    architecture = roofline.gpu.architecture if roofline is not None else ""
    if (architecture != kernels.fit_architecture
            and comm.deepep_nvlink_efficiency == kernels.nvlink_efficiency):
        notes.append(RunNote(
            "defaulted", f"{kernels.label}'s NVLink copies run at "
            f"{comm.deepep_nvlink_efficiency:g} of NCCL's payload rate, the figure "
            f"{kernels.fit_rows} give; no table measures them on "
            f"{architecture or 'this'} GPUs", "communication.deepep_nvlink_efficiency"))
    if not comm.deepep_sms:
        return [*notes, RunNote(
            "defaulted", f"compute.comm_sms is 0: {kernels.label}'s kernels take no SMs from "
            "compute and their SMs do not bound its copies (DeepEP runs on 20-24, "
            "Megatron-Core's default is 20; HybridEP on 16-32)", "compute.comm_sms")]
    token_bytes = 2.0 * comm.moe_hidden  # a 16-bit token: the combine's
    factor = sm_bound_factor(topology, comm, token_bytes)
    if factor == 1.0 or (comm.deepep_sm_bytes_per_s, comm.deepep_sm_token_s) != (
            kernels.sm_bytes_per_s, kernels.sm_token_s):
        return notes  # unbound, or bound at the user's own figures an SM
    link_rate = nvlink_copy_rate(topology, comm)
    return [*notes, RunNote(
        "defaulted", f"DeepEP's NVLink copies are bound by its {comm.deepep_sms} SMs: "
        f"{link_rate / factor / 1e9:.0f} GB/s a GPU of NVLink's {link_rate / 1e9:.0f} for "
        f"16-bit tokens, {comm.deepep_sm_rate(token_bytes) / 1e9:.0f} GB/s an SM "
        f"({comm.deepep_sm_token_s * 1e6:.2f} us a token and "
        f"{comm.deepep_sm_bytes_per_s / 1e9:.0f} GB/s, B200's SM sweep of its normal "
        "kernels)", "communication.deepep_sm_rate")]


def nvlink_efficiency_notes(comm: CommParams, topology: Topology) -> list[RunNote]:
    """A note when NVLink carries bytes at H100's payload efficiency on GPUs of another
    generation that has no figure of its own (Blackwell's NVLink 5, AMD's xGMI): the
    rates of every NVLink collective rest on it."""
    generation = comm.nvlink_efficiency_borrowed_by
    if not generation or not any(link.kind == "nvlink" for link in topology.links()):
        return []
    efficiency = comm.efficiency_of("nvlink")
    link = "xGMI" if generation.startswith("cdna") else "NVLink"  # AMD's: kind nvlink too
    return [RunNote(
        "defaulted", f"{link} on {generation} GPUs carries payload at {efficiency:g} of its "
        "rate, H100's NVLink figure (NVIDIA's ~370 GB/s ring bus bandwidth on 450 GB/s): "
        f"distsim has no measured figure for {generation}; set "
        "communication.link_efficiency.nvlink (nccl-tests: --set "
        "comm.link_efficiency.nvlink=...) for another", "communication.link_efficiency.nvlink")]


def nccl_sm_notes(comm: CommParams, costs: object, parallel: ParallelConfig) -> list[RunNote]:
    """A note when compute overlapped with NCCL collectives runs on the SMs they leave at
    the default figure, NCCL's for a DGX node (:mod:`workloads.iteration.nccl_sms`), or
    is not slowed at all because a cost table without a roofline does not say the GPU's
    SMs."""
    streams = nccl_streams(parallel, comm)
    if not comm.nccl_sms or not streams:
        return []
    roofline = roofline_behind(costs)
    if roofline is None:
        return [RunNote(
            "unmodelled", "compute overlapped with NCCL collectives is not slowed by the SMs "
            "their kernels hold: the cost table has no roofline fallback to give the GPU's "
            "SMs", "communication.nccl_sms")]
    if comm.nccl_sms_given:
        return []
    sms = roofline.compute_sms
    what = "data-parallel gathers and reductions" + (
        ", expert all-to-alls" if "ep" in streams else "")
    return [RunNote(
        "defaulted", f"compute overlapped with NCCL collectives ({what}) runs on the SMs "
        f"their kernels leave: {comm.nccl_sms} a collective ({sms - comm.nccl_sms} of {sms} "
        "with one in flight), the figure NCCL's maintainers give for a DGX node with 8 NICs, "
        "taken for every cluster; set communication.nccl_sms for another",
        "communication.nccl_sms")]


def tp_overlap_notes(parallel: ParallelConfig, costs: object) -> list[RunNote]:
    """A note when ``tp_comm_overlap`` pipelines every forward reduce-scatter at Transformer
    Engine's default chunks and SMs (:mod:`workloads.cost.tp_overlap`), where NeMo's
    per-model presets set them GEMM by GEMM; or when the stack runs TP overlap and the run
    does not, because distsim does not model it beside ``fb_overlap``'s pairs."""
    roofline = roofline_behind(costs)
    if (roofline is not None and roofline.stack.tp_comm_overlap and parallel.fb_overlap
            and parallel.sequence_parallel and parallel.tp > 1):
        return [RunNote(
            "unmodelled", f"the {roofline.stack.name} stack runs userbuffers' TP overlap; "
            "distsim does not model it beside fb_overlap's forward-backward pairs, so this "
            "run's TP collectives are not overlapped", "parallelism.tp_comm_overlap")]
    if not (parallel.tp_comm_overlap and parallel.tp_comm_overlap_sms == TE_PIPELINE_SMS
            and parallel.tp_comm_overlap_splits == TE_PIPELINE_SPLITS):
        return []
    return [RunNote(
        "defaulted", f"userbuffers' forward reduce-scatters run in {TE_PIPELINE_SPLITS} "
        f"chunks on {TE_PIPELINE_SMS} SMs beside their GEMMs, Transformer Engine's default, "
        "for every GEMM (NeMo's per-model presets set 8-32 SMs per GEMM, or a ring exchange "
        "on one SM)", "parallelism.tp_comm_overlap_sms")]


def amax_notes(training: TrainingConfig, costs: object,
               parallel: ParallelConfig) -> list[RunNote]:
    """A note when an FP8 run's amax all-reduce is not simulated because its cost table
    has no roofline fallback to say whether the stack's recipe keeps an amax history
    (:mod:`workloads.iteration.amax`)."""
    if (training.precision not in LOW_PRECISIONS or training.fp8_amax_reduction == "none"
            or roofline_behind(costs) is not None or parallel.dp_cp * parallel.tp == 1):
        return []
    return [RunNote(
        "unmodelled", "FP8 delayed scaling's amax all-reduce after each chunk's forward and "
        "backward is not simulated: the cost table has no roofline fallback to say whether "
        "the stack's recipe keeps an amax history", "training.fp8_amax_reduction")]


def zero2_pipeline_notes(parallel: ParallelConfig) -> list[RunNote]:
    """ZeRO-2 under a pipeline is ZeRO-1 in time and memory (cost.traffic's
    ``reduces_every_microbatch``): say so, since the stage's name promises sharded gradients."""
    if parallel.zero != 2 or parallel.pp == 1:
        return []
    return [RunNote(
        "defaulted", "zero 2 under a pipeline reduces the gradients once a step, on the last "
        "micro-batch, as PyTorch's pipeline stages run FSDP without gradient sync until "
        "then (DeepSpeed refuses stage 2 with pipeline parallelism): each stage holds its "
        "whole gradients until the reduction, so time and memory are ZeRO-1's",
        "parallelism.zero")]


def ddp_overlap_notes(parallel: ParallelConfig, costs: object) -> list[RunNote]:
    """A note where the stack left the data-parallel overlaps off because ``dp`` is 1
    (NeMo's ``MegatronCommOverlapCallback``: overlaps only where data_parallel_size > 1)
    while the context-parallel ranks still reduce gradients: a step with no overlap of
    them, which a user who set nothing may not expect."""
    roofline = roofline_behind(costs)
    if (roofline is None or not roofline.stack.dp_overlaps_need_dp or parallel.dp > 1
            or parallel.dp_cp == 1 or parallel.bucket_params != ONE_BUCKET
            or parallel.overlap_param_gather):
        return []
    return [RunNote(
        "defaulted", f"{roofline.stack.name} overlaps the data-parallel gradient reduction "
        "and parameter gather only where dp > 1 (NeMo's communication-overlap callback): "
        f"at dp 1 the {parallel.dp_cp} context-parallel ranks reduce their gradients in one "
        "call after the backward, and the distributed optimizer gathers after the step",
        "parallelism.bucket_params")]


def schedule_notes(parallel: ParallelConfig, microbatches: int) -> list[RunNote]:
    """A note when ``fb_overlap`` on the V pairs by distsim's list schedule because
    DeepSeek's own DualPipeV order, with its zero-bubble split backwards, needs at least
    ``2·pp`` micro-batches (:func:`~workloads.strategy.schedule.deepseek_v_program`); under
    DualPipe, how its two copies of a stage sum their gradients."""
    needed = 2 * parallel.pp
    if parallel.schedule == "dualpipe":
        return [RunNote(
            "defaulted", "DualPipe's two copies of each stage sum their gradients in an "
            "all-reduce between the mirror ranks (s and pp − 1 − s) of what each one's "
            "optimizer updates, after the data-parallel reduction (DeepSeek does not say "
            "how its run sums them); each copy keeps its own optimizer state",
            "parallelism.schedule")]
    if not (parallel.fb_overlap and parallel.schedule == "dualpipev") or microbatches >= needed:
        return []
    return [RunNote(
        "defaulted", f"fb_overlap on dualpipev with {microbatches} micro-batches a pipeline, "
        f"fewer than the 2·pp = {needed} DeepSeek's DualPipeV order needs: the pairs follow "
        "distsim's V list schedule, without DualPipe's zero-bubble split backwards",
        "training.global_batch")]


def fault_notes(faults: Sequence[Fault], topology: Topology,
                iteration_time_s: float) -> list[RunNote]:
    """A note per fault that goes down during the run under static or hashed routing: its
    flows stop for the subnet manager's re-route (``subnet_manager_delay_s``)."""
    if topology.routing.policy in END_TO_END_POLICIES:
        return []  # adaptive routing re-routes at once: no stall
    notes = []
    for i, fault in enumerate(faults):
        if fault.kind != "down" or fault.at_s <= 0 or fault.subnet_manager_delay_s <= 0:
            continue
        if fault.at_s >= iteration_time_s:
            continue  # after the run: check_faults_in_run says so
        notes.append(RunNote(
            "fault", f"{fault.describe()}: the flows crossing it stall "
            f"{format_duration(fault.subnet_manager_delay_s)} from "
            f"{format_duration(fault.at_s)} while the subnet manager re-routes (its sweep "
            f"interval; adaptive routing re-routes at once), inside the "
            f"{format_duration(iteration_time_s)} iteration",
            f"faults[{i}].subnet_manager_delay_s"))
    return notes


def kv_replication_notes(model: ModelSpec, parallel: ParallelConfig) -> list[RunNote]:
    """A note when tensor parallelism is wider than the model's key/value heads: each is
    then replicated on ``tp / kv_heads`` tensor ranks (its projection's weights and FLOPs
    on each), as inference engines do; Megatron-Core and Transformer Engine split whole
    key/value heads and refuse such a tp, so a run that meant their stacks is told."""
    if parallel.tp <= model.kv_heads:
        return []
    return [RunNote(
        "defaulted", f"tp {parallel.tp} is wider than {model.name}'s {model.kv_heads} "
        f"key/value heads: each is replicated on {parallel.tp // model.kv_heads} tensor "
        "ranks (its K/V projections' weights and FLOPs on each); Megatron-Core and "
        "Transformer Engine refuse this, splitting whole key/value heads", "parallelism.tp")]


def routing_notes(model: ModelSpec, ep: int = 1) -> list[RunNote]:
    """A note when a MoE model's router is left at its default: every expert as loaded as
    every other, which no trained router is (:mod:`workloads.specs.moe_routing`).  A
    scenario that writes ``routing: uniform`` has chosen it, and is not told; one that
    sets only the capacity or the placement is.  And one when a capacity drops tokens:
    the model FLOPs behind MFU count every token's experts, the dropped ones' too."""
    if not model.is_moe:
        return []
    notes = []
    loads = moe_loads(model.moe, tokens=1.0, experts=model.experts, top_k=model.top_k,
                      ep=ep)
    if loads.dropped > 0:
        notes.append(RunNote(
            "headline", f"MFU and the model FLOP/s count every token's {model.top_k} "
            f"experts (the model's FLOPs a token, as MFU is defined); the capacity drops "
            f"{loads.dropped / loads.assignments * 100:.3g} % of the assignments, whose "
            "expert FLOPs no GPU runs", "model.moe.capacity_factor"))
    if model.moe.routing_given:
        return notes
    return [*notes, RunNote(
        "defaulted", f"{model.name}'s router spreads every micro-batch's tokens evenly over "
        f"its {model.experts} experts (uniform): a real router's imbalance slows the "
        "busiest expert-parallel rank and its all-to-alls", "model.moe.routing")]


class RunParts(Protocol):
    """What the notes read of one job of a run (a scenario or one of its jobs)."""

    costs: object
    parallel: ParallelConfig
    comm: CommParams
    microbatches: int
    model: ModelSpec
    training: TrainingConfig
    topology: Topology  # the job's GPUs, in rank order


def alltoall_choice_notes(comm: CommParams, chosen: Mapping[str, int]) -> list[RunNote]:
    """Under ``all_to_all: auto``, which plan its all-to-alls ran: ``chosen`` counts the
    call shapes (group and size) that ran each (``IterationResult.alltoall_algorithms``).
    The choice is per call, the least predicted time, so a run may use both."""
    if comm.all_to_all != "auto" or not chosen:
        return []
    shapes = sum(chosen.values())
    what = (f"{next(iter(chosen))} for every all-to-all" if len(chosen) == 1 else
            ", ".join(f"{name} for {count}" for name, count in chosen.items())
            + f" of its {shapes} kinds of call (a group and a size)")
    return [RunNote("defaulted", f"all_to_all auto ran {what}: per call, the least "
                    "predicted time of the flat exchange and the hierarchical one; set "
                    "communication.all_to_all to either to compare", "communication.all_to_all")]


def run_notes(runs: Sequence[RunParts], faults: Sequence[Fault], topology: Topology,
              iteration_time_s: float, *,
              alltoall_algorithms: Mapping[str, int] | None = None) -> tuple[RunNote, ...]:
    """Every note of a run of ``runs`` (each job's cost model, strategy, micro-batches a
    pipeline, collectives, model and training) that took ``iteration_time_s`` on
    ``topology`` under ``faults``, without repeats; ``alltoall_algorithms``: what the
    first job's all-to-alls ran (:func:`alltoall_choice_notes`)."""
    notes: list[RunNote] = []
    if runs:
        notes += alltoall_choice_notes(runs[0].comm, alltoall_algorithms or {})
    for run in runs:
        notes += getattr(run.costs, "notes", ())  # a cost table's, or the roofline's defaults
        if isinstance(run.costs, RooflineCosts):  # a table's measured kernels are its own
            notes += kernel_fit_notes(run.costs)
        roofline = roofline_behind(run.costs)
        notes += gpu_cluster_notes(roofline.gpu if roofline else None, run.topology)
        notes += offload_notes(run.parallel, topology)
        notes += schedule_notes(run.parallel, run.microbatches)
        notes += zero2_pipeline_notes(run.parallel)
        notes += ddp_overlap_notes(run.parallel, run.costs)
        notes += deepep_notes(run.comm, run.costs, topology,
                              exchanges=not expert_exchange_absent(run))
        notes += nccl_sm_notes(run.comm, run.costs, run.parallel)
        notes += nvlink_efficiency_notes(run.comm, run.topology)
        notes += tp_overlap_notes(run.parallel, run.costs)
        notes += amax_notes(run.training, run.costs, run.parallel)
        notes += routing_notes(run.model, run.parallel.ep)
        notes += kv_replication_notes(run.model, run.parallel)
        notes += idle_notes(run, topology)
        notes += tp_span_notes(run.parallel, run.topology)
    notes += fault_notes(faults, topology, iteration_time_s)
    notes += fabric_notes(topology, within="cluster.",
                          nics_carry=any(spans_nodes(run.topology) for run in runs))
    return unique(notes)
