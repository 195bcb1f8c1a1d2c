"""Read NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``): the machine as NCCL sees it.

The XML (NCCL ``src/graph/xml.cc``; NCCL's environment-variable docs) is a ``<system>``
of ``<cpu numaid=… vendor=…>`` elements (one per NUMA node), each holding a tree of
``<pci busid=… class=… link_speed="16.0 GT/s PCIe" link_width="16">`` elements: PCIe
switches (class 0x0604xx) with devices below them.  A GPU is a ``<gpu dev=… sm=… rank=…>``
inside its ``pci``, with ``<nvlink target=BUSID count=N tclass=…>`` children: ``tclass``
0x068000 is an NVSwitch, a target that is another GPU's bus id a direct cable.  A NIC is a
``<nic>`` inside its ``pci`` holding one ``<net name=… speed=MBPS port=…>`` per port.

Read into a :class:`~topology.importers.layout.NodeLayout`: each ``cpu`` is a socket; each
``pci`` directly under a ``cpu`` is one PCIe switch (its whole subtree hangs from it: a
device alone on a root port is its own), every net port one NIC.  Figures stated: the
GPUs' ``sm``, the NICs' speed and the GPUs' PCIe link (GT/s x width, 128b/130b from
8 GT/s up, 8b/10b below: the PCIe base specifications).
"""

from __future__ import annotations

import xml.parsers.expat
from collections.abc import Callable
from dataclasses import dataclass, field

from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.topology.importers.layout import NodeLayout

__all__ = ["looks_like_nccl_xml", "parse_nccl_xml"]

_NVSWITCH_CLASS = 0x068000
# A real dump nests system > cpu > pci (a few switch levels) > gpu > nvlink: ten deep at
# most; far deeper is not a dump (and would exhaust the recursion of a tree walk).
MAX_DEPTH = 64
# Digits a number attribute may have: more is not a count, speed or id of any machine.
_MAX_DIGITS = 30


@dataclass(eq=False, slots=True)
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Element] = field(default_factory=list)

    def iter(self, tag: str) -> list[_Element]:
        found = [self] if self.tag == tag else []
        for child in self.children:
            found.extend(child.iter(tag))
        return found


def looks_like_nccl_xml(text: str) -> bool:
    """Whether ``text`` reads as an NCCL topology dump."""
    head = text.lstrip()[:2000]
    return head.startswith("<") and "<system" in head


def _parse_tree(text: str, source: str) -> _Element:
    parser = xml.parsers.expat.ParserCreate()
    root: list[_Element] = []
    stack: list[_Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) >= MAX_DEPTH:
            raise ParseError(f"elements nested more than {MAX_DEPTH} deep: not an NCCL "
                             "topology dump", source=source, line=parser.CurrentLineNumber)
        element = _Element(tag, attrs, parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(element)
        stack.append(element)

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    # No DTDs or entities: a topology dump has none, and refusing them closes the door to
    # entity-expansion attacks.
    parser.EntityDeclHandler = parser.StartDoctypeDeclHandler = _no_dtd(source, parser)
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as error:
        raise ParseError(f"malformed XML: {xml.parsers.expat.ErrorString(error.code)}",
                         source=source, line=error.lineno) from None
    if not root or root[0].tag != "system":
        raise ParseError("not an NCCL topology dump: the root element is "
                         f"<{root[0].tag if root else ''}>, expected <system>", source=source,
                         line=root[0].line if root else None,
                         hint="write one with NCCL_TOPO_DUMP_FILE=topo.xml")
    return root[0]


def _no_dtd(source: str, parser: xml.parsers.expat.XMLParserType) -> Callable[..., None]:
    def refuse(*_args: object) -> None:
        raise ParseError("a DTD or entity declaration: not an NCCL topology dump",
                         source=source, line=parser.CurrentLineNumber)
    return refuse


def _attr(element: _Element, name: str, source: str) -> str:
    value = element.attrs.get(name)
    if value is None:
        raise ParseError(f"<{element.tag}> has no {name!r}", source=source, line=element.line)
    return value


def _number(element: _Element, name: str, source: str, *, whole: bool = False,
            minimum: float = 0.0, above: bool = False, base: int = 10,
            default: str | None = None) -> float:
    """Attribute ``name`` as a finite number (``whole``: an integer; ``base`` 16: hex),
    at least ``minimum`` (``above``: more than it); a ParseError naming the element, the
    attribute and what would be valid otherwise."""
    value = element.attrs.get(name, default)
    if value is None:
        raise ParseError(f"<{element.tag}> has no {name!r}", source=source, line=element.line)
    what = "a hexadecimal number" if base == 16 else ("a whole number" if whole
                                                        else "a number")
    bound = f"{'>' if above else '>='} {minimum:g}"
    try:
        if len(value.strip().lstrip("+-").removeprefix("0x")) > _MAX_DIGITS:
            raise ValueError(value)
        number = float(int(value, 16)) if base == 16 else float(value)
    except ValueError:
        number = float("nan")
    good = number == number and abs(number) != float("inf") and (
        not whole or number.is_integer()) and (number > minimum if above else
                                               number >= minimum)
    if not good:
        raise ParseError(f"<{element.tag} {name}={value[:40]!r}> must be {what} {bound}",
                         source=source, line=element.line)
    return number


def _pcie_bytes_per_s(element: _Element, source: str) -> float | None:
    """One direction of a PCIe link as ``link_speed`` / ``link_width`` state it."""
    speed, width = element.attrs.get("link_speed", ""), element.attrs.get("link_width", "")
    try:
        rate = float(speed.split()[0])
        lanes = int(width)
    except (ValueError, IndexError):
        return None  # NCCL writes "Unknown" where the kernel did not say
    if rate <= 0 or lanes <= 0:
        raise ParseError(f"<pci link_speed={speed!r} link_width={width!r}> is not a link",
                         source=source, line=element.line)
    encoding = 128 / 130 if rate >= 8 else 8 / 10
    return rate * 1e9 * lanes * encoding / 8


def parse_nccl_xml(text: str, *, source: str) -> NodeLayout:
    """The node layout an NCCL topology dump describes (module docstring)."""
    system = _parse_tree(text, source)
    cpus = [c for c in system.children if c.tag == "cpu"]
    if not cpus:
        raise ParseError("no <cpu> in <system>", source=source, line=system.line)
    gpus: list[tuple[_Element, _Element, int]] = []  # (gpu, its pci, switch)
    nets: list[tuple[_Element, int]] = []
    switch_cpu: list[int] = []
    for socket, cpu in enumerate(cpus):
        for top in cpu.children:
            if top.tag != "pci":
                continue
            switch = len(switch_cpu)
            found = _devices(top, switch, gpus, nets)
            if found:
                switch_cpu.append(socket)
    if not gpus:
        raise ParseError("no <gpu> in the dump", source=source, line=system.line)
    gpus.sort(key=lambda g: _number(g[0], "dev", source, whole=True))
    return _layout(gpus, nets, switch_cpu, source)


def _devices(element: _Element, switch: int, gpus: list[tuple[_Element, _Element, int]],
             nets: list[tuple[_Element, int]]) -> bool:
    """Collect the GPUs and net ports under ``element`` on ``switch``; whether any."""
    found = False
    for child in element.children:
        if child.tag == "gpu":
            gpus.append((child, element, switch))
            found = True
        elif child.tag == "nic":
            for net in child.iter("net"):
                nets.append((net, switch))
                found = True
        elif child.tag == "pci":
            found = _devices(child, switch, gpus, nets) or found
    return found


def _layout(gpus: list[tuple[_Element, _Element, int]], nets: list[tuple[_Element, int]],
            switch_cpu: list[int], source: str) -> NodeLayout:
    bus_of = {pci.attrs.get("busid", "").lower(): i for i, (_, pci, _) in enumerate(gpus)}
    pairs: dict[tuple[int, int], int] = {}
    to_switch: list[int] = []
    for i, (gpu, _, _) in enumerate(gpus):
        links = 0
        for nvlink in gpu.iter("nvlink"):
            count = int(_number(nvlink, "count", source, whole=True, above=True))
            target = _attr(nvlink, "target", source).lower()
            tclass = int(_number(nvlink, "tclass", source, base=16, default="0x0"))
            if target in bus_of and bus_of[target] != i:
                a, b = sorted((i, bus_of[target]))
                pairs[(a, b)] = max(pairs.get((a, b), 0), count)
            elif tclass == _NVSWITCH_CLASS:
                links += count
        to_switch.append(links)
    nvswitch = any(to_switch)
    notes = []
    if nvswitch and len(set(to_switch)) > 1:
        notes.append(f"GPUs have {min(to_switch)} to {max(to_switch)} NVLinks to the "
                     "NVSwitch: the fewest taken")
    sms = {int(_number(g, "sm", source, whole=True, above=True)) for g, _, _ in gpus}
    speeds = [_number(n, "speed", source, above=True) for n, _ in nets]
    if len(set(speeds)) > 1:  # a node has one NIC speed in distsim; a ring runs at the slowest
        mix = ", ".join(f"{speeds.count(v)} x {v / 1e3:g} Gb/s" for v in sorted(set(speeds)))
        notes.append(f"NICs run at different speeds ({mix}): the slowest taken for all")
    pcie = [b for _, pci, _ in gpus if (b := _pcie_bytes_per_s(pci, source)) is not None]
    return NodeLayout(
        source=source, kind="NCCL topology XML",
        gpu_names=tuple(f"GPU{g.attrs.get('dev', i)}" for i, (g, _, _) in enumerate(gpus)),
        nic_names=tuple(n.attrs.get("name", f"NIC{j}") for j, (n, _) in enumerate(nets)),
        gpu_pcie_switch=tuple(s for _, _, s in gpus),
        nic_pcie_switch=tuple(s for _, s in nets), pcie_switch_cpu=tuple(switch_cpu),
        nvswitch=nvswitch, links_per_gpu=min(to_switch) if nvswitch else 0,
        nvlink_pairs=() if nvswitch else tuple((a, b, n) for (a, b), n in pairs.items()),
        sm=min(sms), pcie_bandwidth_bytes_per_s=min(pcie) if pcie else None,
        nic_bandwidth_bytes_per_s=min(speeds) * 1e6 / 8 if speeds and min(speeds) > 0
        else None, notes=tuple(notes))
