"""Faults: links, NICs and switches degraded or down, GPUs and nodes lost — and what the
fabric does about them.

A :class:`Fault` names a target (``link``, ``nic``, ``switch``, ``gpu``, ``node``), a kind
(``degraded``: its links keep ``bandwidth_factor`` of their bandwidth and gain
``added_latency_s`` per crossing; ``down``: gone) and a time ``at_s`` (0: from the start).
A link is named as a cable, ``"leaf0 -> spine1"`` (both directions fail together, as a
cable or a port does).

**From the start** (:func:`apply_faults`) a fault changes the cluster the job starts on,
and routing is what the fabric has settled to:

* a down link or switch is not in the fabric: every policy routes around it (a subnet
  manager recomputes static D-mod-K tables after its sweep; adaptive routing at once);
  where nothing is left between two GPUs the route fails with an error naming the faults;
* a degraded link stays in the routing tables of static and hashed policies (``dmodk``,
  ``ecmp``: a subnet manager routes by link state, up or down, not by speed); adaptive
  policies (``adaptive``, ``spray``, ``valiant``, ``ugal``) steer around it once converged
  wherever an equal-cost path without it exists (:attr:`Topology.avoided`: routing cost
  is (hops, degraded links crossed), compared in that order);
* a NIC down, or the cable from a NIC to its switch down, takes the NIC away: NCCL's rings
  and routes that used its rail use the GPU's nearest surviving NIC instead
  (:meth:`Topology._rail_nic`), as NCCL picks the next NIC by PCI distance when it builds
  its communicators without the failed one;
* a GPU or a node lost stops the job: :func:`check_job_survives` raises, naming it.

**At a time** (:func:`inject_faults`) a fault changes the flow network while the job runs:
a degraded link's capacity drops at ``at_s`` (flows re-solved then; its added latency
counts for faults from the start only, as routes' latencies are fixed when the plans are
made) under static and hashed routing; under adaptive routing a degraded link between
switches that the job can be routed around costs nothing (converged routing moves its
bytes to spare paths — as for a down link, the approximation that those have the bandwidth
to take them); a down link or switch stalls the flows crossing it for the time the fabric
takes to re-route (``subnet_manager_delay_s`` with static routing, 0 with adaptive
routing), after which the flows in flight finish at the link's former rate — the
approximation that a spare path of equal bandwidth takes them; the steady state after the
fault is the run with the fault from the start. A NIC, GPU or node lost while the job runs
stops it with an error naming the component and the time (NCCL cannot move a live
communicator off a lost NIC).

``subnet_manager_delay_s`` defaults to 10 s: OpenSM's default ``sweep_interval``
(``opensm(8)``, option ``-s``: "defaults to a sweep interval of 10 seconds"); a port-down
trap can start a sweep sooner, so this is the slow end.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import simpy
from distsim_gpu.simcore.config import check_choice, check_keys, check_mapping, check_number
from distsim_gpu.simcore.errors import ConfigError, SimulationError
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.topology.model import Device, FaultState, Link, Topology
from distsim_gpu.topology.routing import END_TO_END_POLICIES

__all__ = [
    "FAULT_KEYS",
    "FAULT_KINDS",
    "FAULT_TARGETS",
    "SUBNET_MANAGER_DELAY_S",
    "Fault",
    "apply_faults",
    "check_faults_in_run",
    "check_job_survives",
    "fault_links",
    "faults_from_list",
    "inject_faults",
]

_NODE_INDEX = re.compile(r"[0-9]{1,9}")

FAULT_TARGETS = ("link", "nic", "switch", "gpu", "node")
FAULT_KINDS = ("degraded", "down")
FAULT_KEYS = ("at_s", "target", "name", "kind", "bandwidth_factor", "added_latency_s",
              "subnet_manager_delay_s")
#: OpenSM's default sweep interval (opensm(8), ``-s``): static routes re-computed after it.
SUBNET_MANAGER_DELAY_S = 10.0
# The fraction of its capacity a down link keeps while the fabric re-routes (a flow
# network link cannot have none): its flows stand still, to the last nanosecond.
_STALLED = 1e-12

LinkId = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault (see the module docstring); ``name`` is a device name, a node index as a
    string for ``node``, or ``"a -> b"`` for a link."""

    target: str
    name: str
    kind: str = "down"
    at_s: float = 0.0
    bandwidth_factor: float = 1.0
    added_latency_s: float = 0.0
    subnet_manager_delay_s: float = SUBNET_MANAGER_DELAY_S

    def __post_init__(self) -> None:
        check_choice(self.target, FAULT_TARGETS, key="target", what="fault target")
        check_choice(self.kind, FAULT_KINDS, key="kind", what="fault kind")
        check_number(self.bandwidth_factor, key="bandwidth_factor", above=True, maximum=1.0,
                     hint="the fraction of its bandwidth a degraded link keeps")
        check_number(self.at_s, key="at_s")
        check_number(self.added_latency_s, key="added_latency_s")
        check_number(self.subnet_manager_delay_s, key="subnet_manager_delay_s")
        if self.kind == "degraded" and self.target in ("gpu", "node"):
            raise ConfigError(f"a {self.target} is lost (kind: down), not degraded",
                              key="kind", hint="slow GPUs are stragglers: see 'stragglers'")

    def describe(self) -> str:
        """``"link leaf0 -> spine1 down"``, ``"nic n0.nic3 degraded to 50 %"``."""
        what = (f"degraded to {self.bandwidth_factor:.3g}×" if self.kind == "degraded"
                else "down")
        when = f" at {self.at_s:g} s" if self.at_s else ""
        return f"{self.target} {self.name} {what}{when}"


def faults_from_list(raw: Any, topology: Topology, *, source: str | None = None,
                     prefix: str = "faults") -> tuple[Fault, ...]:
    """The ``faults:`` list of a scenario, checked against ``topology``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("must be a list of faults", key=prefix, source=source,
                          hint="e.g. [{target: nic, name: n0.nic3, kind: down}]")
    faults = []
    for i, item in enumerate(raw):
        key = f"{prefix}[{i}]"
        spec = check_mapping(item, key=key, source=source)
        check_keys(spec, FAULT_KEYS, prefix=key, source=source)
        faults.append(_fault(spec, key, source))
        _check_target(faults[-1], topology, key, source)
    return tuple(faults)


def _fault(spec: Mapping[str, Any], key: str, source: str | None) -> Fault:
    if "target" not in spec or "name" not in spec:
        raise ConfigError("a fault needs 'target' and 'name'", key=key, source=source,
                          hint="e.g. {target: link, name: 'leaf0 -> spine1', kind: down}")
    values: dict[str, Any] = {"target": spec["target"], "name": str(spec["name"]),
                              "kind": spec.get("kind", "down")}
    for field in ("at_s", "added_latency_s", "subnet_manager_delay_s"):
        if field in spec:
            values[field] = parse_duration(spec[field], key=f"{key}.{field}", source=source)
    if "bandwidth_factor" in spec:
        values["bandwidth_factor"] = spec["bandwidth_factor"]
    try:
        return Fault(**values)
    except ConfigError as error:
        error.key = f"{key}.{error.key}" if error.key else key
        error.source = source
        raise


def _check_target(fault: Fault, topology: Topology, key: str, source: str | None) -> None:
    """The fault names something of ``topology`` of its target's kind."""
    try:
        fault_links(topology, fault)
    except ConfigError as error:
        error.key, error.source = f"{key}.name", source
        raise


def fault_links(topology: Topology, fault: Fault) -> tuple[LinkId, ...]:
    """The directed links a fault takes down or degrades (a GPU's or a node's: none, the
    job stops instead).  ConfigError if the fault names nothing of its kind."""
    if fault.target == "link":
        a, _, b = (part.strip() for part in fault.name.partition("->"))
        ids = [i for i in ((a, b), (b, a)) if _has_link(topology, i)]
        if not ids:
            raise ConfigError(f"no link {fault.name!r} in {topology.name!r}",
                              hint="name a cable as 'src -> dst', e.g. "
                                   f"'{_example_link(topology)}'")
        return tuple(ids)
    if fault.target == "node":
        node = fault.name.removeprefix("n")
        # ASCII digits, at most nine ('²' is a digit to str.isdigit, not to int; a
        # 5,000-digit index is past int()'s limit and any cluster)
        if not _NODE_INDEX.fullmatch(node) or not topology.gpus_on_node(int(node)):
            raise ConfigError(f"no node {_brief(fault.name)} in {topology.name!r}",
                              hint=f"a node index 0..{topology.num_nodes - 1}")
        return ()
    names = {d.name: d for d in topology.devices()}
    kind = {"nic": "nic", "switch": "switch", "gpu": "gpu"}[fault.target]
    device = names.get(fault.name)
    if device is None or device.kind != kind:
        valid = [n for n, d in names.items() if d.kind == kind]
        near = difflib.get_close_matches(fault.name, valid, n=1)
        raise ConfigError(f"no {kind} {fault.name!r} in {topology.name!r}",
                          hint=f"did you mean {near[0]!r}?" if near
                          else f"e.g. {', '.join(valid[:3]) or 'none here'}")
    if fault.target == "gpu":
        return ()
    links = [link.id for link in topology.links() if fault.name in link.id]
    if fault.target == "nic":  # a NIC's fault is its network port's
        links = [i for i in links if topology.link(*i).kind == "network"]
    return tuple(links)


def _has_link(topology: Topology, link_id: LinkId) -> bool:
    return topology.graph.has_edge(*link_id)


def _example_link(topology: Topology) -> str:
    for link in topology.links():
        if link.kind == "network":
            return f"{link.src} -> {link.dst}"
    return "a -> b"


def check_job_survives(faults: Iterable[Fault], gpus: Sequence[str], topology: Topology,
                       *, before_s: float = 0.0, source: str | None = None) -> None:
    """SimulationError if a fault at or before ``before_s`` loses a GPU of the job."""
    used = set(gpus)
    for fault in faults:
        if fault.at_s > before_s:
            continue
        lost = _lost_gpus(fault, topology) & used
        if lost:
            raise SimulationError(
                f"{fault.describe()}: the job loses GPU {sorted(lost)[0]} and stops (its "
                f"NCCL communicators abort)", source=source,
                hint="restart it on the remaining GPUs, or see the goodput study")


def _brief(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 40 else text[:37] + "..."


def _lost_gpus(fault: Fault, topology: Topology) -> set[str]:
    if fault.target == "gpu":
        return {fault.name}
    if fault.target == "node":
        return set(topology.gpus_on_node(int(fault.name.removeprefix("n"))))
    return set()


def apply_faults(topology: Topology, faults: Iterable[Fault]) -> Topology:
    """The cluster with the faults present from the start (``at_s == 0``) applied; the
    same object when there are none (see the module docstring)."""
    start = [f for f in faults if f.at_s == 0 and f.target not in ("gpu", "node")]
    if not start:
        return topology
    down: set[LinkId] = set()
    scale: dict[LinkId, tuple[float, float]] = {}
    for fault in start:
        for link_id in fault_links(topology, fault):
            if fault.kind == "down":
                down.add(link_id)
            else:
                factor, added = scale.get(link_id, (1.0, 0.0))
                scale[link_id] = (factor * fault.bandwidth_factor,
                                  added + fault.added_latency_s)
    lost_devices = _lost_devices(topology, start, down)
    devices = [d for d in topology.devices() if d.name not in lost_devices]
    links = [_scaled(link, scale.get(link.id)) for link in topology.links()
             if link.id not in down and link.src not in lost_devices
             and link.dst not in lost_devices]
    lost_nics: dict[int, int] = {}
    for name in lost_devices:
        device = topology.device(name)
        if device.kind == "nic" and device.node is not None:
            lost_nics[device.node] = lost_nics.get(device.node, 0) + 1
    note = "faults " + "; ".join(f.describe() for f in start)
    state = FaultState(avoid=frozenset(set(scale) - down), lost_nics=lost_nics, note=note,
                       destination_indices=topology.destination_indices)
    return Topology(topology.name, devices, links, config=topology.config,
                    routing=topology.routing, faults=state)


def _lost_devices(topology: Topology, faults: Sequence[Fault], down: set[LinkId]) -> set[str]:
    """Devices a fault takes away: a switch or NIC down, a NIC whose fabric cable is down."""
    lost = {f.name for f in faults if f.kind == "down" and f.target in ("nic", "switch")}
    for a, b in down:
        for end in (a, b):
            device: Device = topology.device(end)
            if device.kind == "nic":
                lost.add(end)
    return lost


def _scaled(link: Link, change: tuple[float, float] | None) -> Link:
    if change is None:
        return link
    factor, added = change
    return Link(link.src, link.dst, link.bandwidth_bytes_per_s * factor,
                link.latency_s + added, link.kind, link.cost)


def inject_faults(env: Any, network: Any, topology: Topology, faults: Iterable[Fault],
                  gpus: Sequence[str], source: str | None = None,
                  until: simpy.Event | None = None) -> None:
    """Start a SimPy process per fault with ``at_s > 0``: at that time it changes the
    flow network's capacities (see the module docstring) or stops the job.  ``until``:
    the event of the job's end, after which a fault still to come does nothing (it is
    reported as after the run by :func:`check_faults_in_run`)."""
    adaptive = topology.routing.policy in END_TO_END_POLICIES
    strikes = [env.process(_strike(env, network, topology, fault, set(gpus), adaptive,
                                   source))
               for fault in faults if fault.at_s > 0]
    if until is not None and strikes:
        until.callbacks.append(lambda _event: [p.interrupt() for p in strikes if p.is_alive])


def _strike(env: Any, network: Any, topology: Topology, fault: Fault, gpus: set[str],
            adaptive: bool, source: str | None) -> Generator[Any, Any, None]:
    try:
        yield env.timeout(fault.at_s)
    except simpy.Interrupt:
        return  # the job ended first
    if fault.target == "nic" and fault.kind == "down":
        raise SimulationError(f"{fault.describe()}: NCCL cannot move a live communicator "
                              f"off a lost NIC; the job stops", source=source,
                              hint="at_s: 0 runs the restarted job on the remaining NICs")
    if _lost_gpus(fault, topology) & gpus:
        check_job_survives([fault], sorted(gpus), topology, before_s=env.now, source=source)
    if fault.kind == "down":
        _check_not_cut(topology, fault, sorted(gpus), source)
    links = [i for i in fault_links(topology, fault) if network.has_link(i)]
    before = {i: network.capacity(i) for i in links}
    if fault.kind == "degraded":
        if adaptive and _has_spare_path(topology, fault, sorted(gpus)):
            return  # converged adaptive routing steers around it (see the docstring)
        for i in links:
            network.set_capacity(i, before[i] * fault.bandwidth_factor)
        return
    for i in links:
        network.set_capacity(i, before[i] * _STALLED)
    delay = 0.0 if adaptive else fault.subnet_manager_delay_s
    if delay > 0:
        # The job may end while the fabric re-routes: the capacity comes back then.
        with contextlib.suppress(simpy.Interrupt):
            yield env.timeout(delay)
    for i in links:  # re-routed: a spare path of the same bandwidth carries the flows
        network.set_capacity(i, before[i])


def _has_spare_path(topology: Topology, fault: Fault, gpus: Sequence[str]) -> bool:
    """Whether a degraded fabric link or switch can be routed around: it joins switches
    only, and the job's GPUs stay connected without it."""
    links = fault_links(topology, fault)
    if any(topology.device(end).kind != "switch" for link in links for end in link):
        return False  # a NIC's port: NCCL's channels stay on their NIC
    try:
        _check_not_cut(topology, replace(fault, kind="down"), gpus, None)
    except SimulationError:
        return False
    return True


def _check_not_cut(topology: Topology, fault: Fault, gpus: Sequence[str],
                   source: str | None) -> None:
    """SimulationError if taking ``fault``'s links away leaves two of ``gpus`` with no path
    between them (GPUs are no transit: what joins them is NICs, switches, PCIe, NVSwitch)."""
    graph = nx.Graph(topology.graph)
    graph.remove_edges_from(fault_links(topology, fault))
    if fault.target == "switch":
        graph.remove_node(fault.name)
    graph.remove_nodes_from(topology.gpus)
    component = {n: i for i, part in enumerate(nx.connected_components(graph)) for n in part}
    reach = [(gpu, {component[n] for n in topology.graph.successors(gpu) if n in component})
             for gpu in gpus]
    common = set.intersection(*(parts for _, parts in reach)) if reach else set()
    if reach and not common:
        first, parts = reach[0]
        cut = next(gpu for gpu, other in reach if not other & parts)
        raise SimulationError(f"{fault.describe()} cuts {first} off from {cut}: the fabric "
                              f"is partitioned and the job stops", source=source,
                              hint="a partition cannot be re-routed around")


def check_faults_in_run(faults: Iterable[Fault], end_s: float,
                        source: str | None = None, prefix: str = "faults") -> None:
    """ConfigError for a fault timed after the run ended (it would change nothing)."""
    for i, fault in enumerate(faults):
        if fault.at_s > end_s:
            raise ConfigError(f"the fault at {fault.at_s:g} s comes after the run ended "
                              f"({end_s:.6g} s)", key=f"{prefix}[{i}].at_s", source=source,
                              hint=f"a time in [0, {end_s:.6g}] s")
