"""Node presets: what is inside one box, with the vendor figures it is built from.

A preset fixes a node's *shape* — how many GPUs, whether they share an NVSwitch or are cabled
to each other directly (a mesh), which PCIe switch each GPU and NIC hangs from, which CPU
socket each PCIe switch hangs from — and the *default figures* of its links.  Figures can
be overridden per cluster (``nvlink.bandwidth``, ``nic.bandwidth``, …, see
:mod:`topology.cluster`); the shape cannot, except where a preset offers choices
(``pcie-8gpu`` takes one or two NICs).

Conventions of the figures below:

* bandwidths are nominal, **one direction**, in bytes per second (a full-duplex cable is
  two directed links, each with this figure);
* latencies are per directed link, in seconds; a route's latency is the sum over its links;
* in a mesh node (``gpu_links``: the DGX-1's hybrid cube-mesh, the MI300X's xGMI full
  mesh, the quad GH200's NVLink mesh) the ``nvlink`` figure is *one* GPU-to-GPU link (one
  NVLink, one xGMI link); a pair cabled with several links gets one directed link per
  direction with their sum.  xGMI
  links are of kind ``nvlink``: RCCL, like NCCL, treats them as its NVLink class.

Latencies are set so that routes reproduce NCCL's own per-hop latency model (NCCL
``src/graph/tuning.cc``, table ``hwLat``, LL protocol: NVLink 0.6 us, PCI 1.0 us, NET
2.7 us) rather than bare silicon figures, because the software-visible hop latency is
what a collective pays.  Each figure says whether it is a datasheet value or an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from distsim_gpu.topology.model import Device, Link, full_duplex

__all__ = [
    "BOXES",
    "CABLE_LATENCY_S",
    "PCIE_GEN3_X16_BYTES_PER_S",
    "PCIE_GEN4_X16_BYTES_PER_S",
    "PCIE_GEN5_X16_BYTES_PER_S",
    "SWITCH",
    "HostFigure",
    "LinkFigure",
    "NodePreset",
    "NvlinkInventory",
    "SwitchPreset",
    "build_node",
    "build_switch_node",
]


def _pcie_x16_bytes_per_s(giga_transfers_per_s: float) -> float:
    """One direction of a PCIe x16 link: 16 lanes x rate x 128b/130b encoding / 8 bits."""
    return giga_transfers_per_s * 1e9 * 16 * (128 / 130) / 8


# PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b -> 15.75 GB/s (x16, one way).
PCIE_GEN3_X16_BYTES_PER_S = _pcie_x16_bytes_per_s(8.0)
# PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b -> 31.51 GB/s (x16, one way).
PCIE_GEN4_X16_BYTES_PER_S = _pcie_x16_bytes_per_s(16.0)
# PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b -> 63.02 GB/s (x16, one way).
PCIE_GEN5_X16_BYTES_PER_S = _pcie_x16_bytes_per_s(32.0)

# NVLink: a GPU -> NVSwitch -> GPU route crosses two links; 2 x 0.3 us = 0.6 us, NCCL's
# NVLink hop latency (tuning.cc hwLat, LL).  An estimate of the software-visible hop.
NVLINK_HOP_LATENCY_S = 0.3e-6
# PCIe: GPU -> PCIe switch -> GPU crosses two links; 2 x 0.5 us = 1.0 us, NCCL's PCI hop
# latency.  The switch silicon alone is ~0.1 us port to port; the rest is DMA and PCIe
# transaction overhead, which a transfer pays too.  Estimate.
PCIE_HOP_LATENCY_S = 0.5e-6
# A direct GPU-to-GPU link (a mesh node) is one hop, as GPU -> NVSwitch -> GPU is to NCCL
# (hwLat has one NVLink figure, whatever the cabling): 0.6 us.  Estimate, as above.
NVLINK_DIRECT_LATENCY_S = 2 * NVLINK_HOP_LATENCY_S
# Inter-socket hop (xGMI / UPI): remote-NUMA accesses cost ~0.1 us more than local ones in
# Intel Memory Latency Checker measurements on two-socket servers.  Estimate.
INTER_SOCKET_LATENCY_S = 0.1e-6
# NIC crossing: ConnectX-6 VPI adapter user manual quotes "sub-600ns latency" end to end,
# i.e. through two adapters; we charge half at each NIC.  ConnectX-7 assumed the same.
NIC_LATENCY_S = 0.3e-6
# Switch port to port: NVIDIA Quantum HDR (QM8700 series) datasheet, 130 ns.  Quantum-2
# NDR (QM9700) taken as the same: both are cut-through; no better figure is sourced here.
IB_SWITCH_LATENCY_S = 130e-9
# Cable: ~10 m at ~5 ns/m (light in fibre, ~2e8 m/s).  Estimate.
CABLE_LATENCY_S = 50e-9


@dataclass(frozen=True, slots=True)
class LinkFigure:
    """Nominal one-direction bandwidth and per-link latency of one class of link."""

    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class HostFigure:
    """What a node's host offers an offloaded optimizer (:mod:`workloads.strategy.offload`).

    ``memory_bytes`` is the node's CPU memory; ``memory_bandwidth_bytes_per_s`` one socket's
    peak DRAM bandwidth (channels x transfer rate x 8 bytes); ``drives`` the node's NVMe
    data drives (in RAID 0) with one drive's sequential read and write bandwidth.
    """

    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    drives: int
    drive_read_bytes_per_s: float
    drive_write_bytes_per_s: float


# Data-centre PCIe Gen4 U.2 NVMe drives of 3.84 TB (Samsung PM1733, KIOXIA CM6 class)
# quote ~6.4-7 GB/s sequential read and ~3.5-4 GB/s sequential write; the DGX guides do
# not name the drive, so 6.5 / 3.5 GB/s is an estimate (override: parallelism.offload.host).
_U2_READ_BYTES_PER_S = 6.5e9
_U2_WRITE_BYTES_PER_S = 3.5e9


def _ddr_socket_bytes_per_s(channels: int, mega_transfers_per_s: float) -> float:
    """Peak DRAM bandwidth of one socket: channels x MT/s x 8 bytes (a 64-bit channel)."""
    return channels * mega_transfers_per_s * 1e6 * 8


@dataclass(frozen=True, slots=True)
class NvlinkInventory:
    """The NVLink switch system of a rack-scale node, as cabled: each GPU has
    ``links_per_gpu`` NVLinks, each to a port of a switch chip with ``ports_per_chip``
    ports, ``chips_per_tray`` chips to a switch tray; ``gpus_per_tray`` GPUs to a compute
    tray.  The flow network keeps one non-blocking logical switch (exact for a
    non-blocking fabric); these figures are for counting what a rack holds."""

    links_per_gpu: int
    ports_per_chip: int
    chips_per_tray: int
    gpus_per_tray: int

    def counts(self, gpus: int) -> dict[str, int]:
        """Devices and cables of a domain of ``gpus`` GPUs (switch chips rounded up)."""
        links = gpus * self.links_per_gpu
        chips = -(-links // self.ports_per_chip)
        return {"compute_trays": gpus // self.gpus_per_tray, "nvlink_links": links,
                "nvswitch_chips": chips, "switch_trays": -(-chips // self.chips_per_tray)}


@dataclass(frozen=True, slots=True)
class NodePreset:
    """The shape and default figures of one kind of node.

    ``gpu_pcie_switch[i]`` is the PCIe switch of GPU i; ``nic_layouts`` the allowed NIC
    placements (each a tuple giving the PCIe switch of NIC j; the first is the default);
    ``pcie_switch_cpu[k]`` the CPU socket of PCIe switch k.  ``nvlink`` is None for a
    node without NVLink.  ``gpu_links`` is empty for a node whose GPUs meet at an NVSwitch;
    for a mesh it lists each cabled GPU pair ``(a, b, links)`` with its number of links,
    and ``nvlink`` is the figure of one link.
    """

    name: str
    description: str
    gpu_model: str
    nic_model: str
    gpu_pcie_switch: tuple[int, ...]
    nic_layouts: tuple[tuple[int, ...], ...]
    pcie_switch_cpu: tuple[int, ...]
    cpus: int
    nvlink: LinkFigure | None
    pcie: LinkFigure
    cpu: LinkFigure
    nic: LinkFigure
    switch_latency_s: float = IB_SWITCH_LATENCY_S
    cable_latency_s: float = CABLE_LATENCY_S
    gpu_links: tuple[tuple[int, int, int], ...] = ()
    # What the NICs speak, which sets the fabric's default routing (topology.routing):
    # InfiniBand ConnectX adapters unless a preset says "ethernet" (RoCE).
    fabric_technology: str = "infiniband"
    # Whether the NVSwitch reduces in the switch (NVLink SHARP, "NVLS": third-generation
    # NVSwitch of HGX H100/H200 boards); the NVLS collectives need it.
    nvswitch_sharp: bool = False
    # The host's memory and drives, for offloading (None: not described; a scenario that
    # offloads must then state them under parallelism.offload.host).
    host: HostFigure | None = None
    # A node of ``boards`` identical boards (compute trays, baseboards) under one NVSwitch
    # fabric: GPU i, its PCIe switch and socket belong to board i // (gpus / boards), and
    # sockets are joined only within a board (topology.domain tiles them).
    boards: int = 1
    # Each GPU's link to its own I/O hub where that is NVLink-C2C to a Grace CPU rather than
    # PCIe (GB200, GB300): its figure replaces ``pcie`` on the GPU's side of ``pcie{k}``.
    c2c: LinkFigure | None = None
    # The physical NVLink switch system behind the one logical ``nvswitch`` device, for
    # reporting true device and cable counts (None: the box's own switches, not counted).
    inventory: NvlinkInventory | None = None

    @property
    def gpus(self) -> int:
        return len(self.gpu_pcie_switch)

    @property
    def mesh(self) -> bool:
        """Whether the GPUs are cabled to each other directly (no NVSwitch)."""
        return bool(self.gpu_links)

    @property
    def nic_counts(self) -> tuple[int, ...]:
        """The NIC counts this node can be built with; the first is the default."""
        return tuple(len(layout) for layout in self.nic_layouts)

    def nic_layout(self, count: int) -> tuple[int, ...] | None:
        """The PCIe switch of each NIC for ``count`` NICs, or None if not offered."""
        for layout in self.nic_layouts:
            if len(layout) == count:
                return layout
        return None


@dataclass(frozen=True, slots=True)
class SwitchPreset:
    """A synthetic box for hand checks: N GPUs, each with one full-duplex link to one ideal
    switch.

    It is one node (``num_nodes == 1``).  The switch is an ``nvswitch``-kind device and the
    links are ``nvlink``-kind, so a route GPU -> switch -> GPU has two links, latency exactly
    2 x ``link_latency`` and transport ``"nvlink"`` by the general rule — no special case.
    """

    name: str
    description: str
    gpus: int
    link: LinkFigure


# NVIDIA DGX A100 User Guide and "NVIDIA DGX A100 System Architecture" white paper:
# 8x A100-SXM4 on an HGX A100 board with six NVSwitches; 8 single-port ConnectX-6 HDR
# 200 Gb/s compute NICs; 2x AMD EPYC 7742; four PCIe Gen4 switches, each shared by two GPUs
# and two compute NICs (GPU 2k, 2k+1 and NIC 2k, 2k+1 on switch k); switches 0, 1 under
# CPU 0 and 2, 3 under CPU 1 (GPUs 0-3 report NUMA affinity to socket 0).
DGX_A100 = NodePreset(
    name="dgx-a100",
    description="NVIDIA DGX A100: 8x A100 SXM4 on NVSwitch (300 GB/s per direction), "
                "8x HDR 200 Gb/s, 4 shared PCIe Gen4 switches, 2 sockets",
    gpu_model="A100-SXM4-80GB",
    nic_model="ConnectX-6 HDR 200Gb/s",
    gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
    nic_layouts=((0, 0, 1, 1, 2, 2, 3, 3),),
    pcie_switch_cpu=(0, 0, 1, 1),
    cpus=2,
    # NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional = 12 links x 25 GB/s per
    # direction (A100 architecture white paper); the six NVSwitches stand as one device
    # with one 300 GB/s-per-direction link to each GPU.
    nvlink=LinkFigure(12 * 25e9, NVLINK_HOP_LATENCY_S),
    pcie=LinkFigure(PCIE_GEN4_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # AMD EPYC 7002 ("Rome"): sockets joined by up to four x16 xGMI-2 links; we assume four
    # at 16 GT/s, 16 lanes x 16 Gb/s / 8 = 32 GB/s each -> 128 GB/s per direction.  AMD does
    # not publish the DGX A100's xGMI setting; an estimate (override with cpu.bandwidth).
    cpu=LinkFigure(4 * 32e9, INTER_SOCKET_LATENCY_S),
    # InfiniBand HDR: 200 Gb/s = 25 GB/s per direction (ConnectX-6 datasheet).
    nic=LinkFigure(200e9 / 8, NIC_LATENCY_S),
    # DGX A100 (640 GB) datasheet: 2 TB system memory, 30 TB internal storage = 8x 3.84 TB
    # U.2 NVMe; AMD EPYC 7742: 8 channels of DDR4-3200 per socket -> 204.8 GB/s.
    host=HostFigure(2e12, _ddr_socket_bytes_per_s(8, 3200), 8, _U2_READ_BYTES_PER_S,
                    _U2_WRITE_BYTES_PER_S),
)

# NVIDIA DGX H100 User Guide: 8x H100-SXM5 with four third-generation NVSwitches; 8 ConnectX-7
# NDR 400 Gb/s compute ports in two network modules, one module per CPU; the guide's
# "Network Modules" table maps each ConnectX-7 to exactly one GPU, and `nvidia-smi topo -m`
# on the box reports PIX (same PCIe switch) only between a GPU and its own NIC.  So: eight
# PCIe Gen5 switches, switch k holding GPU k and NIC k (our NIC numbering follows the GPU it
# serves, not the OSFP port label); switches 0-3 under CPU 0, 4-7 under CPU 1.
# 2x Intel Xeon Platinum 8480C.
DGX_H100 = NodePreset(
    name="dgx-h100",
    description="NVIDIA DGX H100: 8x H100 SXM5 on NVSwitch (450 GB/s per direction), "
                "8x NDR 400 Gb/s, one PCIe Gen5 switch per GPU-NIC pair, 2 sockets",
    gpu_model="H100-SXM5-80GB",
    nic_model="ConnectX-7 NDR 400Gb/s",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7),
    nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1),
    cpus=2,
    # NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional (SXM) = 18 NVLink4 links x
    # 25 GB/s per direction (H100 architecture white paper) -> 450 GB/s per direction.
    nvlink=LinkFigure(18 * 25e9, NVLINK_HOP_LATENCY_S),
    pcie=LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # 4th Gen Intel Xeon Scalable (Sapphire Rapids) product brief: up to four UPI 2.0 links
    # at 16 GT/s.  A UPI link moves 2 bytes per transfer each way (the arithmetic behind
    # Intel's 10.4 GT/s = 20.8 GB/s), so 32 GB/s per link, 4 links -> 128 GB/s per direction.
    cpu=LinkFigure(4 * 16e9 * 2, INTER_SOCKET_LATENCY_S),
    # InfiniBand NDR: 400 Gb/s = 50 GB/s per direction (ConnectX-7 datasheet).
    nic=LinkFigure(400e9 / 8, NIC_LATENCY_S),
    # NVIDIA H100 architecture white paper: third-generation NVSwitch with NVLink SHARP
    # (in-switch all-reduce/multicast), which NCCL >= 2.17 uses as its NVLS algorithm.
    nvswitch_sharp=True,
    # DGX H100 datasheet: 2 TB system memory, 8x 3.84 TB U.2 NVMe internal storage; Intel
    # Xeon Platinum 8480C: 8 channels of DDR5-4800 per socket -> 307.2 GB/s.
    host=HostFigure(2e12, _ddr_socket_bytes_per_s(8, 4800), 8, _U2_READ_BYTES_PER_S,
                    _U2_WRITE_BYTES_PER_S),
)

# NVIDIA DGX H200 datasheet: the DGX H100 chassis with 8x H200 SXM (141 GB HBM3e each,
# 1,128 GB in all): the same four NVSwitches (NVLink 900 GB/s bidirectional per GPU), 8
# single-port ConnectX-7 VPI 400 Gb/s compute ports, 2x Xeon Platinum 8480C, 2 TB of system
# memory and 8x 3.84 TB U.2 NVMe.  So every figure but the GPU is DGX H100's.
DGX_H200 = replace(
    DGX_H100,
    name="dgx-h200",
    description="NVIDIA DGX H200: 8x H200 SXM (141 GB) on NVSwitch (450 GB/s per direction), "
                "8x NDR 400 Gb/s, one PCIe Gen5 switch per GPU-NIC pair, 2 sockets",
    gpu_model="H200-SXM5-141GB",
)

# NVIDIA DGX-1 with Tesla V100 (DGX-1 System Architecture white paper, WP-08437-002):
# 8x V100-SXM2 in a hybrid cube-mesh of NVLink 2.0 -- six links of 25 GB/s per direction
# per GPU; the GPUs sit on the corners of a cube whose twelve edges are cabled, two faces
# also have their diagonals, and some edges carry two links ("three interwoven rings of
# single NVLink connections").  So GPUs 0-3 and 4-7 are each fully connected and GPU i is
# cabled to i+4; which pairs are doubled is read from `nvidia-smi topo -m` on V100-SXM2
# 8-GPU servers of this design (NV2 entries): 0-3, 0-4, 1-2, 1-5, 2-3, 4-7, 5-6, 6-7.
# The doubled pairs form one Hamiltonian cycle (0-3-2-1-5-6-7-4) and the single ones
# another (0-1-3-7-5-4-6-2).  Four PLX PCIe Gen3 switches, each holding two GPUs and one of
# the four EDR 100 Gb/s InfiniBand NICs; 2x Xeon E5-2698 v4 joined by QPI.
_DGX1_NVLINKS = ((0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2), (1, 2, 2), (1, 3, 1), (1, 5, 2),
                 (2, 3, 2), (2, 6, 1), (3, 7, 1), (4, 5, 1), (4, 6, 1), (4, 7, 2), (5, 6, 2),
                 (5, 7, 1), (6, 7, 2))
DGX1_V100 = NodePreset(
    name="dgx1-v100",
    description="NVIDIA DGX-1 (V100): 8x V100 SXM2 in an NVLink 2.0 hybrid cube-mesh "
                "(6 links of 25 GB/s per direction per GPU), 4x EDR 100 Gb/s, "
                "4 PCIe Gen3 switches",
    gpu_model="V100-SXM2-32GB",
    nic_model="ConnectX-4 EDR 100Gb/s",
    gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
    nic_layouts=((0, 1, 2, 3),),
    pcie_switch_cpu=(0, 0, 1, 1),
    cpus=2,
    # NVIDIA V100 datasheet: NVLink 2.0, 300 GB/s bidirectional = 6 links x 25 GB/s per
    # direction.  One figure per link; a doubled pair gets 50 GB/s each way.
    nvlink=LinkFigure(25e9, NVLINK_DIRECT_LATENCY_S),
    gpu_links=_DGX1_NVLINKS,
    pcie=LinkFigure(PCIE_GEN3_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # Intel Xeon E5-2600 v4 datasheet: two QPI links at 9.6 GT/s, 2 bytes per transfer
    # -> 19.2 GB/s each, 38.4 GB/s per direction.
    cpu=LinkFigure(2 * 9.6e9 * 2, INTER_SOCKET_LATENCY_S),
    # InfiniBand EDR: 100 Gb/s = 12.5 GB/s per direction (ConnectX-4 datasheet).
    nic=LinkFigure(100e9 / 8, NIC_LATENCY_S),
    # DGX-1 user guide: 512 GB DDR4, 4x 1.92 TB SSD in RAID 0 (SATA: ~0.5 GB/s each way
    # per drive, an estimate); Xeon E5-2698 v4: 4 channels of DDR4-2400 -> 76.8 GB/s.
    host=HostFigure(512e9, _ddr_socket_bytes_per_s(4, 2400), 4, 0.5e9, 0.5e9),
)

# AMD Instinct MI300X platform (the 8-GPU OAM universal baseboard of AMD's reference design,
# as in the Dell PowerEdge XE9680, Supermicro AS-8125GS and cloud MI300X shapes): 8x MI300X,
# each with seven 16-lane 4th-gen Infinity Fabric (xGMI) links, one to every other GPU -- a
# full mesh.  AMD MI300X data sheet: 128 GB/s bidirectional per link, i.e. 64 GB/s per
# direction, 896 GB/s aggregate peer-to-peer per GPU (448 GB/s each way).  Each GPU's
# PCIe Gen5 x16 host link goes to a PCIe switch it shares with one 400 Gb/s NIC (one NIC
# per GPU, as these servers are cabled for scale-out); switches 0-3 under CPU 0, 4-7 under
# CPU 1.  2x AMD EPYC 9004 ("Genoa").
MI300X = NodePreset(
    name="mi300x",
    description="AMD Instinct MI300X platform: 8x MI300X OAM in an xGMI full mesh "
                "(7 links of 64 GB/s per direction per GPU), 8x 400 Gb/s, one PCIe Gen5 "
                "switch per GPU-NIC pair, 2 sockets",
    gpu_model="MI300X",
    nic_model="400Gb/s RDMA NIC",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7),
    nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1),
    cpus=2,
    # One xGMI link: x16 at 32 Gb/s per lane = 64 GB/s per direction (data sheet figure).
    nvlink=LinkFigure(64e9, NVLINK_DIRECT_LATENCY_S),
    gpu_links=tuple((a, b, 1) for a in range(8) for b in range(a + 1, 8)),
    pcie=LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # AMD EPYC 9004 ("Genoa"): sockets joined by up to four x16 xGMI links at up to 32 Gb/s
    # per lane -> 64 GB/s each; we assume all four (256 GB/s per direction).  Servers may
    # trade one for PCIe lanes; an estimate (override with cpu.bandwidth).
    cpu=LinkFigure(4 * 64e9, INTER_SOCKET_LATENCY_S),
    # 400 Gb/s = 50 GB/s per direction (ConnectX-7 / Broadcom Thor2 / AMD Pollara 400).
    nic=LinkFigure(400e9 / 8, NIC_LATENCY_S),
)

# HPE Cray EX254n node, as in CSCS Alps (docs.cscs.ch "Alps hardware": 2,688 nodes of four
# NVIDIA GH200 Grace Hopper superchips, "four Grace-Hopper modules and four corresponding
# network interface cards"): each superchip a Grace CPU joined by NVLink-C2C to an H100-class
# Hopper GPU with 96 GB HBM3, and its own HPE Slingshot-11 200 Gb/s NIC (Cassini).  The four
# Hopper GPUs are cabled to each other directly, no NVSwitch: a Hopper has 18 NVLink4 links
# and spends 6 on each of its three peers (Fusco et al., "Understanding Data Movement in
# Tightly Coupled Heterogeneous Systems: A Case Study with the Grace Hopper Superchip",
# arXiv 2408.11556, on Alps' nodes: 150 GB/s per direction between every GPU pair).  Each
# superchip is its own NUMA domain: ``pcie{k}`` stands for Grace k's I/O, holding GPU k (over
# NVLink-C2C, 450 GB/s per direction, far above anything the NIC path needs) and NIC k.
_QUAD_GH200_NVLINKS = tuple((a, b, 6) for a in range(4) for b in range(a + 1, 4))
QUAD_GH200 = NodePreset(
    name="quad-gh200",
    description="HPE Cray EX254n (CSCS Alps): 4x GH200 (H100 96 GB) in an NVLink4 full mesh "
                "(6 links of 25 GB/s per pair and direction), 4x Slingshot-11 200 Gb/s, "
                "one per superchip",
    gpu_model="GH200-96GB",
    nic_model="HPE Slingshot-11 Cassini 200Gb/s",
    gpu_pcie_switch=(0, 1, 2, 3),
    nic_layouts=((0, 1, 2, 3),),
    pcie_switch_cpu=(0, 1, 2, 3),
    cpus=4,
    # One NVLink4 link: 25 GB/s per direction (H100 architecture white paper); a pair has 6.
    nvlink=LinkFigure(25e9, NVLINK_DIRECT_LATENCY_S),
    gpu_links=_QUAD_GH200_NVLINKS,
    # The Cassini NIC's host interface is PCIe Gen4 x16 (HPE Slingshot NIC data sheet); the
    # GPU's side of ``pcie{k}`` is NVLink-C2C, which only NIC traffic crosses here, so the
    # whole GPU -> NIC path is given the Gen4 x16 figure (above the NIC's 25 GB/s either way).
    pcie=LinkFigure(PCIE_GEN4_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # Grace to Grace inside the node: no published figure found; an estimate that no
    # collective crosses (GPUs talk over their NVLinks, each through its own NIC).
    cpu=LinkFigure(100e9, INTER_SOCKET_LATENCY_S),
    # Slingshot-11: 200 Gb/s = 25 GB/s per direction per NIC.
    nic=LinkFigure(200e9 / 8, NIC_LATENCY_S),
    # Rosetta switch: "< 350 ns" port to port (HPE's figure, as quoted by De Sensi et al.,
    # "An In-Depth Analysis of the Slingshot Interconnect", SC 2020).
    switch_latency_s=350e-9,
    # Slingshot speaks (HPE-optimised) Ethernet: ECMP unless a cluster says adaptive.
    fabric_technology="ethernet",
)

# Google Cloud A4 (a4-highgpu-8g; Google Cloud "Networking and GPU machines": 8x NVIDIA B200,
# eight ConnectX-7 NICs for GPU-to-GPU RDMA over Converged Ethernet (RoCE) in a rail-aligned
# topology, 3,200 Gb/s of the VM's 3,600 Gb/s), an HGX B200 board: two fifth-generation
# NVSwitch chips, each B200 with 18 NVLink5 links of 50 GB/s per direction (NVIDIA B200
# datasheet: NVLink 1.8 TB/s bidirectional per GPU) -> 900 GB/s per direction, with NVLink
# SHARP.  Each GPU has a dedicated NIC ("8 RDMA RoCE NICs per node, gpuXrdma0" in the
# nccl-tests log of misc/gcp_a4_b200_roce_allgather_2nodes_16gpus.txt); the PCIe layout
# below, one Gen5 switch per GPU-NIC pair as on the DGX H100, is an assumption (Google does
# not publish it).  2x 5th Gen Intel Xeon Scalable (Emerald Rapids).
GCP_A4 = NodePreset(
    name="gcp-a4",
    description="Google Cloud A4: 8x B200 on NVSwitch (NVLink5, 900 GB/s per direction), "
                "8x ConnectX-7 400 Gb/s RoCE, one PCIe Gen5 switch per GPU-NIC pair, "
                "2 sockets",
    gpu_model="B200-180GB",
    nic_model="ConnectX-7 400Gb/s RoCE",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7),
    nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1),
    cpus=2,
    nvlink=LinkFigure(18 * 50e9, NVLINK_HOP_LATENCY_S),
    pcie=LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # 5th Gen Xeon Scalable product brief: up to four UPI 2.0 links at 20 GT/s, 2 bytes per
    # transfer each way -> 40 GB/s each, 160 GB/s per direction.
    cpu=LinkFigure(4 * 20e9 * 2, INTER_SOCKET_LATENCY_S),
    # 400 Gb/s = 50 GB/s per direction (ConnectX-7 datasheet).
    nic=LinkFigure(400e9 / 8, NIC_LATENCY_S),
    fabric_technology="ethernet",
    # Fifth-generation NVSwitch keeps NVLink SHARP (NVIDIA Blackwell architecture brief).
    nvswitch_sharp=True,
)

# A generic 8-GPU PCIe server (e.g. 8x A100 PCIe behind two Gen4 PCIe switches, as in
# many OEM 4U boxes): no NVLink; GPUs 0-3 on switch 0 under CPU 0, GPUs 4-7 on switch 1
# under CPU 1; NIC j (if present) on switch j.  Traffic between the halves goes up to the
# root complex and across the inter-socket link.  2x 3rd Gen Intel Xeon Scalable (Ice Lake).
PCIE_8GPU = NodePreset(
    name="pcie-8gpu",
    description="8 GPUs on PCIe Gen4 only (no NVLink): 2 PCIe switches of 4 GPUs, one per "
                "socket; 1 (default) or 2 NICs of 200 Gb/s",
    gpu_model="A100-PCIe-80GB",
    nic_model="ConnectX-6 HDR 200Gb/s",
    gpu_pcie_switch=(0, 0, 0, 0, 1, 1, 1, 1),
    nic_layouts=((0,), (0, 1)),
    pcie_switch_cpu=(0, 1),
    cpus=2,
    nvlink=None,
    pcie=LinkFigure(PCIE_GEN4_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # 3rd Gen Intel Xeon Scalable (Ice Lake-SP) product brief: three UPI links at 11.2 GT/s,
    # 2 bytes per transfer -> 22.4 GB/s each, 67.2 GB/s per direction.
    cpu=LinkFigure(3 * 11.2e9 * 2, INTER_SOCKET_LATENCY_S),
    nic=LinkFigure(200e9 / 8, NIC_LATENCY_S),
)

SWITCH = SwitchPreset(
    name="switch",
    description="synthetic: N GPUs (default 8), each with one full-duplex link to one ideal "
                "switch (default 100 GB/s, 1 us); one node, for hand checks",
    gpus=8,
    link=LinkFigure(100e9, 1e-6),
)

#: The boxes defined here (the Blackwell and rack-scale ones are in
#: :mod:`topology.presets_blackwell`; :mod:`topology.preset_registry` names them all).
BOXES: tuple[NodePreset, ...] = (DGX_A100, DGX_H100, DGX_H200, DGX1_V100, MI300X, PCIE_8GPU,
                                 QUAD_GH200, GCP_A4)


def build_node(node: int, preset: NodePreset, *, nic_layout: tuple[int, ...],
               nvlink: LinkFigure | None, pcie: LinkFigure,
               cpu: LinkFigure) -> tuple[list[Device], list[Link]]:
    """The devices and links of node ``node`` of a preset's shape, with the given figures.

    Names: ``n{node}.gpu{i}``, ``n{node}.nvswitch`` (not in a mesh node), ``n{node}.pcie{k}``,
    ``n{node}.cpu{c}``, ``n{node}.nic{j}``.  NICs are not linked to the fabric here (see
    :mod:`topology.fabrics`).
    """
    p = f"n{node}."
    devices: list[Device] = []
    links: list[Link] = []
    devices.extend(Device(f"{p}cpu{c}", "cpu", node, c) for c in range(preset.cpus))
    devices.extend(Device(f"{p}pcie{k}", "pcie_switch", node, k)
                   for k in range(len(preset.pcie_switch_cpu)))
    devices.extend(Device(f"{p}gpu{i}", "gpu", node, i) for i in range(preset.gpus))
    devices.extend(Device(f"{p}nic{j}", "nic", node, j) for j in range(len(nic_layout)))
    if nvlink is not None and preset.mesh:
        links.extend(_mesh_links(p, preset.gpu_links, nvlink))
    elif nvlink is not None:
        devices.append(Device(f"{p}nvswitch", "nvswitch", node, 0,
                              sharp=preset.nvswitch_sharp))
        for i in range(preset.gpus):
            links.extend(full_duplex(f"{p}gpu{i}", f"{p}nvswitch", nvlink.bandwidth_bytes_per_s,
                                     nvlink.latency_s, "nvlink"))
    bw, lat = pcie.bandwidth_bytes_per_s, pcie.latency_s
    host_side = preset.c2c or pcie
    for i, k in enumerate(preset.gpu_pcie_switch):
        links.extend(full_duplex(f"{p}gpu{i}", f"{p}pcie{k}", host_side.bandwidth_bytes_per_s,
                                 host_side.latency_s, "pcie"))
    for j, k in enumerate(nic_layout):
        links.extend(full_duplex(f"{p}nic{j}", f"{p}pcie{k}", bw, lat, "pcie"))
    # Each switch's upstream port is itself an x16 link into its CPU's root complex.
    for k, c in enumerate(preset.pcie_switch_cpu):
        links.extend(full_duplex(f"{p}pcie{k}", f"{p}cpu{c}", bw, lat, "pcie"))
    # A board's sockets are fully connected (one link for two; six for quad-gh200's four
    # Graces); boards' sockets are not joined to each other's (they meet over NVLink).
    per_board = preset.cpus // preset.boards
    for first in range(0, preset.cpus, per_board):
        for a in range(first, first + per_board):
            for b in range(a + 1, first + per_board):
                links.extend(full_duplex(f"{p}cpu{a}", f"{p}cpu{b}",
                                         cpu.bandwidth_bytes_per_s, cpu.latency_s, "cpu"))
    return devices, links


def _mesh_links(prefix: str, gpu_links: tuple[tuple[int, int, int], ...],
                nvlink: LinkFigure) -> list[Link]:
    """A mesh's GPU-to-GPU cables: one full-duplex link per cabled pair, ``count`` links'
    bandwidth each way (the flow engine shares the sum; rings are counted per link by
    :mod:`collectives.meshrings`)."""
    links: list[Link] = []
    for a, b, count in gpu_links:
        links.extend(full_duplex(f"{prefix}gpu{a}", f"{prefix}gpu{b}",
                                 count * nvlink.bandwidth_bytes_per_s, nvlink.latency_s,
                                 "nvlink"))
    return links


def build_switch_node(gpus: int, link: LinkFigure) -> tuple[list[Device], list[Link]]:
    """The ``switch`` preset: ``n0.gpu{i}`` each joined to ``n0.switch`` by one link."""
    devices = [Device(f"n0.gpu{i}", "gpu", 0, i) for i in range(gpus)]
    devices.append(Device("n0.switch", "nvswitch", 0, 0))
    links: list[Link] = []
    for i in range(gpus):
        links.extend(full_duplex(f"n0.gpu{i}", "n0.switch", link.bandwidth_bytes_per_s,
                                 link.latency_s, "nvlink"))
    return devices, links
