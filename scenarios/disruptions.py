"""What goes wrong and who shares: the scenario keys ``faults``, ``stragglers`` (as
distributions), ``jobs`` and ``goodput``, and the report section they add.

* ``faults:`` a list of :mod:`topology.faults` specs.  Those from the start change the
  cluster the scenario runs on; those at a time run inside the simulation.
* ``stragglers:`` GPU names with factors as before, plus ``jitter`` and ``slow_nodes``
  (:mod:`workloads.job.stragglers`), drawn from ``simulation.seed``; the section says what they
  cost and through which dimension.
* ``jobs:`` several jobs on the cluster, each ``{name, model, parallelism, training,
  placement}`` (``placement``: ``packed``, ``spread`` or a list of GPUs; ``compute``,
  ``communication`` and ``simulation`` are the scenario's): each alone and all together
  (:mod:`workloads.job.jobs`).  The scenario's own report is the first job's, shared.
* ``goodput:`` ``{mtbf: {gpu: "50000 h", node: …, nic: …, switch: …}, restart: "10 min",
  storage_bandwidth: "100 GB/s", horizon: "8760 h", checkpoint_bytes_per_param: 14}``:
  goodput against the checkpoint interval over the job (at least 1000 job MTBFs of
  sampled failures, so the curve's top is not noise), the best against Young/Daly
  (:mod:`workloads.job.goodput`); the checkpoint is written through the storage's bandwidth or
  the job's NICs, whichever is slower.

:func:`analyse` runs what the section needs beyond the scenario's own iteration (the
straggler attribution's four runs, each job alone, the goodput sweep);
:func:`format_incidents` prints it after the summary, :meth:`Incidents.to_dict` is its
JSON (``--json``: ``"incidents"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from distsim_gpu.scenarios.report.record import Report
from distsim_gpu.simcore.config import check_keys, check_mapping, check_number
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.units import format_duration, parse_bandwidth, parse_duration
from distsim_gpu.topology import Topology
from distsim_gpu.topology.faults import Fault, check_job_survives
from distsim_gpu.workloads.iteration.simulator import (
    IterationResult,
    IterationSpec,
    simulate_iteration,
)
from distsim_gpu.workloads.job.goodput import (
    CHECKPOINT_BYTES_PER_PARAM,
    CheckpointSweep,
    checkpoint_flows_s,
    checkpoint_sweep,
    checkpoint_time_s,
    system_mtbf_s,
)
from distsim_gpu.workloads.job.jobs import JobsResult, place_jobs, simulate_jobs, simulate_on_fabric
from distsim_gpu.workloads.job.stragglers import StragglerCost, StragglerModel, straggler_cost
from distsim_gpu.workloads.strategy.parallel import parallel_from_mapping

__all__ = [
    "GOODPUT_KEYS",
    "JOB_KEYS",
    "Disrupted",
    "GoodputSpec",
    "Incidents",
    "analyse",
    "format_incidents",
    "goodput_from_mapping",
    "goodput_sweep",
    "jobs_from_list",
    "simulate",
    "spec_of",
]

JOB_KEYS = ("name", "model", "parallelism", "training", "placement")
GOODPUT_KEYS = ("mtbf", "restart", "storage_bandwidth", "horizon", "checkpoint_bytes_per_param",
                "storage_nodes")
MTBF_KINDS = ("gpu", "node", "nic", "switch")
# The scenario keys every job of a ``jobs:`` scenario shares.
_SHARED_KEYS = ("compute", "communication", "simulation", "description")


@dataclass(frozen=True, slots=True)
class GoodputSpec:
    """The ``goodput:`` key, SI units (MTBF per component kind, seconds)."""

    mtbf_s: Mapping[str, float]
    restart_s: float = 600.0
    storage_bandwidth_bytes_per_s: float = 100e9
    horizon_s: float = 365 * 24 * 3600.0
    checkpoint_bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM
    storage_nodes: tuple[int, ...] = ()  # nodes of the cluster the checkpoint is sent to

    def to_dict(self) -> dict[str, Any]:
        return {"mtbf": dict(self.mtbf_s), "restart": self.restart_s,
                "storage_nodes": list(self.storage_nodes),
                "storage_bandwidth": self.storage_bandwidth_bytes_per_s,
                "horizon": self.horizon_s,
                "checkpoint_bytes_per_param": self.checkpoint_bytes_per_param}


def goodput_from_mapping(raw: Any, *, source: str | None = None) -> GoodputSpec | None:
    """The ``goodput:`` mapping, checked (None when absent)."""
    if raw is None:
        return None
    spec = check_mapping(raw, key="goodput", source=source)
    check_keys(spec, GOODPUT_KEYS, prefix="goodput", source=source)
    mtbf = check_mapping(spec.get("mtbf"), key="goodput.mtbf", source=source,
                         hint='e.g. {gpu: "50000 h", node: "20000 h"}')
    check_keys(mtbf, MTBF_KINDS, prefix="goodput.mtbf", source=source)
    if not mtbf:  # (no component fails: an infinite MTBF made the failure draws NaN)
        raise ConfigError("needs the MTBF of at least one component", key="goodput.mtbf",
                          source=source, hint='e.g. {gpu: "50000 h", node: "20000 h"}')
    values: dict[str, Any] = {"mtbf_s": {
        kind: check_number(parse_duration(v, key=f"goodput.mtbf.{kind}", source=source),
                           key=f"goodput.mtbf.{kind}", above=True, source=source)
        for kind, v in mtbf.items()}}
    if "restart" in spec:
        values["restart_s"] = parse_duration(spec["restart"], key="goodput.restart",
                                             source=source)
    if "storage_bandwidth" in spec:
        values["storage_bandwidth_bytes_per_s"] = check_number(
            parse_bandwidth(spec["storage_bandwidth"], key="goodput.storage_bandwidth",
                            source=source), key="goodput.storage_bandwidth", above=True,
            source=source)
    if "horizon" in spec:
        values["horizon_s"] = check_number(
            parse_duration(spec["horizon"], key="goodput.horizon", source=source),
            key="goodput.horizon", above=True, source=source)
    if "storage_nodes" in spec:
        values["storage_nodes"] = _nodes(spec["storage_nodes"], source)
    if "checkpoint_bytes_per_param" in spec:
        values["checkpoint_bytes_per_param"] = check_number(
            spec["checkpoint_bytes_per_param"], key="goodput.checkpoint_bytes_per_param",
            above=True, source=source)
    return GoodputSpec(**values)


def _nodes(raw: Any, source: str | None) -> tuple[int, ...]:
    """``[3, n4]``: node indices, written bare or as ``n<index>``."""
    if not isinstance(raw, list):
        raise ConfigError("must be a list of nodes", key="goodput.storage_nodes",
                          source=source, hint="e.g. [n14, n15]")
    nodes = []
    for i, item in enumerate(raw):
        text = str(item).removeprefix("n")
        if isinstance(item, bool) or not re.fullmatch(r"[0-9]{1,9}", text):
            raise ConfigError(f"not a node: {str(item)[:40]!r}", key=f"goodput.storage_nodes[{i}]",
                              source=source, hint="a node index, e.g. 15 or n15")
        nodes.append(int(text))
    return tuple(nodes)


#: A job's name labels its output rows; longer than this is no label.
MAX_JOB_NAME_CHARS = 100


def _job_name(value: Any, key: str, source: str | None) -> str:
    """A job's name: text of 1 to :data:`MAX_JOB_NAME_CHARS` characters (``name: null``
    would otherwise become the job "None")."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_JOB_NAME_CHARS \
            or not value.isprintable():
        raise ConfigError(f"a job's name must be printable text of 1 to "
                          f"{MAX_JOB_NAME_CHARS} characters, got {repr(value)[:60]}",
                          key=key, source=source, hint="e.g. name: a, or leave it out for "
                          "job0, job1, ...")
    return value


def jobs_from_list(raw: Any, spec: Mapping[str, Any], topology: Topology,
                   validate: Callable[[dict[str, Any], str], Any], *,
                   source: str | None = None) -> tuple[tuple[str, Any], ...]:
    """The ``jobs:`` list: each job placed on ``topology`` and validated as a scenario of
    its own on its view of the cluster (``validate(mapping, prefix)``)."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError("must be a non-empty list of jobs", key="jobs", source=source,
                          hint="e.g. [{name: a, model: gpt3-1.3b, parallelism: {dp: 16}, "
                               "placement: packed}]")
    requests: list[tuple[str, int, Any]] = []
    mappings: list[Mapping[str, Any]] = []
    for i, item in enumerate(raw):
        job = check_mapping(item, key=f"jobs[{i}]", source=source)
        check_keys(job, JOB_KEYS, prefix=f"jobs[{i}]", source=source)
        if job.get("model") is None:
            raise ConfigError("a job needs 'model'", key=f"jobs[{i}]", source=source)
        name = _job_name(job.get("name", f"job{i}"), f"jobs[{i}].name", source)
        for j, (other, _, _) in enumerate(requests):
            if other == name:  # its key is the second's, where a --set would put it
                raise ConfigError(f"job name {name!r} is also jobs[{j}]'s",
                                  key=f"jobs[{i}].name", source=source,
                                  hint="give each job a name of its own")
        parallel = parallel_from_mapping(job.get("parallelism"), source=source,
                                         prefix=f"jobs[{i}].parallelism")
        requests.append((name, parallel.num_gpus, job.get("placement", "packed")))
        mappings.append(job)
    placed = place_jobs(topology, requests, source=source)
    jobs = []
    for i, ((name, _, _), job) in enumerate(zip(requests, mappings, strict=True)):
        mapping = {k: spec[k] for k in _SHARED_KEYS if k in spec}
        mapping.update({"name": name, "cluster": topology.job_view(placed[name]),
                        "model": job["model"]})
        for key in ("parallelism", "training"):
            if key in job:
                mapping[key] = job[key]
        jobs.append((name, validate(mapping, f"jobs[{i}]")))
    return tuple(jobs)


@dataclass(frozen=True, slots=True)
class Incidents:
    """The report section of the faults, stragglers, jobs and goodput keys (each part None
    when its key is absent)."""

    faults: tuple[str, ...] = ()
    stragglers: StragglerCost | None = None
    jobs: JobsResult | None = None
    goodput: CheckpointSweep | None = None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.faults:
            data["faults"] = list(self.faults)
        if self.stragglers is not None:
            data["stragglers"] = self.stragglers.to_dict()
        if self.jobs is not None:
            data["jobs"] = self.jobs.to_dict()
        if self.goodput is not None:
            data["goodput"] = self.goodput.to_dict()
        if self.notes:
            data["notes"] = list(self.notes)
        return data


def goodput_sweep(goodput: GoodputSpec, topology: Topology, gpus: Sequence[str],
                  params: float, iteration_s: float, seed: int,
                  others: Sequence[str] = (), source: str | None = None) -> CheckpointSweep:
    """The checkpoint-interval sweep of a job on ``gpus`` (its nodes, their NICs, every
    fabric switch counted as components that can stop it); ``others``: the GPUs the
    scenario's other jobs hold, whose nodes are no storage nodes either."""
    nodes = sorted({topology.node_of(g) for g in gpus})
    nics = [n for node in nodes for n in topology.nics_on_node(node)]
    switches = sum(1 for d in topology.devices() if d.kind == "switch")
    counts = {"gpu": len(gpus), "node": len(nodes), "nic": len(nics), "switch": switches}
    mtbf = system_mtbf_s({kind: (counts[kind], m) for kind, m in goodput.mtbf_s.items()})
    writers = [sum(topology.link(*_uplink(topology, nic)).bandwidth_bytes_per_s
                   for nic in topology.nics_on_node(node)) for node in nodes]
    size = params * goodput.checkpoint_bytes_per_param
    delta = checkpoint_time_s(size, goodput.storage_bandwidth_bytes_per_s,
                              [w for w in writers if w > 0])
    if goodput.storage_nodes:
        busy = sorted({*nodes, *(topology.node_of(g) for g in others)})
        delta = max(delta, checkpoint_flows_s(topology, gpus,
                                              _storage_gpus(topology, goodput, busy, source),
                                              size))
    return checkpoint_sweep(iteration_s, delta, goodput.restart_s, mtbf,
                            max(goodput.horizon_s, 1000 * mtbf), seed=seed)


def _storage_gpus(topology: Topology, goodput: GoodputSpec, job_nodes: Sequence[int],
                  source: str | None = None) -> list[str]:
    """The GPUs standing for the storage nodes' memory: the endpoints of the writes."""
    gpus: list[str] = []
    for i, node in enumerate(goodput.storage_nodes):
        key = f"goodput.storage_nodes[{i}]"
        if node in job_nodes:
            raise ConfigError(f"node {node} runs a job; storage nodes are other nodes",
                              key=key, source=source,
                              hint="with jobs: a node no job is placed on")
        if not topology.gpus_on_node(node):
            raise ConfigError(f"no node {node} in the cluster", key=key, source=source)
        gpus.extend(topology.gpus_on_node(node))
    return gpus


def _uplink(topology: Topology, nic: str) -> tuple[str, str]:
    """A NIC's link into the fabric."""
    for link in topology.links():
        if link.src == nic and link.kind == "network":
            return link.id
    raise DistsimError(f"NIC {nic} has no network link")


def format_incidents(incidents: Incidents) -> str:
    """The section as terminal text (empty when there is nothing to say)."""
    lines: list[str] = []
    if incidents.faults:
        lines.append("faults: " + "; ".join(incidents.faults))
    if incidents.stragglers is not None:
        lines += _straggler_lines(incidents.stragglers)
    if incidents.jobs is not None:
        lines += _job_lines(incidents.jobs)
    if incidents.goodput is not None:
        lines += _goodput_lines(incidents.goodput)
    lines += [f"note: {n}" for n in incidents.notes]
    return "" if not lines else "\n" + "\n".join(lines) + "\n"


def _straggler_lines(cost: StragglerCost) -> list[str]:
    share = cost.total_s / cost.iteration_s if cost.iteration_s else 0.0
    return [
        f"stragglers: {cost.slow_gpus} GPU{'s' if cost.slow_gpus != 1 else ''} off nominal "
        f"speed (the GPUs' factors "
        f"{cost.fastest_factor:.3g}-{cost.slowest_factor:.3g}x) cost "
        f"{format_duration(cost.total_s)} "
        f"({share:.1%} of the iteration; {format_duration(cost.without_s)} without)",
        f"  through TP lockstep {format_duration(cost.tp_lockstep_s)}, DP barrier "
        f"{format_duration(cost.dp_barrier_s)}, pipeline {format_duration(cost.pipeline_s)},"
        f" average slowdown {format_duration(cost.average_slowdown_s)}"]


def _job_lines(jobs: JobsResult) -> list[str]:
    lines = ["jobs (alone -> shared):"]
    for job in jobs.jobs:
        lines.append(f"  {job.name}: {len(job.gpus)} GPUs, "
                     f"{format_duration(job.alone.iteration_time_s)} -> "
                     f"{format_duration(job.shared.iteration_time_s)} "
                     f"(slowdown {job.slowdown:.3f}x)")
    lines.append(f"  links carrying several jobs: {jobs.shared_links}"
                 + ("" if not jobs.meeting_links else "; busiest:"))
    for met in jobs.meeting_links[:5]:
        gb = ", ".join(f"{n} {b / 1e9:.3g} GB" for n, b in met.bytes_by_job.items())
        lines.append(f"    {met.link[0]} -> {met.link[1]}: {gb}; saturated "
                     f"{format_duration(met.saturated_s)}")
    return lines


def _goodput_lines(sweep: CheckpointSweep) -> list[str]:
    best = sweep.best
    return [
        f"goodput: job MTBF {sweep.mtbf_s / 3600:.3g} h, checkpoint "
        f"{format_duration(sweep.checkpoint_s)}; best interval "
        f"{best.interval_s / 60:.3g} min ({best.interval_iterations} iterations) -> goodput "
        f"{best.goodput:.2%} over {best.failures} failures",
        f"  Young sqrt(2·δ·M) = {sweep.young_s / 60:.3g} min (goodput "
        f"{sweep.at_young.goodput:.2%}), Daly {sweep.daly_s / 60:.3g} min"]


class Disrupted(Protocol):
    """What this module reads of a validated scenario (:class:`scenarios.scenario.Scenario`,
    whose module imports this one: the protocol keeps the arrow pointing one way)."""

    @property
    def spec(self) -> IterationSpec: ...
    @property
    def jobs(self) -> tuple[tuple[str, Disrupted], ...]: ...
    @property
    def faults(self) -> tuple[Fault, ...]: ...
    @property
    def straggler_model(self) -> StragglerModel | None: ...
    @property
    def goodput(self) -> GoodputSpec | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def source(self) -> str | None: ...
    @property
    def stragglers(self) -> Mapping[str, float]: ...
    @property
    def topology(self) -> Topology: ...


def simulate(scenario: Disrupted, spec: IterationSpec) -> IterationResult:
    """The scenario's iteration: beside the other jobs when it has ``jobs`` (the first
    job's), with the timed faults when it has some, else the plain iteration."""
    if scenario.jobs:
        specs = [replace(spec_of(job), trace=spec.trace) for _, job in scenario.jobs]
        return simulate_on_fabric(specs, scenario.faults, seed=scenario.seed,
                                  source=scenario.source)[0]
    check_job_survives(scenario.faults, spec.topology.gpus, spec.topology,
                       source=scenario.source)
    if any(f.at_s > 0 for f in scenario.faults):
        return simulate_on_fabric([spec], scenario.faults, seed=scenario.seed,
                                  source=scenario.source)[0]
    return simulate_iteration(spec)


def spec_of(scenario: Disrupted, *, trace: bool = False, allow_oom: bool = False) -> IterationSpec:
    """The :class:`IterationSpec` a scenario runs: the one it holds, traced or allowed to
    run out of memory as asked (``allow_oom`` adds to ``simulation.allow_oom``)."""
    return replace(scenario.spec, trace=trace,
                   allow_oom=allow_oom or scenario.spec.allow_oom)


def analyse(scenario: Disrupted, report: Report) -> Incidents | None:
    """The incidents section for a scenario and its report (None: none of the keys):
    the straggler attribution's runs, each job alone, the goodput sweep."""
    model = scenario.straggler_model
    slow = any(factor != 1.0 for factor in scenario.stragglers.values())
    if not (scenario.faults or scenario.jobs or scenario.goodput is not None or slow):
        return None
    cost = None
    if slow and (model is None or model.attribute):  # drawn or written per GPU
        # The evened-out runs keep the scenario's timed faults, as the run they explain
        # did (stragglers and jobs are exclusive).
        cost = straggler_cost(spec_of(scenario), report, lambda spec: simulate(scenario, spec))
    jobs = None
    if scenario.jobs:
        jobs = simulate_jobs([(name, spec_of(job)) for name, job in scenario.jobs],
                             scenario.faults, seed=scenario.seed, source=scenario.source)
    sweep = None
    if scenario.goodput is not None:
        others = [g for _, job in scenario.jobs[1:] for g in job.spec.topology.gpus]
        sweep = goodput_sweep(scenario.goodput, scenario.topology, scenario.topology.gpus,
                              float(scenario.spec.model.total_params()),
                              report.iteration_time_s, scenario.seed, others,
                              scenario.source)
    notes: tuple[str, ...] = ()
    if model is not None and model.random and not scenario.stragglers:
        notes = ("the straggler model drew no slow GPU with this seed",)
    if any(f.at_s > 0 for f in scenario.faults):
        notes += ("a fault at a time changes capacities while the run goes on; after a down "
                 "link's re-route the flows in flight keep its rate (a spare path of equal "
                 "bandwidth); the steady state after it is the run with the fault at_s: 0",)
    return Incidents(tuple(f.describe() for f in scenario.faults), cost, jobs, sweep, notes)
