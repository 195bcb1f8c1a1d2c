"""What a cluster's fabric settings cannot do on this cluster, said as notes.

A fabric's oversubscription thins the links from its leaves to its spines.  A cluster
whose NICs all fit on one leaf has no spine (``spines: 0`` in its resolved fabric): its
traffic never leaves that leaf, so an oversubscription set for a what-if changes nothing,
and a run that silently ignored it would read as "oversubscription costs nothing here".
"""

from __future__ import annotations

from collections.abc import Mapping

from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.topology.model import Topology

__all__ = ["fabric_notes"]


def fabric_notes(topology: Topology) -> list[RunNote]:
    """An ``ignored`` note when ``topology``'s fabric is oversubscribed on one leaf."""
    fabric = topology.config.get("fabric")
    if not isinstance(fabric, Mapping) or fabric.get("spines", 1) != 0:
        return []
    ratio = float(fabric.get("oversubscription", 1.0) or 1.0)
    if ratio <= 1.0:
        return []
    nics = sum(1 for device in topology.devices() if device.kind == "nic")
    return [RunNote("ignored", f"oversubscription {ratio:g} changes nothing: the cluster's "
                    f"{nics} NICs fit on one leaf (nics_per_leaf {fabric.get('nics_per_leaf')})"
                    ", so no traffic reaches a spine; set fabric.nics_per_leaf below "
                    f"{nics} for the what-if", "fabric.oversubscription")]
