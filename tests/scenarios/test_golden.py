"""Golden summaries of the quick examples: a change that moves a prediction shows here.

The files in tests/golden/ are regenerated only on purpose, after checking that the
change in the numbers is intended:

    DISTSIM_REGENERATE_GOLDEN=1 python -m pytest tests/scenarios/test_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

QUICK_EXAMPLES = ["quickstart", "bert-large-dp-32-v100", "mixtral-8x7b-ep-64-h100",
                  "gpt-oss-120b-64-h100"]


def summary(example: Path) -> dict:
    report = run_scenario(load_scenario(example))
    data = report.to_json_dict()
    keep = ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_gpu",
            "mfu", "num_gpus")
    per_gpu = {}
    for gpu in data["per_gpu"]:
        row = {k: v for k, v in gpu.items() if k.endswith(("_s", "_bytes"))}
        per_gpu.setdefault(json.dumps(row, sort_keys=True), []).append(gpu["gpu"])
    return {**{k: data[k] for k in keep},
            "gpu_groups": [{"gpus": gpus, **json.loads(row)} for row, gpus in per_gpu.items()]}


@pytest.mark.parametrize("name", QUICK_EXAMPLES)
def test_example_matches_its_golden_summary(repo_root, examples_dir, name):
    path = repo_root / "tests" / "golden" / f"{name}.json"
    got = summary(examples_dir / f"{name}.yaml")
    if os.environ.get("DISTSIM_REGENERATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert got.keys() == expected.keys()
    for key in ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_gpu",
                "mfu"):
        assert got[key] == pytest.approx(expected[key], rel=1e-9), key
    assert got["num_gpus"] == expected["num_gpus"]
    assert len(got["gpu_groups"]) == len(expected["gpu_groups"])
    for mine, theirs in zip(got["gpu_groups"], expected["gpu_groups"], strict=True):
        assert mine["gpus"] == theirs["gpus"]
        for key, value in theirs.items():
            if key != "gpus":
                assert mine[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
