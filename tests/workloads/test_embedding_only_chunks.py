"""Pipeline chunks that hold only the embedding or only the output layer (NeMo's split
that counts each as a layer): accepted where every chunk still holds a unit, simulated."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.strategy.parallel import layer_partition


def _mapping(layers: int, interleave: int) -> dict:
    return {
        "name": "ends", "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"name": "tiny", "layers": layers, "hidden": 1024, "heads": 8,
                  "seq_len": 512, "vocab": 32000},
        "parallelism": {"tp": 2, "pp": 4, "dp": 1, "schedule": "interleaved",
                        "interleave": interleave, "partition": "embedding"},
        "training": {"micro_batch": 1, "global_batch": 8, "precision": "bf16"},
        "compute": {"gpu": "a100-80gb", "costs": "roofline"},
    }


def test_six_layers_over_eight_chunks_leave_the_ends_to_embedding_and_output():
    chunks = layer_partition(6, 8, "embedding")
    assert chunks[0] == (0, 0) and chunks[-1] == (6, 6)
    assert [stop - first for first, stop in chunks[1:-1]] == [1] * 6


def test_a_run_whose_end_chunks_hold_no_layer_simulates():
    report = run_scenario(scenario_from_mapping(_mapping(6, 2)))
    every_layer = run_scenario(scenario_from_mapping(_mapping(8, 2)))
    # Two layers fewer on the same pipeline: faster, and not free.
    assert 0 < report.result.iteration_time_s < every_layer.result.iteration_time_s


def test_more_chunks_than_layers_and_ends_is_refused():
    with pytest.raises(ConfigError, match=r"empty chunk over pp·interleave = 8.*at most 5"):
        scenario_from_mapping(_mapping(3, 2))
