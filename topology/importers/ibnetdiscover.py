"""Read ``ibnetdiscover`` output: an InfiniBand fabric's switches, HCAs and cables.

``ibnetdiscover`` (infiniband-diags; its man page describes the format) prints one block
per node of the subnet: a few ``key=value`` lines (``vendid``, ``sysimgguid``,
``switchguid`` / ``caguid``), then the node line —
``Switch <ports> "S-<guid>" # "<description>" …`` or ``Ca <ports> "H-<guid>" # "<desc>"``
— then one line per cabled port::

    [<port>](<port guid>)  "<peer id>"[<peer port>](<peer guid>)  # "<peer desc>" lid 5 4xHDR

The last word is the link's active width and speed: lanes ``x`` rate, where a lane
carries SDR 2, DDR 4, QDR 8, FDR10 10, FDR 13.64, EDR 25, HDR 50, NDR 100, XDR 200 Gb/s of
data (the InfiniBand Architecture Specification's signalling rates less their 8b/10b or
64b/66b encoding; HDR and later are quoted as data rates).  A HCA's description is
``"<host> <device>"`` (``"dgx01 mlx5_0"``), which names the node it sits in.

Each cable is read once (both ends print it; the two must agree).  The result is a custom
cluster (:mod:`topology.cluster`, custom form): the fabric's switches and cables as listed,
and each host a copy of one node shape whose NICs are the host's HCAs, in device order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.topology.model import Topology
from distsim_gpu.topology.presets import CABLE_LATENCY_S, IB_SWITCH_LATENCY_S

__all__ = ["IbFabric", "fabric_cluster_spec", "looks_like_ibnetdiscover", "parse_ibnetdiscover"]

LANE_GBPS = {"SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 13.64, "EDR": 25.0,
             "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
# Port numbers and counts are a few digits (ASCII: "\d" would take any script's digits,
# which int() may refuse); nine at most, so no cell can be a 4,300-digit number.
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+([0-9]{1,9})\s+"([^"]+)"\s*(?:#\s*"([^"]*)")?')
_PORT = re.compile(r'^\[([0-9]{1,9})\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[([0-9]{1,9})\]'
                   r'(?:\([0-9a-fA-F]+\))?(.*)$')
_WIDTH = re.compile(r"(?<![0-9])([0-9]{1,3})x([A-Z0-9]+)\s*$")


@dataclass(frozen=True, slots=True)
class IbNode:
    ident: str  # "S-…" / "H-…" / "R-…"
    kind: str  # "Switch", "Ca" or "Rt" (a router: forwarded through like a switch)
    description: str
    line: int


@dataclass(frozen=True, slots=True)
class IbCable:
    a: str
    a_port: int
    b: str
    b_port: int
    bandwidth_bytes_per_s: float
    line: int


@dataclass(frozen=True, slots=True)
class IbFabric:
    """The subnet as read: its nodes by id and its cables, each once."""

    source: str
    nodes: dict[str, IbNode]
    cables: tuple[IbCable, ...]

    @property
    def switches(self) -> list[IbNode]:
        """The switches, and the routers (``Rt``), which forward packets as a switch
        does as far as a job's traffic is concerned."""
        return [n for n in self.nodes.values() if n.kind in ("Switch", "Rt")]

    def hosts(self) -> dict[str, list[IbNode]]:
        """Each host's HCAs in device order (``mlx5_2`` before ``mlx5_10``)."""
        hosts: dict[str, list[IbNode]] = {}
        for node in self.nodes.values():
            if node.kind == "Ca":  # "host mlx5_0": the host is the first word
                hosts.setdefault((node.description.split() or [node.ident])[0],
                                 []).append(node)
        for cas in hosts.values():
            cas.sort(key=lambda n: [(0, int(p), "") if p.isascii() and p.isdigit()
                                    else (1, 0, p)
                                    for p in re.split(r"([0-9]+)", n.description)])
        return hosts


def looks_like_ibnetdiscover(text: str) -> bool:
    return any(_NODE.match(line) for line in text.splitlines()[:400])


def _bandwidth(rest: str, source: str, line: int) -> float:
    match = _WIDTH.search(rest.strip())
    if match is None or match.group(2) not in LANE_GBPS:
        raise ParseError(f"no link width and speed (like 4xHDR) at the end of {rest.strip()!r}",
                         source=source, line=line,
                         hint="speeds: " + ", ".join(LANE_GBPS))
    return int(match.group(1)) * LANE_GBPS[match.group(2)] * 1e9 / 8


def parse_ibnetdiscover(text: str, *, source: str) -> IbFabric:
    """The fabric ``ibnetdiscover`` output describes (module docstring)."""
    nodes: dict[str, IbNode] = {}
    ends: dict[tuple[str, int], tuple[str, int, float, int]] = {}
    current: IbNode | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" in line.split()[0]:
            continue
        node = _NODE.match(line)
        if node:
            current = IbNode(node.group(3), node.group(1), node.group(4) or "", number)
            if current.ident in nodes:
                raise ParseError(f"node {current.ident} is listed twice", source=source,
                                 line=number)
            nodes[current.ident] = current
            continue
        port = _PORT.match(line)
        if port is None or current is None:
            raise ParseError(f"cannot read {line[:60]!r}", source=source, line=number,
                             hint="expected a Switch/Ca line or a [port] line under one")
        ends[(current.ident, int(port.group(1)))] = (
            port.group(2), int(port.group(3)), _bandwidth(port.group(4), source, number),
            number)
    if not nodes:
        raise ParseError("no Switch or Ca lines: not ibnetdiscover output", source=source)
    return IbFabric(source, nodes, _cables(ends, nodes, source))


def _cables(ends: dict[tuple[str, int], tuple[str, int, float, int]],
            nodes: dict[str, IbNode], source: str) -> tuple[IbCable, ...]:
    cables = []
    for (a, a_port), (b, b_port, bandwidth, line) in ends.items():
        if b not in nodes:
            raise ParseError(f"port {a}[{a_port}] is cabled to {b}, which is not listed",
                             source=source, line=line)
        other = ends.get((b, b_port))
        if other is not None and other[:2] != (a, a_port):
            raise ParseError(f"{a}[{a_port}] -> {b}[{b_port}], but {b}[{b_port}] -> "
                             f"{other[0]}[{other[1]}]", source=source, line=line)
        if other is not None and other[2] != bandwidth:
            raise ParseError(f"the two ends of cable {a}[{a_port}] - {b}[{b_port}] disagree "
                             f"on its speed: {bandwidth * 8 / 1e9:g} Gb/s here, "
                             f"{other[2] * 8 / 1e9:g} Gb/s at line {other[3]}",
                             source=source, line=line,
                             hint="a cable runs at one width and speed; fix the dump")
        if other is not None and (b, b_port) < (a, a_port):
            continue  # listed from the other end already
        cables.append(IbCable(a, a_port, b, b_port, bandwidth, line))
    return tuple(cables)


def fabric_cluster_spec(fabric: IbFabric, node: Topology) -> dict[str, Any]:
    """A custom cluster: every host a copy of ``node`` (a one-node cluster) whose NIC ``j``
    is the host's ``j``-th HCA, and the fabric's switches and cables as read."""
    hosts = fabric.hosts()
    nics = node.nics_on_node(0)
    names: dict[str, str] = {}
    devices: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for k, (host, cas) in enumerate(sorted(hosts.items())):
        if len(cas) > len(nics):
            raise ParseError(f"host {host} has {len(cas)} HCAs, the node shape {len(nics)} "
                             "NICs", source=fabric.source, line=cas[0].line,
                             hint="give a node (--node) with as many NICs")
        _copy_node(node, k, devices, links)
        names.update({ca.ident: f"n{k}.nic{j}" for j, ca in enumerate(cas)})
    for i, switch in enumerate(fabric.switches):
        names[switch.ident] = f"sw{i}"
        devices.append({"name": f"sw{i}", "kind": "switch"})
    nic_latency = float(node.config.get("nic", {}).get("latency", 0.0))
    totals: dict[tuple[str, str], float] = {}
    for cable in fabric.cables:  # parallel cables: one link of their summed speed
        a, b = sorted((names[cable.a], names[cable.b]))
        totals[(a, b)] = totals.get((a, b), 0.0) + cable.bandwidth_bytes_per_s
    for (a, b), bandwidth in totals.items():
        # As the built-in fabrics charge it (topology.fabric_spec): a cable, the switch it
        # enters, and the NIC at either end.
        for src, dst in ((a, b), (b, a)):
            latency = (CABLE_LATENCY_S + (IB_SWITCH_LATENCY_S if dst.startswith("sw") else 0.0)
                       + (nic_latency if ".nic" in src + dst else 0.0))
            links.append({"src": src, "dst": dst, "bandwidth": bandwidth, "latency": latency,
                          "kind": "network", "duplex": False})
    return {"name": f"imported {fabric.source}", "devices": devices, "links": links,
            "routing": {"policy": "dmodk"}}


def _copy_node(node: Topology, k: int, devices: list[dict[str, Any]],
               links: list[dict[str, Any]]) -> None:
    inside = {d.name for d in node.devices() if d.node == 0}
    for d in node.devices():
        if d.name in inside:
            devices.append({"name": f"n{k}.{d.name.split('.', 1)[1]}", "kind": d.kind,
                            "node": k, "index": d.index, **({"sharp": True} if d.sharp
                                                             else {})})
    for link in node.links():
        if link.src in inside and link.dst in inside and link.src < link.dst:
            links.append({"src": f"n{k}.{link.src.split('.', 1)[1]}",
                          "dst": f"n{k}.{link.dst.split('.', 1)[1]}",
                          "bandwidth": link.bandwidth_bytes_per_s, "latency": link.latency_s,
                          "kind": link.kind})
