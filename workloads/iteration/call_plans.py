"""The plans of an iteration's repeated collective calls, chosen once per call shape.

A training iteration makes the same few calls hundreds of thousands of times: every
layer's tensor-parallel all-reduce of each rank group, every block's expert all-to-all on
each of its lanes.  :meth:`Communicator.choose <collectives.Communicator.choose>` caches
its answer already, but by a key it builds anew on every call (a tuple of the group's
GPUs), which a large MoE run paid a million times.  :class:`CallPlans` keeps the answer by
what the simulator holds anyway — the rank group, or the (cached) lanes list — and runs
the calls exactly as before: choosing has no effect on the simulation, so the same flows
start in the same order.

Folded (:mod:`workloads.iteration.folding`), a call among simulated rank groups (a
block's expert all-to-all; the tied-embedding or DualPipe mirror all-reduce between a
replica's two end stages) runs on their lanes and, beside them, their images'.  Each
image's lane moves at its simulated lane's rate (the fold check holds their links alike,
and the folded runs equal the full ones in tests/workloads/test_folding.py), so each
simulated lane is entered as one coflow with the same lane of every image, multiplicities
summed, as a folded tensor-parallel call and a pipeline send are: one flow where there
were as many as images (at 1,024 GPUs Mixtral 8x22B's 16 blocks started 16 flows per
all-to-all lane: four fifths of the run's flows).
"""

from __future__ import annotations

from typing import Any

import simpy
from distsim_gpu.collectives import Communicator
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.simcore.flows import LinkSet
from distsim_gpu.workloads.iteration.timeline import RankGroup

__all__ = ["CallPlans", "joint_coflow"]


class CallPlans:
    """Per simulator (its communicator and environment): plans by call shape.

    Every lanes list :meth:`run_lanes` sees must outlive the run, as the simulator's
    cached lanes do (:meth:`layer_group_lanes` builds its own once): an entry keeps its
    lanes alive and is checked against them, so a key's ``id`` always names the same list.
    """

    __slots__ = ("_comm", "_env", "_lane_plans", "_subgroup_lanes", "_tp_plans")

    def __init__(self, comm: Communicator, env: simpy.Environment) -> None:
        self._comm = comm
        self._env = env
        # A TP call's plan per (group, op, size), for a group that stands for itself.
        self._tp_plans: dict[tuple[RankGroup, str, float], CollectivePlan] = {}
        # Each lane's plan per (lanes id, op, size, wait), with the lanes it was made for
        # and, folded, each simulated lane's coflow joined with its images' (None: every
        # lane its own flow).
        self._lane_plans: dict[tuple[int, Any, Any, int | None], tuple[
            list[list[str]], list[CollectivePlan],
            list[tuple[LinkSet, float, float]] | None]] = {}
        # A narrower layer group's data-parallel lanes per (stage, sub-groups).
        self._subgroup_lanes: dict[tuple[int, Any], list[list[str]]] = {}

    def tp_plan(self, group: RankGroup, op: str, size: float) -> CollectivePlan:
        """``Communicator.choose(op, group's GPUs, size)``, once per (group, op, size)."""
        key = (group, op, size)
        plan = self._tp_plans.get(key)
        if plan is None:
            plan = self._tp_plans[key] = self._comm.choose(op, list(group.gpus), size)
        return plan

    def run_lanes(self, lanes: list[list[str]], op: str, size: float, tag: str,
                  wait: int | None = None) -> simpy.Event:
        """Run ``op`` on every lane; done when the first ``wait`` lanes are (all: None).
        Every lane's plan is chosen before the first runs (the same flows, in the same
        order, as choosing each just before it ran)."""
        key = (id(lanes), op, size, wait)
        plans = self._lane_plans.get(key)
        if plans is None or plans[0] is not lanes:
            chosen = [self._comm.choose(op, gpus, size) for gpus in lanes]
            plans = self._lane_plans[key] = (lanes, chosen, _joint_lanes(
                self._comm, chosen, size, wait))
        if plans[2] is not None:  # one coflow per lane and its images' (module docstring)
            transfer = self._comm.sim.network.transfer
            events = [transfer(links, wire_bytes, latency_s, tag).done
                      for links, wire_bytes, latency_s in plans[2]]
        else:
            run_plan = self._comm.run_plan
            events = [run_plan(plan, size, tag=tag) for plan in plans[1]][:wait]
        return events[0] if len(events) == 1 else simpy.AllOf(self._env, events)

    def layer_group_lanes(self, row: list[RankGroup], stage: int,
                          subgroups: tuple[tuple[int, ...], ...]) -> list[list[str]]:
        """A narrower layer group's gradients (workloads.strategy.layer_groups): a ring a
        shard over every replica's GPUs holding it; ``row``: ``stage``'s rank groups.
        Built once per stage and shards, so that :meth:`run_lanes` knows the list."""
        key = (stage, subgroups)
        lanes = self._subgroup_lanes.get(key)
        if lanes is None:
            lanes = self._subgroup_lanes[key] = [[m.gpus[t] for m in row for t in sub]
                                                 for sub in subgroups]
        return lanes


def _joint_lanes(comm: Communicator, plans: list[CollectivePlan], size: float,
                 wait: int | None) -> list[tuple[LinkSet, float, float]] | None:
    """Folded, a call's first ``wait`` lanes (the simulated unit's) each with the same lane
    of every image after them (lane ``i + k·wait``), as one coflow: ``(links, wire bytes,
    latency)`` with the images' link multiplicities summed, as the iteration enters a
    folded TP call or pipeline send.  None (every lane its own flow) unless every plan is
    one step at coflow fidelity (``run_plan`` starts exactly one flow for each) and each
    lane's images carry as many wire bytes after the same latency."""
    if (wait is None or wait >= len(plans) or len(plans) % wait
            or comm.params.fidelity != "coflow"
            or any(len(plan.steps) != 1 for plan in plans)):
        return None
    joint = []
    for lane in range(wait):
        one = joint_coflow(comm.sim.network, plans[lane::wait], size)
        if one is None or not one[1]:
            return None
        joint.append(one)
    return joint


def joint_coflow(network: Any, plans: list[CollectivePlan], size: float,
                 ) -> tuple[LinkSet, float, float] | None:
    """Plans that run alike (a folded call's and its images') as one coflow: ``(links,
    wire bytes, latency)``, each link's multiplicities summed over the plans; None unless
    each plan carries as many wire bytes after the same latency."""
    parts = [plan.coflow(size) for plan in plans]
    if (len({wire_bytes for wire_bytes, _links in parts}) > 1
            or len({plan.latency_s for plan in plans}) > 1):
        return None
    weights: dict[Any, float] = {}
    for _wire_bytes, links in parts:
        for link, streams in links.items():
            weights[link] = weights.get(link, 0.0) + streams
    return network.link_set(weights), parts[0][0], plans[0].latency_s
