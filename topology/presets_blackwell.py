"""Blackwell-generation and rack-scale node presets: GB200 / GB300 NVL72 racks, the NVL36x2
variant, DGX B200 and HGX B300 boxes, and AMD's MI355X platform.

A rack is one distsim node (one NVLink domain, :mod:`topology.domain`) built from its
compute tray: 2 Grace CPUs, 4 Blackwell GPUs (each Grace joined to its two by NVLink-C2C)
and one scale-out NIC per GPU.  The 9 NVLink switch trays (18 NVSwitch chips of 72 NVLink5
ports) that join the 72 GPUs are one logical, non-blocking switch in the flow network; their
physical counts are the preset's :class:`~topology.presets.NvlinkInventory`.  Figures follow
the conventions of :mod:`topology.presets` (one direction, per link), each with its source.
"""

from __future__ import annotations

from distsim_gpu.topology.domain import tile
from distsim_gpu.topology.presets import (
    INTER_SOCKET_LATENCY_S,
    NIC_LATENCY_S,
    NVLINK_DIRECT_LATENCY_S,
    NVLINK_HOP_LATENCY_S,
    PCIE_GEN5_X16_BYTES_PER_S,
    PCIE_HOP_LATENCY_S,
    HostFigure,
    LinkFigure,
    NodePreset,
    NvlinkInventory,
)

__all__ = ["BLACKWELL_BOXES", "PCIE_GEN6_X16_BYTES_PER_S"]

# PCI Express Base Specification 6.0: 64 GT/s per lane in FLIT mode, 242 payload bytes of
# each 256-byte FLIT -> 121 GB/s (x16, one way).
PCIE_GEN6_X16_BYTES_PER_S = 64e9 * 16 * (242 / 256) / 8
# Blackwell's NVLink 5: 18 links of 50 GB/s per direction per GPU, 1.8 TB/s bidirectional
# (NVIDIA Blackwell architecture technical brief; GB200 NVL72 datasheet "NVLink bandwidth
# 130 TB/s" = 72 x 1.8 TB/s).
_NVLINK5 = LinkFigure(18 * 50e9, NVLINK_HOP_LATENCY_S)
# NVLink-C2C: 900 GB/s bidirectional between Grace and its GPUs (GB200 superchip datasheet),
# 450 GB/s per direction for each GPU's link; hop latency taken as PCIe's (estimate).
_C2C = LinkFigure(450e9, PCIE_HOP_LATENCY_S)
# Grace to Grace inside one compute tray: no published figure; an estimate that no
# collective crosses (GPUs talk over NVLink, each through its own NIC), as quad-gh200's.
_GRACE_PAIR = LinkFigure(100e9, INTER_SOCKET_LATENCY_S)
# NVLink switch tray: 2 NVLink 5 switch chips of 72 ports (NVIDIA "NVLink and NVLink
# Switch" page: 144 NVLink ports per tray, 9 trays per NVL72).
_NVL72_INVENTORY = NvlinkInventory(links_per_gpu=18, ports_per_chip=72, chips_per_tray=2,
                                   gpus_per_tray=4)
# NVL36x2: two racks of 36 GPUs, each with 9 switch trays whose ports are split between the
# rack's GPUs and the other rack's switch trays, so half a chip's ports face the GPUs
# (NVIDIA GB200 NVL72 / NVL36x2 design guides as reported by SemiAnalysis, "GB200 Hardware
# Architecture", 2024): 18 switch trays for 72 GPUs.
_NVL36X2_INVENTORY = NvlinkInventory(links_per_gpu=18, ports_per_chip=36, chips_per_tray=2,
                                     gpus_per_tray=4)
# Grace: 480 GB LPDDR5X at 512 GB/s per CPU (GB200 superchip datasheet); a tray's drives are
# 4 E1.S NVMe (GB200 NVL72 compute tray spec, as OEMs list it), figures as U.2 Gen4 drives'
# (estimate).
_GRACE_HOST = HostFigure(2 * 480e9, 512e9, 4, 6.5e9, 3.5e9)


def _tray(name: str, gpu_model: str, nic_model: str, nic: LinkFigure,
          pcie: LinkFigure) -> NodePreset:
    """One compute tray: GPU k and NIC k on Grace k // 2's I/O (hub k)."""
    return NodePreset(
        name=name, description="", gpu_model=gpu_model, nic_model=nic_model,
        gpu_pcie_switch=(0, 1, 2, 3), nic_layouts=((0, 1, 2, 3),),
        pcie_switch_cpu=(0, 0, 1, 1), cpus=2, nvlink=_NVLINK5, pcie=pcie, cpu=_GRACE_PAIR,
        nic=nic, nvswitch_sharp=True, host=_GRACE_HOST, c2c=_C2C)


# GB200 NVL72 (NVIDIA GB200 NVL72 datasheet): 18 compute trays of 2 GB200 superchips (each
# 1 Grace + 2 Blackwell GPUs), 9 NVLink switch trays; one ConnectX-7 400 Gb/s InfiniBand
# NIC per GPU for the compute fabric (PCIe Gen5 x16), 50 GB/s per direction.
_GB200_TRAY = _tray("gb200-nvl72", "GB200", "ConnectX-7 NDR 400Gb/s",
                    LinkFigure(400e9 / 8, NIC_LATENCY_S),
                    LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S))
GB200_NVL72 = tile(
    _GB200_TRAY, 18, inventory=_NVL72_INVENTORY,
    description="NVIDIA GB200 NVL72 rack: 72 Blackwell GPUs on one NVLink 5 domain (900 GB/s "
                "per direction each, 9 switch trays, NVLink SHARP), 18 trays of 2 Grace + "
                "4 GPUs over NVLink-C2C, one 400 Gb/s NIC per GPU")
# GB300 NVL72 (NVIDIA GB300 NVL72 datasheet): the same rack with Blackwell Ultra GPUs and one
# ConnectX-8 SuperNIC 800 Gb/s per GPU, whose built-in PCIe Gen6 switch joins GPU and NIC.
GB300_NVL72 = tile(
    _tray("gb300-nvl72", "GB300", "ConnectX-8 SuperNIC 800Gb/s",
          LinkFigure(800e9 / 8, NIC_LATENCY_S),
          LinkFigure(PCIE_GEN6_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S)),
    18, inventory=_NVL72_INVENTORY,
    description="NVIDIA GB300 NVL72 rack: 72 Blackwell Ultra GPUs on one NVLink 5 domain "
                "(900 GB/s per direction each), 18 trays of 2 Grace + 4 GPUs, one 800 Gb/s "
                "ConnectX-8 per GPU")
# GB200 NVL36x2: the 72 GPUs in two racks whose switch trays are cross-cabled.  The switch
# system stays non-blocking (half of every switch port faces the other rack), so each GPU
# keeps 900 GB/s to any other; a route between racks crosses a second switch chip: half a
# hop more on each GPU's link (0.15 us, estimate), 0.9 us GPU to GPU.
GB200_NVL36X2 = tile(
    _GB200_TRAY, 18, name="gb200-nvl36x2", inventory=_NVL36X2_INVENTORY,
    nvlink=LinkFigure(18 * 50e9, 1.5 * NVLINK_HOP_LATENCY_S),
    description="NVIDIA GB200 NVL36x2: two racks of 36 GB200 GPUs joined into one 72-GPU "
                "NVLink domain through cross-cabled switch trays (18 trays), one 400 Gb/s NIC "
                "per GPU")

# NVIDIA DGX B200 datasheet: 8x B200 (1,440 GB HBM3e) on two NVLink 5 switch chips (HGX
# B200), 8 single-port ConnectX-7 VPI 400 Gb/s for the compute fabric, 2x Intel Xeon
# Platinum 8570, 2 TB memory, 8x 3.84 TB U.2 NVMe.  PCIe layout as the DGX H100's (one Gen5
# switch per GPU-NIC pair): an assumption from the same board family.
DGX_B200 = NodePreset(
    name="dgx-b200",
    description="NVIDIA DGX B200: 8x B200 on NVSwitch (NVLink 5, 900 GB/s per direction), "
                "8x ConnectX-7 400 Gb/s, one PCIe Gen5 switch per GPU-NIC pair, 2 sockets",
    gpu_model="B200-180GB", nic_model="ConnectX-7 NDR 400Gb/s",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7), nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1), cpus=2, nvlink=_NVLINK5,
    pcie=LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    # 5th Gen Xeon Scalable (Emerald Rapids): four UPI 2.0 links at 20 GT/s, 2 bytes per
    # transfer -> 160 GB/s per direction (product brief).
    cpu=LinkFigure(4 * 20e9 * 2, INTER_SOCKET_LATENCY_S),
    nic=LinkFigure(400e9 / 8, NIC_LATENCY_S), nvswitch_sharp=True,
    # Xeon Platinum 8570: 8 channels of DDR5-5600 per socket -> 358.4 GB/s.
    host=HostFigure(2e12, 8 * 5600e6 * 8, 8, 6.5e9, 3.5e9))
# NVIDIA HGX B300 datasheet: 8x B300 (2.3 TB HBM3e) on NVLink 5 switches, eight ConnectX-8
# SuperNICs at 800 Gb/s whose PCIe Gen6 switches hold the GPUs; host CPUs vary by OEM: two
# Intel Xeon 6 (Granite Rapids) assumed, six UPI 2.0 links at 24 GT/s -> 288 GB/s.
HGX_B300 = NodePreset(
    name="hgx-b300",
    description="NVIDIA HGX B300: 8x B300 on NVSwitch (NVLink 5, 900 GB/s per direction), "
                "8x ConnectX-8 800 Gb/s with PCIe Gen6, 2 sockets",
    gpu_model="B300-288GB", nic_model="ConnectX-8 SuperNIC 800Gb/s",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7), nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1), cpus=2, nvlink=_NVLINK5,
    pcie=LinkFigure(PCIE_GEN6_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    cpu=LinkFigure(6 * 24e9 * 2, INTER_SOCKET_LATENCY_S),
    nic=LinkFigure(800e9 / 8, NIC_LATENCY_S), nvswitch_sharp=True)
# AMD Instinct MI355X platform (AMD MI355X data sheet): 8 OAMs in an Infinity Fabric full
# mesh, 7 links per GPU at 153.6 GB/s bidirectional (1,075 GB/s per GPU) -> 76.8 GB/s per
# direction per link; one 400 Gb/s NIC (AMD Pollara 400 / ConnectX-7) per GPU on a PCIe
# Gen5 switch it shares with that GPU; 2x AMD EPYC 9005 with four xGMI links of 64 GB/s.
MI355X = NodePreset(
    name="mi355x",
    description="AMD Instinct MI355X platform: 8x MI355X in an xGMI full mesh (7 links of "
                "76.8 GB/s per direction per GPU), 8x 400 Gb/s, 2 sockets",
    gpu_model="MI355X", nic_model="400Gb/s RDMA NIC",
    gpu_pcie_switch=(0, 1, 2, 3, 4, 5, 6, 7), nic_layouts=((0, 1, 2, 3, 4, 5, 6, 7),),
    pcie_switch_cpu=(0, 0, 0, 0, 1, 1, 1, 1), cpus=2,
    nvlink=LinkFigure(76.8e9, NVLINK_DIRECT_LATENCY_S),
    gpu_links=tuple((a, b, 1) for a in range(8) for b in range(a + 1, 8)),
    pcie=LinkFigure(PCIE_GEN5_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S),
    cpu=LinkFigure(4 * 64e9, INTER_SOCKET_LATENCY_S),
    nic=LinkFigure(400e9 / 8, NIC_LATENCY_S))

#: The presets of this module, in the order they are listed.
BLACKWELL_BOXES: tuple[NodePreset, ...] = (GB200_NVL72, GB300_NVL72, GB200_NVL36X2, DGX_B200,
                                           HGX_B300, MI355X)
