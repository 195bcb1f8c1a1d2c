"""Bad scenarios: each ends in one DistsimError naming the file (and line), the dotted key
and what would be valid — never a traceback from deep inside."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError


@pytest.fixture
def error(tmp_path, write_scenario):
    """``error(data, *sets)``: the message of the DistsimError loading ``bad.yaml`` raises."""

    def message(data, *sets: str, name: str = "bad.yaml") -> str:
        path = write_scenario(tmp_path / name, data)
        with pytest.raises(DistsimError) as info:
            load_scenario(path, [parse_assignment(s) for s in sets])
        return str(info.value)

    return message


# Changes to the tiny scenario (keyword arguments of the ``tiny`` fixture) -> message parts.
CASES = {
    "product of degrees is not the GPU count": (
        dict(parallelism={"tp": 4}), ["bad.yaml:", "parallelism", "tp·pp·dp = 4·2·2 = 16",
                                      "8 GPUs"]),
    "cluster too small": (
        dict(cluster={"gpus": 4}), ["bad.yaml:", "the cluster has 4 GPUs"]),
    "heads not divisible by tp": (
        dict(model={"heads": 6, "hidden": 384}, parallelism={"tp": 4, "dp": 1}),
        ["bad.yaml:", "parallelism.tp", "6 attention heads do not split over tp = 4"]),
    "layers not divisible by pp·interleave": (
        dict(model={"layers": 6},
             parallelism={"pp": 2, "schedule": "interleaved", "interleave": 2}),
        ["bad.yaml:", "parallelism.pp", "6 layers", "pp·interleave = 4"]),
    "global batch not divisible": (
        dict(training={"global_batch": 9}),
        ["bad.yaml:", "training.global_batch", "not a multiple of micro_batch·dp = 1·2"]),
    "unknown gpu": (
        dict(compute={"gpu": "a100-90gb"}),
        ["bad.yaml:", "compute.gpu", "unknown GPU 'a100-90gb'", "did you mean 'a100-80gb'"]),
    "unknown cluster preset key": (
        dict(cluster={"nodez": 1}),
        ["bad.yaml:", "cluster.nodez", "did you mean 'nodes'"]),
    "unknown cluster preset": (
        dict(cluster={"preset": "dgx-a200"}),
        ["bad.yaml:", "cluster.preset", "unknown preset 'dgx-a200'"]),
    "unknown model preset": (
        dict(model={"preset": "gpt3"}), ["bad.yaml:", "model.preset", "gpt3-175b"]),
    "unknown model field": (
        dict(model={"layer": 4}), ["bad.yaml:", "model.layer", "did you mean 'layers'"]),
    "unknown top-level key": (
        dict(paralelism={"tp": 2}),
        ["bad.yaml:", "paralelism", "did you mean 'parallelism'"]),
    "unknown parallelism key": (
        dict(parallelism={"tpp": 2}), ["bad.yaml:", "parallelism.tpp", "did you mean 'tp'"]),
    "unknown training key": (
        dict(training={"micro_bach": 1}),
        ["bad.yaml:", "training.micro_bach", "did you mean 'micro_batch'"]),
    "unknown compute key": (
        dict(compute={"gpus": "a100"}), ["bad.yaml:", "compute.gpus", "did you mean 'gpu'"]),
    "unknown simulation key": (
        dict(simulation={"sed": 1}), ["bad.yaml:", "simulation.sed", "did you mean 'seed'"]),
    "unknown communication key": (
        dict(communication={"algo": "ring"}), ["bad.yaml:", "communication.algo"]),
    "bad schedule": (
        dict(parallelism={"schedule": "zigzag"}), ["parallelism.schedule", "zigzag"]),
    "bad recompute": (
        dict(training={"recompute": "partial"}), ["training.recompute", "partial"]),
    "precision the gpu lacks": (
        dict(compute={"gpu": "v100"}),
        ["bad.yaml:", "training.precision", "v100-32gb has no 'bf16' rate", "fp16"]),
    "bad fidelity": (
        dict(simulation={"fidelity": "stepp"}),
        ["bad.yaml:", "simulation.fidelity", "did you mean 'step'"]),
    "fidelity under communication": (
        dict(communication={"fidelity": "step"}),
        ["communication.fidelity", "simulation.fidelity"]),
    "negative seed": (dict(simulation={"seed": -1}), ["simulation.seed", ">= 0"]),
    "bad bandwidth unit": (
        dict(cluster={"link_bandwidth": "fast"}),
        ["bad.yaml:", "cluster.link_bandwidth", "cannot read 'fast' as a bandwidth"]),
    "straggler not in the cluster": (
        dict(stragglers={"n0.gpu9": 1.2}),
        ["stragglers.n0.gpu9", "no GPU 'n0.gpu9'", "n0.gpu"]),
    "straggler factor not positive": (
        dict(stragglers={"n0.gpu1": 0}),
        ["stragglers.n0.gpu1: must be a number in (0, 1000], got 0 (a slowdown factor"]),
    "roofline knob out of range": (
        dict(compute={"matmul_efficiency": 1.5}), ["compute.matmul_efficiency", "(0, 1]"]),
    "unknown attention implementation": (
        dict(compute={"attention": "paged"}),
        ["compute.attention", "unknown attention implementation 'paged'", "flash, unfused"]),
    "unknown cross entropy": (
        dict(compute={"cross_entropy": "fused"}),
        ["compute.cross_entropy", "unknown cross entropy implementation 'fused'",
         "eager, megatron_fused, one_pass"]),
    "bad gemm tiles": (
        dict(compute={"gemm_tiles": [[128, 128]]}), ["compute.gemm_tiles[0]"]),
    "section not a mapping": (dict(training=[1, 2]), ["training", "mapping"]),
}


# Whole scenarios that are not the tiny one changed -> message parts.
WHOLE_CASES = {
    "missing model": ({"cluster": {"preset": "switch"}}, ["bad.yaml", "model", "needs"]),
    "no gpu known": (
        {"cluster": {"preset": "switch"}, "model": "gpt3-175b"},
        ["bad.yaml", "compute.gpu", "no GPU given", "e.g. compute: {gpu: a100-80gb}"]),
    "cluster gpu mistyped": (
        {"cluster": {"preset": "pcie-8gpu", "gpu": {"model": "B2000"}}, "model": "gpt3-175b"},
        ["bad.yaml", "compute.gpu", "the cluster's GPU 'B2000' is not a known GPU spec",
         "for the cluster's gpu.model: did you mean 'b200'"]),
}


def _assert_parts(message: str, expected: list[str]) -> None:
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize("case", list(CASES))
def test_bad_scenario_names_file_key_and_remedy(error, tiny, case):
    changes, expected = CASES[case]
    _assert_parts(error(tiny(**changes)), expected)


@pytest.mark.parametrize("case", list(WHOLE_CASES))
def test_bad_whole_scenario_names_file_key_and_remedy(error, case):
    data, expected = WHOLE_CASES[case]
    _assert_parts(error(data), expected)


def test_errors_carry_the_line_of_the_key(tmp_path, error):
    text = ("name: tiny\n"
            "cluster: {preset: switch, gpus: 8}\n"
            "model: {layers: 4, hidden: 256, heads: 8, seq_len: 128, vocab: 1024}\n"
            "parallelism:\n"
            "  tp: 2\n"
            "  pp: 2\n"
            "  dp: 2\n"
            "  schedule: zigzag\n"
            "compute: {gpu: a100}\n")
    assert error(text).startswith(f"{tmp_path / 'bad.yaml'}:8: parallelism.schedule")


def test_yaml_syntax_error_gives_file_and_line(tmp_path, write_scenario):
    path = write_scenario(tmp_path / "broken.yaml", "name: x\ncluster: {preset: switch\n")
    with pytest.raises(ParseError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path}:3: invalid YAML")


def test_a_scenario_must_be_a_mapping(error):
    message = error("- cluster\n- model\n")
    assert "holds a mapping" in message and "bad.yaml" in message


def test_missing_scenario_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value) and "no scenario file" in str(info.value)


def test_missing_cluster_file_is_looked_for_next_to_the_scenario(tmp_path, tiny, error):
    message = error(tiny(cluster="clusters/absent.yaml"))
    assert "bad.yaml:2: cluster: no cluster file 'clusters/absent.yaml'" in message
    assert str(tmp_path / "clusters" / "absent.yaml") in message


def test_missing_cost_table(tiny, error):
    message = error(tiny(compute={"costs": "table.csv"}))
    assert "compute.costs" in message and "no cost table file 'table.csv'" in message


def test_errors_inside_a_cluster_file_name_that_file_and_line(tmp_path, tiny, write_scenario,
                                                              error):
    write_scenario(tmp_path / "c.yaml", "preset: switch\ngpus: 8\nlink_bandwith: 1 GB/s\n")
    message = error(tiny(cluster="c.yaml"))
    assert message.startswith(f"{tmp_path / 'c.yaml'}:3: link_bandwith: unknown key")


def test_errors_in_an_override_name_set(tiny, error):
    message = error(tiny(), "parallelism.schedule=zigzag")
    assert message.startswith("--set: parallelism.schedule")
    message = error(tiny(), "paralelism.tp=2")
    assert message.startswith("--set: paralelism: unknown key")
    message = error(tiny(), 'cluster.link_bandwidth="many Gbps"')
    assert message.startswith("--set: cluster.link_bandwidth")
    message = error(tiny(), "parallelism.tp.x=1")
    assert "--set" in message and "not a mapping" in message


def test_out_of_memory_is_an_error_unless_allowed(tmp_path, tiny, write_scenario):
    data = tiny(model={"preset": "gpt3-175b", "layers": 24},
                parallelism={"tp": 8, "pp": 1, "dp": 1}, training={"global_batch": 1})
    data["model"] = {"preset": "gpt3-175b", "layers": 24}
    scenario = load_scenario(write_scenario(tmp_path / "big.yaml", data))
    with pytest.raises(ConfigError) as info:
        run_scenario(scenario)
    message = str(info.value)
    assert "big.yaml" in message and "out of memory" in message and "--allow-oom" in message
    report = run_scenario(scenario, allow_oom=True)
    assert max(g.peak_memory_bytes for g in report.per_gpu) > scenario.gpu.memory_bytes
