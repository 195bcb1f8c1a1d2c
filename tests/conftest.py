"""Shared fixtures: the real measurements in ../shared/data, small clusters, a simulation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster


def shared_data_dir() -> Path | None:
    """``shared/data`` beside the repository, else ``$DISTSIM_SHARED_DATA``, else None."""
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "shared" / "data"]
    if os.environ.get("DISTSIM_SHARED_DATA"):
        candidates.append(Path(os.environ["DISTSIM_SHARED_DATA"]))
    for candidate in candidates:
        if (candidate / "nccl").is_dir():
            return candidate
    return None


@pytest.fixture
def shared_data() -> Path:
    """The real-measurement corpus; the test is skipped where it is absent."""
    data = shared_data_dir()
    if data is None:
        pytest.skip("shared/data is not present (set DISTSIM_SHARED_DATA to point at it)")
    return data


@pytest.fixture
def sim() -> Simulation:
    """A fresh simulation with seed 0."""
    return Simulation(seed=0)


@pytest.fixture(scope="session")
def small_cluster():
    """Two DGX-A100 nodes on one switch: 16 GPUs, 8 rails."""
    return build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "single-switch"})
