"""Tiny scenarios shared by the scenario, report and ``distsim run`` tests.

``TINY`` is a 4-layer GPT-style model on 8 GPUs of the ideal ``switch`` preset, split
tp 2 × pp 2 × dp 2: every part of an iteration (TP collectives, pipeline sends, DP
all-reduce) in about a tenth of a second.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "cluster": {"preset": "switch", "gpus": 8},
    "model": {"name": "tiny-gpt", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128,
              "vocab": 1024},
    "parallelism": {"tp": 2, "pp": 2, "dp": 2, "schedule": "1f1b"},
    "training": {"micro_batch": 1, "global_batch": 8, "recompute": "none",
                 "precision": "bf16"},
    "compute": {"gpu": "a100-80gb", "costs": "roofline"},
    "simulation": {"fidelity": "coflow", "seed": 0},
}


def tiny(**changes: Any) -> dict[str, Any]:
    """A deep copy of TINY with top-level sections replaced or (for dicts) updated."""
    data = copy.deepcopy(TINY)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


def write_scenario(path: Path, data: dict[str, Any] | str) -> Path:
    """Write a scenario (a mapping, or YAML text as is) to ``path``; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def test_tiny_scenario_is_a_valid_yaml_mapping(tmp_path):
    path = write_scenario(tmp_path / "s.yaml", tiny())
    assert yaml.safe_load(path.read_text()) == TINY
