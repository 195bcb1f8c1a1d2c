"""topology — the physical cluster: GPUs, NVLink/NVSwitch, PCIe, NICs, IB switches, routes.

A :class:`Topology` is a directed graph of devices and links with routes between GPUs;
:func:`build_cluster` / :func:`load_cluster` make one from a node preset x node count x
fabric (or a custom device list), :func:`apply_overrides` applies ``--set`` style edits.
Knows nothing of collectives; depends only on :mod:`simcore`.
"""

from distsim_gpu.topology.cluster import apply_overrides, build_cluster, list_presets, load_cluster
from distsim_gpu.topology.model import Device, Link, Route, Topology

__all__ = [
    "Device",
    "Link",
    "Route",
    "Topology",
    "apply_overrides",
    "build_cluster",
    "list_presets",
    "load_cluster",
]
