"""A tiny dense model's simulated iteration beside its lower bound and estimate, for the
data-parallel layouts' tests (FSDP under a pipeline, HSDP): the bound must stay below."""

from __future__ import annotations

from typing import Any

from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.workloads.cost.bounds import IterationBounds


def bound_and_simulation(name: str, parallelism: dict[str, Any], *,
                         cluster: dict[str, Any] | None = None,
                         training: dict[str, Any] | None = None,
                         ) -> tuple[float, float, float]:
    """(lower bound, estimate, simulated iteration) of an 8-layer model on 8 GPUs of a
    2 GB/s switch under ``parallelism``, 16 sequences a step (``cluster`` and
    ``training``: keys that replace those)."""
    scenario = scenario_from_mapping({
        "name": name, "cluster": {"preset": "switch", "gpus": 8, "link_bandwidth": "2 GB/s",
                                  **(cluster or {})},
        "model": {"name": "tiny", "layers": 8, "hidden": 512, "heads": 8, "seq_len": 256,
                  "vocab": 1000},
        "parallelism": parallelism,
        "training": {"micro_batch": 1, "global_batch": 16, "recompute": "none",
                     **(training or {})},
        "compute": {"gpu": "a100-80gb"}, "simulation": {"fidelity": "coflow"}})
    simulated = run_scenario(scenario).iteration_time_s
    bounds = IterationBounds(scenario.topology, scenario.model, scenario.costs,
                             comm=scenario.comm, stragglers=scenario.stragglers)
    lower, estimate = bounds.bound(scenario.parallel, scenario.training,
                                   scenario.microbatches)
    return lower, estimate, simulated
