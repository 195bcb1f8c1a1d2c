"""Fixtures shared by the collectives' tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def b200_moe_scenario() -> dict[str, Any]:
    """A two-layer MoE model (7,168-wide tokens, 16 experts top-4) on one DGX B200 node,
    ep 8, its expert exchange's kernels on 16 SMs; no ``communication`` section."""
    return {"name": "moe", "cluster": {"preset": "dgx-b200", "nodes": 1},
            "model": {"name": "m", "layers": 2, "hidden": 7168, "heads": 56,
                      "seq_len": 1024, "vocab": 32000, "experts": 16, "top_k": 4},
            "parallelism": {"dp": 8, "ep": 8},
            "training": {"micro_batch": 1, "global_batch": 8},
            "compute": {"gpu": "b200", "costs": "roofline", "comm_sms": 16}}
