"""Communication parameters are parsed once and take NVLink's efficiency by GPU generation
when they meet the cluster, unless the user gave it."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives.params import (
    NVLINK_EFFICIENCY_BY_ARCHITECTURE,
    CommParams,
    comm_params_for,
    comm_params_from_mapping,
)


@pytest.mark.parametrize("architecture", ["ampere", "hopper", "blackwell", ""])
def test_a_parsed_mapping_meets_the_generation_as_the_defaults_would(architecture):
    parsed = comm_params_from_mapping({"algorithm": "ring", "pxn": False})
    on = parsed.on_architecture(architecture)
    expected = NVLINK_EFFICIENCY_BY_ARCHITECTURE.get(architecture, 0.82)
    assert on.link_efficiency["nvlink"] == expected
    assert on == comm_params_from_mapping({"algorithm": "ring", "pxn": False},
                                          architecture=architecture)
    assert on.link_efficiency == comm_params_for(architecture).link_efficiency
    assert (on.algorithm, on.pxn) == ("ring", False)


def test_a_given_nvlink_efficiency_stays_on_every_generation():
    parsed = comm_params_from_mapping({"link_efficiency": {"nvlink": 0.5}})
    for architecture in ("ampere", "hopper", ""):
        assert parsed.on_architecture(architecture).link_efficiency["nvlink"] == 0.5
    # another link kind given leaves NVLink's to the generation
    other = comm_params_from_mapping({"link_efficiency": {"pcie": 0.5}})
    assert other.on_architecture("ampere").link_efficiency == {
        **comm_params_for("ampere").link_efficiency, "pcie": 0.5}


def test_ideal_parameters_stay_ideal_on_any_generation():
    ideal = CommParams().ideal()
    assert ideal.on_architecture("ampere").link_efficiency["nvlink"] == 1.0
