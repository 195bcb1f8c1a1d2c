"""What a traced iteration records beside its spans: link counters and the trace's metadata."""

from __future__ import annotations

from typing import Any

from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.workloads.iteration.records import IterationResult, IterationSpec
from distsim_gpu.workloads.iteration.timeline import RankGroup

__all__ = ["record_link_counters", "trace_metadata"]


def trace_metadata(spec: IterationSpec, groups: list[RankGroup], seq_len: int,
                   result: IterationResult) -> dict[str, Any]:
    """What a reader of trace.json needs beyond the spans (the ``otherData.distsim``
    object): the shape keys of a cost table, and which GPUs each rank-group process
    stands for (its spans are every member's), so the trace imports back per GPU
    (:mod:`measured.distsim_trace`); where a member is faster than the group's pace, each
    member's share of its compute spans (``paces``: the rest it waits out, as the per-GPU
    breakdown counts it).  ``groups``: every rank group, folded images too."""
    par, train = spec.parallel, spec.training
    topo = spec.topology
    groups = {group.name: {"stage": group.stage, "replica": group.replica,
                           "gpus": list(group.gpus),
                           "ranks": [topo.rank_of(g) for g in group.gpus],
                           "slowdown": group.slowdown,
                           **({"paces": list(group.paces)} if group.paced else {})}
              for group in groups}
    return {"format": 1, "source": spec.source, "model": spec.model.name,
            "gpu": spec.gpu.name, "precision": train.precision,
            "micro_batch": train.micro_batch, "seq_len": seq_len,
            "hidden": spec.model.hidden, "tp": par.tp,
            "sequence_parallel": par.sequence_parallel, "recompute": train.recompute,
            "microbatches": result.microbatches, "world_size": len(topo.gpus),
            "iteration_time_s": result.iteration_time_s, "groups": groups}


def record_link_counters(sim: Simulation) -> None:
    """Link utilisation (fraction of capacity) as counter tracks, one per loaded link."""
    network = sim.network
    ids = network.link_ids

    def listener(now: float, links: list[int], loads: Any) -> None:
        for idx, load in zip(links, loads):
            link_id = ids[idx]
            capacity = network.capacity(link_id)
            sim.tracer.counter("links", f"{link_id[0]}->{link_id[1]}", now,
                               float(load) / capacity if capacity else 0.0)

    network.add_listener(listener)
