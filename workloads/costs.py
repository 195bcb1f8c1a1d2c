"""Compute cost models — the import path the rest of distsim (and users' scripts) use.

The implementation lives in :mod:`distsim_gpu.workloads.compute`, one module per job
(stacks, operators, roofline, cost tables); this module re-exports its public names so
``from distsim_gpu.workloads.costs import RooflineCosts`` keeps working.
"""

from distsim_gpu.workloads.compute import *  # noqa: F403
from distsim_gpu.workloads.compute import __all__ as __all__
