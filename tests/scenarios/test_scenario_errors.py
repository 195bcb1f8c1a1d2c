"""Bad scenarios: each ends in one DistsimError naming the file (and line), the dotted key
and what would be valid — never a traceback from deep inside."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError

from tests.scenarios.test_scenario_support import tiny, write_scenario


def _error(tmp_path, data, *sets: str, name: str = "bad.yaml") -> str:
    path = write_scenario(tmp_path / name, data)
    with pytest.raises(DistsimError) as info:
        load_scenario(path, [parse_assignment(s) for s in sets])
    return str(info.value)


CASES = {
    "product of degrees is not the GPU count": (
        tiny(parallelism={"tp": 4}), ["bad.yaml:", "parallelism", "tp·pp·dp = 4·2·2 = 16",
                                      "8 GPUs"]),
    "cluster too small": (
        tiny(cluster={"gpus": 4}), ["bad.yaml:", "the cluster has 4 GPUs"]),
    "heads not divisible by tp": (
        tiny(model={"heads": 6, "hidden": 384}, parallelism={"tp": 4, "dp": 1}),
        ["bad.yaml:", "parallelism.tp", "6 attention heads do not split over tp = 4"]),
    "layers not divisible by pp·interleave": (
        tiny(model={"layers": 6},
             parallelism={"pp": 2, "schedule": "interleaved", "interleave": 2}),
        ["bad.yaml:", "parallelism.pp", "6 layers", "pp·interleave = 4"]),
    "global batch not divisible": (
        tiny(training={"global_batch": 9}),
        ["bad.yaml:", "training.global_batch", "not a multiple of micro_batch·dp = 1·2"]),
    "unknown gpu": (
        tiny(compute={"gpu": "a100-90gb"}),
        ["bad.yaml:", "compute.gpu", "unknown GPU 'a100-90gb'", "did you mean 'a100-80gb'"]),
    "unknown cluster preset key": (
        tiny(cluster={"nodez": 1}),
        ["bad.yaml:", "cluster.nodez", "did you mean 'nodes'"]),
    "unknown cluster preset": (
        tiny(cluster={"preset": "dgx-a200"}),
        ["bad.yaml:", "cluster.preset", "unknown preset 'dgx-a200'"]),
    "unknown model preset": (
        tiny(model={"preset": "gpt3"}), ["bad.yaml:", "model.preset", "gpt3-175b"]),
    "unknown model field": (
        tiny(model={"layer": 4}), ["bad.yaml:", "model.layer", "did you mean 'layers'"]),
    "unknown top-level key": (
        {**tiny(), "paralelism": {"tp": 2}},
        ["bad.yaml:", "paralelism", "did you mean 'parallelism'"]),
    "unknown parallelism key": (
        tiny(parallelism={"tpp": 2}), ["bad.yaml:", "parallelism.tpp", "did you mean 'tp'"]),
    "unknown training key": (
        tiny(training={"micro_bach": 1}),
        ["bad.yaml:", "training.micro_bach", "did you mean 'micro_batch'"]),
    "unknown compute key": (
        tiny(compute={"gpus": "a100"}), ["bad.yaml:", "compute.gpus", "did you mean 'gpu'"]),
    "unknown simulation key": (
        tiny(simulation={"sed": 1}), ["bad.yaml:", "simulation.sed", "did you mean 'seed'"]),
    "unknown communication key": (
        tiny(communication={"algo": "ring"}), ["bad.yaml:", "communication.algo"]),
    "bad schedule": (
        tiny(parallelism={"schedule": "zigzag"}), ["parallelism.schedule", "zigzag"]),
    "bad recompute": (
        tiny(training={"recompute": "partial"}), ["training.recompute", "partial"]),
    "precision the gpu lacks": (
        tiny(compute={"gpu": "v100"}),
        ["bad.yaml:", "training.precision", "v100-32gb has no 'bf16' rate", "fp16"]),
    "bad fidelity": (
        tiny(simulation={"fidelity": "stepp"}),
        ["bad.yaml:", "simulation.fidelity", "did you mean 'step'"]),
    "fidelity under communication": (
        tiny(communication={"fidelity": "step"}),
        ["communication.fidelity", "simulation.fidelity"]),
    "negative seed": (tiny(simulation={"seed": -1}), ["simulation.seed", ">= 0"]),
    "bad bandwidth unit": (
        tiny(cluster={"link_bandwidth": "fast"}),
        ["bad.yaml:", "cluster.link_bandwidth", "cannot read 'fast' as a bandwidth"]),
    "straggler not in the cluster": (
        tiny(stragglers={"n0.gpu9": 1.2}),
        ["stragglers.n0.gpu9", "no GPU 'n0.gpu9'", "n0.gpu"]),
    "straggler factor not positive": (
        tiny(stragglers={"n0.gpu1": 0}), ["stragglers.n0.gpu1", "> 0"]),
    "roofline knob out of range": (
        tiny(compute={"matmul_efficiency": 1.5}), ["compute.matmul_efficiency", "(0, 1]"]),
    "unknown attention implementation": (
        tiny(compute={"attention": "paged"}),
        ["compute.attention", "unknown attention implementation 'paged'", "flash, unfused"]),
    "bad gemm tiles": (
        tiny(compute={"gemm_tiles": [[128, 128]]}), ["compute.gemm_tiles[0]"]),
    "missing model": ({"cluster": {"preset": "switch"}}, ["bad.yaml", "model", "needs"]),
    "no gpu known": (
        {"cluster": {"preset": "switch"}, "model": "gpt3-175b"},
        ["bad.yaml", "compute.gpu", "no GPU given", "e.g. compute: {gpu: a100-80gb}"]),
    "section not a mapping": (tiny(training=[1, 2]), ["training", "mapping"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_scenario_names_file_key_and_remedy(tmp_path, case):
    data, expected = CASES[case]
    message = _error(tmp_path, data)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_errors_carry_the_line_of_the_key(tmp_path):
    text = ("name: tiny\n"
            "cluster: {preset: switch, gpus: 8}\n"
            "model: {layers: 4, hidden: 256, heads: 8, seq_len: 128, vocab: 1024}\n"
            "parallelism:\n"
            "  tp: 2\n"
            "  pp: 2\n"
            "  dp: 2\n"
            "  schedule: zigzag\n"
            "compute: {gpu: a100}\n")
    assert _error(tmp_path, text).startswith(f"{tmp_path / 'bad.yaml'}:8: parallelism.schedule")


def test_yaml_syntax_error_gives_file_and_line(tmp_path):
    path = write_scenario(tmp_path / "broken.yaml", "name: x\ncluster: {preset: switch\n")
    with pytest.raises(ParseError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path}:3: invalid YAML")


def test_a_scenario_must_be_a_mapping(tmp_path):
    message = _error(tmp_path, "- cluster\n- model\n")
    assert "holds a mapping" in message and "bad.yaml" in message


def test_missing_scenario_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value) and "no scenario file" in str(info.value)


def test_missing_cluster_file_is_looked_for_next_to_the_scenario(tmp_path):
    message = _error(tmp_path, tiny(cluster="clusters/absent.yaml"))
    assert "bad.yaml:2: cluster: no cluster file 'clusters/absent.yaml'" in message
    assert str(tmp_path / "clusters" / "absent.yaml") in message


def test_missing_cost_table(tmp_path):
    message = _error(tmp_path, tiny(compute={"costs": "table.csv"}))
    assert "compute.costs" in message and "no cost table file 'table.csv'" in message


def test_errors_inside_a_cluster_file_name_that_file_and_line(tmp_path):
    write_scenario(tmp_path / "c.yaml", "preset: switch\ngpus: 8\nlink_bandwith: 1 GB/s\n")
    message = _error(tmp_path, tiny(cluster="c.yaml"))
    assert message.startswith(f"{tmp_path / 'c.yaml'}:3: link_bandwith: unknown key")


def test_errors_in_an_override_name_set(tmp_path):
    message = _error(tmp_path, tiny(), "parallelism.schedule=zigzag")
    assert message.startswith("--set: parallelism.schedule")
    message = _error(tmp_path, tiny(), "paralelism.tp=2")
    assert message.startswith("--set: paralelism: unknown key")
    message = _error(tmp_path, tiny(), 'cluster.link_bandwidth="many Gbps"')
    assert message.startswith("--set: cluster.link_bandwidth")
    message = _error(tmp_path, tiny(), "parallelism.tp.x=1")
    assert "--set" in message and "not a mapping" in message


def test_out_of_memory_is_an_error_unless_allowed(tmp_path):
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
