"""Jobs sharing one fabric, and runs the fabric changes under (faults at a time).

Several training jobs on one cluster each own some GPUs (:func:`place_jobs`: ``packed``
— the next free nodes in cluster order; ``spread`` — their nodes evenly spread over the
free nodes; or an explicit list of GPUs) and each runs its own iteration, but their
flows share one :class:`~simcore.FlowNetwork`: where their routes meet, links are shared
max-min fairly between every flow on them, whichever job it belongs to, exactly as within
one job.  :func:`simulate_jobs` runs every job alone on the cluster (nothing else on it),
then all of them together on one SimPy environment, and reports each job's slowdown and
the links where their traffic met.

One job on a fabric whose capacities change at given times (:mod:`topology.faults`,
``at_s > 0``) runs the same way (:func:`simulate_on_fabric`): the faults are SimPy
processes on the job's environment.

A job's iteration is :mod:`workloads.iteration`'s, on a *job view* of the cluster
(:meth:`Topology.job_view`: its GPUs, ranked from 0; the whole fabric).  Running several
on one environment builds each job's :class:`~workloads.iteration.simulator.IterationSimulator`
on one shared :class:`~simcore.Simulation`, starts them all, runs it once and collects
each job's result.  Folding of replicas and
closed-form TP collectives assume that nothing else uses the job's links, so shared runs
(and runs with timed faults) simulate every replica, every collective as flows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.topology.faults import (
    Fault,
    check_faults_in_run,
    check_job_survives,
    inject_faults,
)
from distsim_gpu.workloads.iteration.simulator import (
    IterationResult,
    IterationSimulator,
    IterationSpec,
    simulate_iteration,
)
from distsim_gpu.workloads.iteration.tracing import trace_metadata

__all__ = [
    "PLACEMENTS",
    "JobOutcome",
    "JobsResult",
    "MeetingLink",
    "place_jobs",
    "simulate_jobs",
    "simulate_on_fabric",
]

PLACEMENTS = ("packed", "spread")


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job: its GPUs, its iteration alone on the cluster and beside the others."""

    name: str
    gpus: tuple[str, ...]
    alone: IterationResult
    shared: IterationResult

    @property
    def slowdown(self) -> float:
        """Iteration time shared / alone (1: the neighbours cost nothing)."""
        return self.shared.iteration_time_s / self.alone.iteration_time_s


@dataclass(frozen=True, slots=True)
class MeetingLink:
    """A link that carried several jobs' bytes in the shared run: bytes per job, and the
    seconds it was saturated (all flows on it held to their share of it)."""

    link: tuple[str, str]
    bytes_by_job: Mapping[str, float]
    saturated_s: float


@dataclass(frozen=True, slots=True)
class JobsResult:
    """Every job's outcome and where their traffic met (busiest shared links first)."""

    jobs: tuple[JobOutcome, ...]
    meeting_links: tuple[MeetingLink, ...]
    shared_links: int  # how many links carried bytes of more than one job

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        return {
            "jobs": [{"name": j.name, "gpus": len(j.gpus),
                      "alone_iteration_s": j.alone.iteration_time_s,
                      "shared_iteration_s": j.shared.iteration_time_s,
                      "slowdown": j.slowdown} for j in self.jobs],
            "shared_links": self.shared_links,
            "meeting_links": [{"link": f"{m.link[0]} -> {m.link[1]}",
                               "bytes_by_job": dict(m.bytes_by_job),
                               "saturated_s": m.saturated_s}
                              for m in self.meeting_links[:top]],
        }


def place_jobs(topology: Topology, requests: Sequence[tuple[str, int, Any]],
               source: str | None = None, prefix: str = "jobs") -> dict[str, tuple[str, ...]]:
    """GPUs for each ``(name, gpus wanted, placement)``, in order; ``placement`` is
    ``packed``, ``spread`` or a list of GPU names.  Explicit lists are served first."""
    taken: dict[str, str] = {}
    placed: dict[str, tuple[str, ...]] = {}
    for i, (name, count, placement) in enumerate(requests):
        if isinstance(placement, (list, tuple)):
            placed[name] = _explicit(topology, name, count, placement, taken,
                                     f"{prefix}[{i}].placement", source)
    for i, (name, count, placement) in enumerate(requests):
        if isinstance(placement, (list, tuple)):
            continue
        if placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {placement!r}", key=f"{prefix}[{i}].placement",
                              source=source, hint="packed, spread, or a list of GPU names")
        free = [g for g in topology.gpus if g not in taken]
        if count > len(free):
            raise ConfigError(f"job {name!r} needs {count} GPUs; {len(free)} are free",
                              key=f"{prefix}[{i}]", source=source,
                              hint=f"the cluster has {len(topology.gpus)} GPUs in all")
        gpus = _packed(free, count) if placement == "packed" else _spread(topology, free, count)
        placed[name] = gpus
        taken.update(dict.fromkeys(gpus, name))
    return {name: placed[name] for name, _, _ in requests}


def _explicit(topology: Topology, name: str, count: int, gpus: Sequence[Any],
              taken: dict[str, str], key: str, source: str | None) -> tuple[str, ...]:
    known = set(topology.gpus)
    first_entry: dict[str, int] = {}
    for j, gpu in enumerate(gpus):
        if not isinstance(gpu, str) or gpu not in known:  # (a list or mapping: no name)
            raise ConfigError(f"no GPU {repr(gpu)[:60]} in the cluster", key=f"{key}[{j}]",
                              source=source, hint=f"e.g. {topology.gpus[0]}")
        if gpu in first_entry:
            raise ConfigError(f"GPU {gpu} is listed twice, as entries {first_entry[gpu]} "
                              f"and {j}", key=f"{key}[{j}]", source=source,
                              hint=f"job {name!r} needs {count} different GPUs")
        first_entry[gpu] = j
        if gpu in taken:
            raise ConfigError(f"GPU {gpu} is already job {taken[gpu]!r}'s", key=f"{key}[{j}]",
                              source=source)
    if len(gpus) != count:
        raise ConfigError(f"job {name!r} needs {count} GPUs, the list gives {len(gpus)}",
                          key=key, source=source)
    taken.update(dict.fromkeys(gpus, name))
    return tuple(gpus)


def _packed(free: list[str], count: int) -> tuple[str, ...]:
    return tuple(free[:count])


def _spread(topology: Topology, free: list[str], count: int) -> tuple[str, ...]:
    """Whole free nodes at an even stride over the free nodes (then the rest packed)."""
    by_node: dict[int, list[str]] = {}
    for gpu in free:
        by_node.setdefault(topology.node_of(gpu), []).append(gpu)
    nodes = list(by_node)
    per_node = max(len(v) for v in by_node.values())
    wanted = -(-count // per_node)
    if wanted > len(nodes):
        return _packed(free, count)
    picks = [nodes[(k * len(nodes)) // wanted] for k in range(wanted)]
    chosen = [g for node in picks for g in by_node[node]]
    if len(chosen) < count:
        chosen += [g for g in free if g not in set(chosen)]
    return tuple(sorted(chosen[:count], key=free.index))


def simulate_on_fabric(specs: Sequence[IterationSpec], faults: Iterable[Fault] = (), *,
                       seed: int = 0, source: str | None = None) -> list[IterationResult]:
    """Run ``specs`` (jobs on views of one cluster) together on one simulation, with the
    timed faults; their results in order.  A lost GPU, or a fault after the run, raises."""
    faults = tuple(faults)
    specs = list(specs)
    if not specs:
        return []
    cluster = specs[0].topology
    for spec in specs:
        check_job_survives(faults, spec.topology.gpus, cluster, source=source)
    alone = len(specs) == 1 and not any(f.at_s > 0 for f in faults)
    if alone:
        results = [simulate_iteration(specs[0])]
    else:
        sim = Simulation(seed, trace=any(spec.trace for spec in specs))
        simulators = [IterationSimulator(
            replace(spec, fold_replicas=False, fold_exclusive_tp=False), sim)
            for spec in specs]
        processes = [p for simulator in simulators for p in simulator.start()]
        gpus = [g for spec in specs for g in spec.topology.gpus]
        inject_faults(sim.env, sim.network, cluster, faults, gpus, source,
                      until=sim.env.all_of(processes))
        sim.run()
        results = [simulator.finish() for simulator in simulators]
        _trace_metadata(sim, specs, simulators, results)
    check_faults_in_run(faults, max(r.iteration_time_s for r in results), source)
    return results


def _trace_metadata(sim: Simulation, specs: Sequence[IterationSpec],
                    simulators: Sequence[IterationSimulator],
                    results: Sequence[IterationResult]) -> None:
    """The trace's run metadata: one job's rank groups, as a plain traced iteration writes
    them (so the trace reads back per GPU); several jobs' groups would share names, so a
    trace of jobs says only how many it holds."""
    if not specs[0].trace:
        return
    if len(specs) > 1:
        sim.tracer.metadata["distsim"] = {"format": 1, "jobs": len(specs)}
        return
    (simulator,), (result,) = simulators, results
    sim.tracer.metadata["distsim"] = trace_metadata(
        specs[0], simulator.everyone, simulator.seq_len, result)


def simulate_jobs(jobs: Sequence[tuple[str, IterationSpec]], faults: Iterable[Fault] = (),
                  *, seed: int = 0, source: str | None = None) -> JobsResult:
    """Each job alone on the cluster, then all together (see the module docstring).
    ``jobs`` are ``(name, spec)``, each spec's topology a job view of one cluster."""
    faults = tuple(faults)
    alone = [simulate_on_fabric([spec], faults, seed=seed, source=source)[0]
             for _, spec in jobs]
    shared = simulate_on_fabric([spec for _, spec in jobs], faults, seed=seed, source=source)
    outcomes = tuple(JobOutcome(name, spec.topology.gpus, a, s)
                     for (name, spec), a, s in zip(jobs, alone, shared, strict=True))
    return JobsResult(outcomes, *_meeting_links(outcomes))


def _meeting_links(outcomes: Sequence[JobOutcome]) -> tuple[tuple[MeetingLink, ...], int]:
    """Links that carried bytes of two jobs or more in the shared run, busiest first.

    Which job's bytes a link carried comes from each job's run alone (a job's routes do not
    depend on its neighbours); how long it was saturated from the shared run."""
    per_job = {o.name: o.alone.simulation.network.link_stats() for o in outcomes}
    shared = outcomes[0].shared.simulation.network.link_stats() if outcomes else {}
    links: dict[Any, dict[str, float]] = {}
    for name, stats in per_job.items():
        for link, stat in stats.items():
            if stat.bytes > 0:
                links.setdefault(link, {})[name] = stat.bytes
    met = [MeetingLink(link, by_job, shared[link].saturated_s if link in shared else 0.0)
           for link, by_job in links.items() if len(by_job) > 1]
    met.sort(key=lambda m: (-m.saturated_s, -sum(m.bytes_by_job.values()), m.link))
    return tuple(met), len(met)
