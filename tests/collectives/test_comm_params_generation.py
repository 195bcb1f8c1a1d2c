"""Communication parameters are parsed once and take NVLink's and NVLink SHARP's
efficiencies by GPU generation when they meet the cluster, unless the user gave them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import (
    NVLINK_EFFICIENCY_BY_ARCHITECTURE,
    NVLS_EFFICIENCY_BY_ARCHITECTURE,
    CommParams,
    comm_params_for,
    comm_params_from_mapping,
)
from distsim_gpu.topology import build_cluster


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
    assert ideal.on_architecture("blackwell").nvls_efficiency == 1.0


@pytest.mark.parametrize(("architecture", "expected"), [
    ("hopper", 0.85), ("blackwell", 0.74), ("ampere", 0.85), ("", 0.85)])
def test_nvls_efficiency_is_nccls_figure_for_the_generation(architecture, expected):
    """NCCL's tuning.cc nvlsEfficiency: Hopper 0.85, Blackwell 0.74 (others: Hopper's)."""
    assert NVLS_EFFICIENCY_BY_ARCHITECTURE.get(architecture, 0.85) == expected
    assert comm_params_for(architecture).nvls_efficiency == expected
    assert comm_params_from_mapping({}, architecture=architecture).nvls_efficiency == expected


def test_a_given_nvls_efficiency_stays_on_every_generation():
    parsed = comm_params_from_mapping({"nvls_efficiency": 0.6})
    for architecture in ("hopper", "blackwell", ""):
        assert parsed.on_architecture(architecture).nvls_efficiency == 0.6


def test_an_nvls_all_reduce_on_b200_runs_at_blackwells_fraction_of_nvlink_5():
    """Bandwidth-bound NVLS all-reduce: B200's NVLink 5 is twice H100's NVLink 4, at 0.74
    of it where H100 reaches 0.85, so its bus bandwidth is 2 x 0.74 / 0.85 of H100's (it
    had been exactly twice, 972 GB/s, with Hopper's figure)."""
    size = [4 * 2**30]
    rates = {}
    for preset, architecture in (("dgx-h100", "hopper"), ("dgx-b200", "blackwell")):
        topology = build_cluster({"preset": preset})
        params = replace(comm_params_for(architecture), algorithm="nvls")
        (row,) = run_benchmark(topology, "all_reduce", size, params=params)
        rates[architecture] = row.busbw_bytes_per_s
    assert rates["blackwell"] / rates["hopper"] == pytest.approx(2 * 0.74 / 0.85, rel=2e-3)


@pytest.mark.parametrize(("architecture", "borrowed"), [
    ("ampere", ""), ("hopper", ""), ("blackwell", "blackwell"), ("cdna3", "cdna3"), ("", "")])
def test_a_generation_without_its_own_nvlink_figure_is_recorded(architecture, borrowed):
    """Blackwell (and AMD's xGMI) have no NVLink efficiency of their own: they take H100's,
    and the parameters say so for the run's notes; a given figure borrows nothing."""
    on = comm_params_from_mapping({}).on_architecture(architecture)
    assert on.nvlink_efficiency_borrowed_by == borrowed
    assert on.link_efficiency["nvlink"] == NVLINK_EFFICIENCY_BY_ARCHITECTURE.get(
        architecture, NVLINK_EFFICIENCY_BY_ARCHITECTURE["hopper"])
    given = comm_params_from_mapping({"link_efficiency": {"nvlink": 0.9}})
    assert given.on_architecture(architecture).nvlink_efficiency_borrowed_by == ""
    assert on.ideal().nvlink_efficiency_borrowed_by == ""


def test_nccl_tests_on_blackwell_note_the_borrowed_nvlink_figure(capsys):
    from distsim_gpu.scenarios.cli.main import main

    args = ["nccl-tests", "--cluster", "dgx-b200", "-b", "1G", "-e", "1G", "-q", "--json"]
    assert main(args) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    keys = [note["key"] for note in notes]
    assert keys.count("communication.link_efficiency.nvlink") == 1
    text = next(n["message"] for n in notes if n["key"] == "communication.link_efficiency.nvlink")
    assert "blackwell" in text and "0.82" in text
    # given, or on Hopper (its own measured figure), nothing is borrowed: no note
    for extra in (["--set", "comm.link_efficiency.nvlink=0.8"], ["--cluster", "dgx-h100"]):
        assert main([*args, *extra]) == 0
        notes = json.loads(capsys.readouterr().out)["notes"]
        assert all(n["key"] != "communication.link_efficiency.nvlink" for n in notes)


def test_a_run_on_blackwell_notes_the_borrowed_nvlink_figure(tmp_path, capsys):
    from distsim_gpu.scenarios.cli.main import main

    scenario = tmp_path / "b200.yaml"
    scenario.write_text("cluster: {preset: dgx-b200, nodes: 1}\n"
                        "model: {preset: llama3.1-8b}\n"
                        "parallelism: {tp: 8, dp: 1}\n"
                        "training: {micro_batch: 1, global_batch: 2, seq_len: 2048}\n")
    assert main(["run", str(scenario), "--json", "-q"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert [n["key"] for n in notes].count("communication.link_efficiency.nvlink") == 1
