"""Read ``nvidia-smi topo -m``: the GPU/NIC connection matrix of one machine.

The printout (NVIDIA System Management Interface, ``nvidia-smi topo --help`` and the legend
it prints) is a header row naming the devices — ``GPU0`` …, then the NICs as ``NIC0`` …
(with a "NIC Legend" mapping them to ``mlx5_0`` …) or by their own names in older
versions — then ``CPU Affinity``, ``NUMA Affinity`` (``GPU NUMA ID``); then one row per
device.  Each cell says how a pair is connected:

* ``NV#``  — a bonded set of # NVLinks;
* ``PIX``  — at most one PCIe bridge (the same PCIe switch);
* ``PXB``  — several PCIe bridges, not the host bridge (switches under one switch);
* ``PHB``  — through a PCIe host bridge (the CPU's root complex);
* ``NODE`` — between PCIe host bridges of one NUMA node;
* ``SYS``  — across the SMP interconnect between NUMA nodes (QPI/UPI, xGMI); ``SOC`` in
  old versions.

Read into a :class:`~topology.importers.layout.NodeLayout`: devices joined by PIX or PXB
share a PCIe switch (devices alone on a root port get one of their own); switches joined
by anything but SYS, or whose GPUs report the same NUMA affinity, share a CPU socket.  A
GPU pair shows its NVLinks instead of its PCIe relation, so GPUs are placed on switches
through the NICs they share one with, or else each on its own.  NVLink: when a GPU's
links summed over its peers exceed what any GPU has (18 on Hopper), they go through an
NVSwitch and NV# is each GPU's links to it; otherwise the pairs are cabled directly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.topology.importers.layout import NodeLayout, UnionFind

__all__ = ["looks_like_topo_matrix", "parse_topo_matrix"]

_RELATIONS = ("X", "SYS", "SOC", "NODE", "PHB", "PXB", "PIX")
_NV = re.compile(r"^NV([0-9]{1,3})$")  # a link count: a few ASCII digits
_SAME_SWITCH = ("PIX", "PXB")
# The most NVLinks one GPU has: Hopper's 18 (H100 white paper); more than this summed over
# a GPU's peers can only be the same links counted once per peer, through an NVSwitch.
MAX_NVLINKS_PER_GPU = 18
# A GPU's NVLinks -> its architecture (sm x 10): V100 has 6, A100 12, H100 18
# (the three architecture white papers).
SM_BY_NVLINKS = {6: 70, 12: 80, 18: 90}
_HEADER_END = ("CPU", "NUMA", "GPU")


def _is_header(tokens: Sequence[str]) -> bool:
    # The header starts GPU0 GPU1 …; GPU0's own row starts GPU0 X.
    return tokens[:1] == ["GPU0"] and tokens[1:2] != ["X"]


def looks_like_topo_matrix(text: str) -> bool:
    """Whether ``text`` reads as ``nvidia-smi topo -m`` output."""
    return any(_is_header(line.split()) for line in text.splitlines()[:50])


def _header(lines: Sequence[str], source: str) -> tuple[int, list[str]]:
    for number, line in enumerate(lines):
        tokens = line.split()
        if _is_header(tokens):
            names = []
            for token in tokens:
                if token in _HEADER_END:
                    break
                names.append(token)
            _check_names(names, source, number + 1)
            return number, names
    raise ParseError("no header row naming GPU0 …: not `nvidia-smi topo -m` output",
                     source=source, hint="run `nvidia-smi topo -m > topo.txt` on the machine")


def _check_names(names: list[str], source: str, line: int) -> None:
    """A header cell that starts like a GPU's name must be one (``GPU<n>``): ``GPUx``
    taken as a NIC would be a wrong machine; names must not repeat."""
    for name in names:
        if name.upper().startswith("GPU") and not re.fullmatch(r"GPU[0-9]{1,6}", name):
            raise ParseError(f"header cell {name[:40]!r} is not a GPU name", source=source,
                             line=line, hint="GPUs are named GPU0, GPU1, …")
    if len(set(names)) != len(names):
        raise ParseError("the header names a device twice", source=source, line=line)


def _rows(lines: Sequence[str], start: int, names: list[str],
          source: str) -> tuple[list[list[str]], list[int], list[str | None]]:
    """The matrix (cells as written), each row's line number and each row's NUMA
    affinity (None where not given)."""
    rows: dict[str, tuple[list[str], int, str | None]] = {}
    for number in range(start + 1, len(lines)):
        tokens = lines[number].split()
        if not tokens or tokens[0] not in names:
            if rows and (not tokens or tokens[0].startswith("Legend")):
                break
            continue
        line_no = number + 1
        if tokens[0] in rows:
            raise ParseError(f"row {tokens[0]} appears twice", source=source, line=line_no)
        cells = tokens[1:1 + len(names)]
        if len(cells) < len(names):
            raise ParseError(f"row {tokens[0]} has {len(cells)} cells, the header names "
                             f"{len(names)} devices", source=source, line=line_no)
        for column, cell in zip(names, cells):
            if cell not in _RELATIONS and not _NV.match(cell):
                raise ParseError(f"unknown connection {cell!r} between {tokens[0]} and "
                                 f"{column}", source=source, line=line_no,
                                 hint="valid: X, NV#, PIX, PXB, PHB, NODE, SYS")
        rest = tokens[1 + len(names):]
        numa = rest[1] if len(rest) >= 2 and rest[1] != "N/A" else None
        rows[tokens[0]] = (cells, line_no, numa)
    missing = [n for n in names if n not in rows]
    if missing:
        raise ParseError(f"no row for {missing[0]}", source=source, line=start + 1,
                         hint="the header names " + ", ".join(names))
    return ([rows[n][0] for n in names], [rows[n][1] for n in names],
            [rows[n][2] for n in names])


def _check_symmetric(matrix: list[list[str]], names: list[str], line_of: list[int],
                     source: str) -> None:
    for i, row in enumerate(matrix):
        if row[i] != "X":
            raise ParseError(f"{names[i]} is not X with itself", source=source,
                             line=line_of[i])
        for j in range(i):
            if row[j] != matrix[j][i]:
                raise ParseError(f"{names[i]}-{names[j]} is {row[j]} here but "
                                 f"{matrix[j][i]} in row {names[j]}", source=source,
                                 line=line_of[i], hint="the matrix must be symmetric")


def _nic_legend(lines: Sequence[str]) -> dict[str, str]:
    legend: dict[str, str] = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            legend[match.group(1)] = match.group(2)
    return legend


def parse_topo_matrix(text: str, *, source: str) -> NodeLayout:
    """The node layout ``nvidia-smi topo -m`` output describes (module docstring)."""
    lines = text.splitlines()
    start, names = _header(lines, source)
    matrix, line_of, numa = _rows(lines, start, names, source)
    _check_symmetric(matrix, names, line_of, source)
    gpus = [i for i, n in enumerate(names) if re.fullmatch(r"GPU[0-9]+", n)]
    gpu_set = set(gpus)
    nics = [i for i in range(len(names)) if i not in gpu_set]
    switches = UnionFind(len(names))
    for i, row in enumerate(matrix):
        for j in range(i):
            if row[j] in _SAME_SWITCH:
                switches.join(i, j)
    order = gpus + nics  # switches numbered by their first GPU, then NIC-only ones
    number: dict[int, int] = {}
    for i in order:
        number.setdefault(switches.find(i), len(number))
    switch_of = [number[switches.find(i)] for i in range(len(names))]
    sockets = _sockets(matrix, numa, switch_of, len(number))
    nvswitch, links, pairs, notes = _nvlinks(matrix, gpus, names)
    if nvswitch and links == 18:  # the matrix names no GPU model
        notes.append("NV18 is Hopper's count and Blackwell's: Hopper assumed (25 GB/s a "
                     "link); for B200 or B300 set gpu.model and nvlink.bandwidth 900 GB/s")
    legend = _nic_legend(lines)
    return NodeLayout(
        source=source, kind="nvidia-smi topo -m",
        gpu_names=tuple(names[i] for i in gpus),
        nic_names=tuple(legend.get(names[i], names[i]) for i in nics),
        gpu_pcie_switch=tuple(switch_of[i] for i in gpus),
        nic_pcie_switch=tuple(switch_of[i] for i in nics),
        pcie_switch_cpu=tuple(sockets), nvswitch=nvswitch, links_per_gpu=links,
        nvlink_pairs=pairs, sm=_sm(nvswitch, links, pairs), notes=tuple(notes))


def _sockets(matrix: list[list[str]], numa: list[str | None], switch_of: list[int],
             switches: int) -> list[int]:
    """The socket of each switch: joined by any PCIe relation but SYS, or a shared NUMA
    affinity."""
    joined = UnionFind(switches)
    first_at: dict[str, int] = {}
    for i, row in enumerate(matrix):
        if numa[i] is not None:
            joined.join(switch_of[i], switch_of[first_at.setdefault(numa[i], i)])
        for j in range(i):
            if row[j] in ("NODE", "PHB", "PIX", "PXB"):
                joined.join(switch_of[i], switch_of[j])
    return joined.numbering()


def _nvlinks(matrix: list[list[str]], gpus: list[int], names: list[str]
             ) -> tuple[bool, int, tuple[tuple[int, int, int], ...], list[str]]:
    pairs = []
    for a_pos, a in enumerate(gpus):
        for b_pos in range(a_pos + 1, len(gpus)):
            match = _NV.match(matrix[a][gpus[b_pos]])
            if match:
                pairs.append((a_pos, b_pos, int(match.group(1))))
    if not pairs:
        return False, 0, (), []
    totals = _links_per_gpu(pairs, len(gpus))
    if max(totals) <= MAX_NVLINKS_PER_GPU:
        return False, 0, tuple(pairs), [f"NVLink mesh: {len(pairs)} cabled GPU pairs"]
    counts = sorted({n for _, _, n in pairs})
    notes = [f"{max(totals)} NVLinks per GPU summed over its peers is more than a GPU has "
             f"({MAX_NVLINKS_PER_GPU}): an NVSwitch, NV{counts[0]} from each GPU"]
    if len(counts) > 1:
        notes.append(f"GPU pairs differ (NV{counts[0]} … NV{counts[-1]}): the fewest taken")
    return True, counts[0], (), notes


def _links_per_gpu(pairs: Sequence[tuple[int, int, int]], gpus: int) -> list[int]:
    """Each GPU's NVLinks summed over its cabled peers (one pass over the pairs: a sum per
    GPU over every pair would be cubic in the GPUs of the matrix)."""
    totals = [0] * gpus
    for a, b, n in pairs:
        totals[a] += n
        totals[b] += n
    return totals


def _sm(nvswitch: bool, links: int, pairs: tuple[tuple[int, int, int], ...]) -> int | None:
    """The architecture a GPU's NVLink count implies, where it implies one."""
    if nvswitch:
        return SM_BY_NVLINKS.get(links)
    if pairs:
        cabled = {x for p in pairs for x in p[:2]}
        totals = _links_per_gpu(pairs, max(cabled) + 1)
        per_gpu = {totals[g] for g in cabled}
        return SM_BY_NVLINKS.get(per_gpu.pop()) if len(per_gpu) == 1 else None
    return None
