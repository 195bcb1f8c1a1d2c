"""What an importer reads from a machine's topology dump: one node's layout.

Every reader (``nvidia-smi topo -m``, NCCL's topology XML) ends in a :class:`NodeLayout`:
which PCIe switch each GPU and NIC hangs from, which CPU socket each switch hangs from, how
the GPUs are joined by NVLink, and whatever figures the dump states (link speeds, GPU
architecture).  :mod:`topology.importers.writer` turns it into a cluster file; figures the
dump does not state are defaults the writer names in comments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from distsim_gpu.simcore.errors import ConfigError, closest

__all__ = ["NodeLayout", "UnionFind", "without_nics"]


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """One node as a dump describes it.

    ``nvswitch``: the GPUs meet at an NVSwitch, each over ``links_per_gpu`` NVLinks;
    otherwise ``nvlink_pairs`` lists the cabled GPU pairs ``(a, b, links)`` (empty: no
    NVLink).  Figures are ``None`` where the dump does not state them: ``sm`` the GPUs'
    compute capability x 10 (80: Ampere, 90: Hopper), bandwidths in bytes per second.
    ``notes`` say what was inferred, for the written file's comments.
    """

    source: str
    kind: str  # the dump's format, e.g. "nvidia-smi topo -m"
    gpu_names: tuple[str, ...]
    nic_names: tuple[str, ...]
    gpu_pcie_switch: tuple[int, ...]
    nic_pcie_switch: tuple[int, ...]
    pcie_switch_cpu: tuple[int, ...]
    nvswitch: bool = False
    links_per_gpu: int = 0
    nvlink_pairs: tuple[tuple[int, int, int], ...] = ()
    sm: int | None = None
    pcie_bandwidth_bytes_per_s: float | None = None
    nic_bandwidth_bytes_per_s: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def has_nvlink(self) -> bool:
        return self.nvswitch or bool(self.nvlink_pairs)


def without_nics(layout: NodeLayout, names: Iterable[str]) -> NodeLayout:
    """``layout`` without the named NICs (a storage or management NIC that collectives do
    not use); an unknown name is an error listing the NICs there are."""
    drop = set(names)
    for name in drop:
        if name not in layout.nic_names:
            raise ConfigError(f"the dump has no NIC {name!r}", key="--exclude-nic",
                              source=layout.source, hint=closest(name, layout.nic_names))
    kept = [i for i, name in enumerate(layout.nic_names) if name not in drop]
    return replace(layout, nic_names=tuple(layout.nic_names[i] for i in kept),
                   nic_pcie_switch=tuple(layout.nic_pcie_switch[i] for i in kept),
                   notes=(*layout.notes, *(f"NIC {n} left out" for n in sorted(drop))))


class UnionFind:
    """Groups of items joined pair by pair; groups numbered in order of first member."""

    def __init__(self, count: int) -> None:
        self.parent = list(range(count))

    def find(self, item: int) -> int:
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def numbering(self) -> list[int]:
        """Each item's group number, 0, 1, … in order of each group's first item."""
        numbers: dict[int, int] = {}
        return [numbers.setdefault(self.find(i), len(numbers)) for i in range(len(self.parent))]
