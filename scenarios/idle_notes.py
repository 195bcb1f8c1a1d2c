"""Notes on settings a run cannot use, and on DeepEP asked of hardware it is not built for.

A scenario may carry a key that changes nothing in its run — an all-to-all mode where no
expert all-to-all runs (a dense model, or ``ep`` 1: every expert local), the SMs DeepEP
holds (``compute.comm_sms``) where no DeepEP exchange runs, DeepEP's node limit under
another all-to-all, the MoE overlap without all-to-alls, an FP8 amax setting at 16 bits
or under a recipe without an amax history.  Each is accepted (a sweep or a shared
``--set`` may put it there) and said, as an ``ignored`` note, so that a number a user
expected to move and did not has its reason beside it.  ``compute.comm_sms`` is the one
that still acts: its SMs are taken from every kernel as written.

DeepEP's kernels send inside a node over NVLink and across nodes from each GPU's own
NIC, with CUDA and NVSHMEM; on a node without NVLink, with fewer NICs than GPUs or with
non-NVIDIA GPUs distsim still runs its two-hop plan, which no table of those kernels
measures (a ``defaulted`` note).
"""

from __future__ import annotations

from typing import Protocol

from distsim_gpu.collectives.deepep import nvlink_copy_rate
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.cost.compute import roofline_behind
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = ["deepep_hardware_notes", "expert_exchange_absent", "idle_notes"]

#: Vendors' GPU generations whose kernels DeepEP's CUDA and NVSHMEM build for.
_NVIDIA_ARCHITECTURES = ("ampere", "hopper", "blackwell")


class IdleParts(Protocol):
    """What these notes read of one job of a run."""

    costs: object
    parallel: ParallelConfig
    comm: CommParams
    model: ModelSpec
    training: TrainingConfig


def idle_notes(run: IdleParts, topology: Topology) -> list[RunNote]:
    """Every note of this module for one job of a run on ``topology``."""
    return [*_moe_notes(run), *_fp8_notes(run),
            *deepep_hardware_notes(run, topology)]


def expert_exchange_absent(run: IdleParts) -> str:
    """Why the run has no expert all-to-all ('' when it has)."""
    if not run.model.is_moe:
        return "a dense model"
    return "" if run.parallel.ep > 1 else "ep 1: every expert is local"


def _moe_notes(run: IdleParts) -> list[RunNote]:
    comm, why = run.comm, expert_exchange_absent(run)
    notes = []
    if why and comm.all_to_all != "flat":
        notes.append(RunNote("ignored", f"all_to_all {comm.all_to_all} changes nothing: no "
                             f"expert all-to-all runs ({why})", "communication.all_to_all"))
    if why and run.parallel.moe_overlap:
        notes.append(RunNote("ignored", f"moe_overlap changes nothing: no expert all-to-all "
                             f"runs ({why})", "parallelism.moe_overlap"))
    if comm.deepep_max_nodes and (why or comm.all_to_all != "deepep"):
        notes.append(RunNote("ignored", "deepep_max_nodes is DeepEP's node-limited routing; "
                             "no DeepEP exchange runs here, so it changes nothing",
                             "communication.deepep_max_nodes"))
    roofline = roofline_behind(run.costs)
    held = roofline.comm_sms if roofline is not None else 0
    if held and (why or comm.all_to_all != "deepep"):
        notes.append(RunNote(
            "ignored", f"compute.comm_sms holds {held} SMs for DeepEP's kernels and every "
            f"kernel runs on the {roofline.compute_sms} it leaves, but no DeepEP exchange "
            "runs here (the SMs NCCL's overlapped collectives hold are "
            "communication.nccl_sms)", "compute.comm_sms"))
    return notes


def _fp8_notes(run: IdleParts) -> list[RunNote]:
    training = run.training
    if training.fp8_amax_reduction == "stage":  # the default
        return []
    if training.precision not in LOW_PRECISIONS:
        why = f"precision {training.precision} has no FP8 scales"
    else:
        roofline = roofline_behind(run.costs)
        recipe = roofline.resolved_stack.fp8 if roofline is not None else None
        if recipe is None or recipe.scale_update_kernel:
            return []
        why = f"the {recipe.name} recipe keeps no amax history"
    return [RunNote("ignored", f"fp8_amax_reduction {training.fp8_amax_reduction} changes "
                    f"nothing: {why}", "training.fp8_amax_reduction")]


def deepep_hardware_notes(run: IdleParts, topology: Topology) -> list[RunNote]:
    """``defaulted`` notes where DeepEP runs on a node it is not built for."""
    comm = run.comm
    if comm.all_to_all != "deepep" or expert_exchange_absent(run):
        return []
    notes, what = [], "a plan no table of DeepEP's kernels measures"
    if not nvlink_copy_rate(topology, comm):
        notes.append(RunNote("defaulted", "DeepEP copies inside a node over NVLink; this "
                             "cluster's GPUs have none, so its copies take the node's other "
                             f"links, {what}", "communication.all_to_all"))
    node = topology.node_of(next(iter(topology.gpus)))
    gpus, nics = len(topology.gpus_on_node(node)), len(topology.nics_on_node(node))
    if nics < gpus and topology.num_nodes > 1:
        nic_word = "NIC" if nics == 1 else "NICs"
        notes.append(RunNote("defaulted", f"DeepEP sends each GPU's RDMA from a NIC of its "
                             f"own; these nodes have {nics} {nic_word} for {gpus} GPUs, "
                             f"which share them in distsim, {what}",
                             "communication.all_to_all"))
    roofline = roofline_behind(run.costs)
    architecture = roofline.gpu.architecture if roofline is not None else ""
    if architecture and architecture not in _NVIDIA_ARCHITECTURES:
        notes.append(RunNote("defaulted", f"DeepEP's kernels are CUDA and NVSHMEM, for "
                             f"NVIDIA GPUs; on {architecture} GPUs its figures are taken as "
                             "they are, an assumption", "communication.all_to_all"))
    return notes
