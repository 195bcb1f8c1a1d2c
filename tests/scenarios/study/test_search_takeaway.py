"""What a planner takes away from ``distsim search``: the winner as ``--set`` overrides of
the scenario that ``distsim run`` reproduces, each runner-up's margin over the winner, the
notes the winner's run gives, and the space given on the command line (``--space``)."""

from __future__ import annotations

import argparse
import copy
import json

import pytest
import yaml
from distsim_gpu.scenarios.cli.search import add_parser, parse_space
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import format_search, search_strategies
from distsim_gpu.simcore.errors import ConfigError

SPACE = {"schedule": ["1f1b"], "zero": [0, 1, 3], "recompute": ["none", "full"],
         "sequence_parallel": [False], "order": ["tp-dp-pp"], "micro_batch": [1, 2]}


def mapping(parallelism: dict | None = None) -> dict:
    return {"name": "tiny-takeaway",
            "cluster": {"preset": "switch", "gpus": 8, "link_bandwidth": "20 GB/s"},
            "model": {"name": "tiny", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 256,
                      "vocab": 1000},
            "parallelism": parallelism or {"tp": 2, "pp": 2, "dp": 2},
            "training": {"micro_batch": 1, "global_batch": 16, "recompute": "none"},
            "compute": {"gpu": "a100-80gb"}, "simulation": {"fidelity": "coflow"}}


@pytest.mark.parametrize("parallelism", [
    {"tp": 2, "pp": 2, "dp": 2},
    # The scenario's own HSDP and reshard_after_forward: the overrides undo them.
    {"tp": 1, "pp": 1, "dp": 8, "fsdp": True, "dp_replicate": 2,
     "reshard_after_forward": False}])
def test_the_best_as_overrides_reproduces_its_time(parallelism):
    data = mapping(parallelism)
    result = search_strategies(scenario_from_mapping(data), top=3, workers=1, space=SPACE)
    assert result.best is not None and result.best_overrides
    base = copy.deepcopy(data)
    for key in [k for k, v in result.best_overrides.items() if v is None]:
        base["parallelism"].pop(key.split(".", 1)[1])  # "and leave out KEY"
    sets = [(k, v) for k, v in result.best_overrides.items() if v is not None]
    again = run_scenario(scenario_from_mapping(base, overrides=sets))
    assert again.iteration_time_s == pytest.approx(result.best.iteration_time_s, rel=1e-12)
    # Only keys the winner changes are listed.
    own = scenario_from_mapping(data)
    for dotted, value in sets:
        section, key = dotted.split(".", 1)
        held = own.parallel if section == "parallelism" else own.training
        assert getattr(held, key) != value


def test_the_summary_gives_margins_overrides_and_the_winners_notes():
    result = search_strategies(scenario_from_mapping(mapping()), top=3, workers=1, space=SPACE)
    text = format_search(result)
    best, second, third = result.top
    margin = (second.iteration_time_s / best.iteration_time_s - 1) * 100
    assert f"+{margin:.2f} %" in text
    assert "best as overrides of the scenario: --set " in text
    for key, value in result.best_overrides.items():
        assert f"--set {key}={yaml.safe_dump(value).split()[0]}" in text
    assert best.notes  # this tiny model on a switch defaults NCCL's SMs, at least
    assert all(f"  note: {note}" in text for note in best.notes)
    data = result.to_dict()
    assert data["top"][0]["slower_than_best"] == 0.0
    assert data["top"][2]["slower_than_best"] == pytest.approx(
        third.iteration_time_s / best.iteration_time_s - 1)
    assert data["top"][0]["notes"] == list(best.notes)
    assert data["best_overrides"] == result.best_overrides


def test_space_options_are_read_as_yaml_values():
    assert parse_space(["cp=1,2", "reshard_after_forward=null, false",
                        "recompute=none,op", "sequence_parallel=true"]) == {
        "cp": [1, 2], "reshard_after_forward": [None, False], "recompute": ["none", "op"],
        "sequence_parallel": [True]}
    for bad in ("cp", "=1", "cp="):
        with pytest.raises(ConfigError) as info:
            parse_space([bad])
        assert info.value.key == "--space"


@pytest.mark.parametrize(("axis", "value", "words"), [
    ("cp", "abc", "space.cp: must be whole numbers, got 'abc'"),
    ("tp", True, "space.tp: must be whole numbers, got True"),
    ("expert_tp", "one", "space.expert_tp: must be whole numbers, got 'one'"),
    ("sequence_parallel", "maybe", "space.sequence_parallel: must be true or false"),
    ("reshard_after_forward", 0, "space.reshard_after_forward: must be true or false")])
def test_a_value_no_candidate_can_take_is_a_clear_error(axis, value, words):
    """A word for a degree ended in a traceback (``%`` on a string), and ``maybe`` for a
    flag was taken as true; both now name the axis before anything is enumerated."""
    with pytest.raises(ConfigError) as info:
        search_strategies(scenario_from_mapping(mapping()), workers=1, space={axis: [value]})
    assert str(info.value).startswith(words)


def test_the_command_line_searches_the_space_it_is_given(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping()))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args([
        "search", str(path), "--workers", "1", "--json", "--out", str(tmp_path / "out"),
        "--space", "tp=1", "--space", "pp=1", "--space", "zero=3", "--space",
        "micro_batch=1", "--space", "recompute=none", "--space", "dp_replicate=1,2",
        "--space", "reshard_after_forward=null"])
    assert args.handler(args) == 0
    data = json.loads(capsys.readouterr().out)
    # tp 1, pp 1, dp 8, ZeRO-3: plain, and HSDP of 2 groups of 4.
    assert data["enumerated"] == 2
    assert {row["dp_replicate"] for row in data["top"]} == {1, 2}
    args = parser.parse_args(["search", str(path), "--out", str(tmp_path / "out"),
                              "--space", "shedule=1f1b"])
    with pytest.raises(ConfigError, match=r"space\.shedule: unknown search axis"):
        args.handler(args)


def test_a_best_that_nearly_fills_its_gpu_says_what_the_memory_model_leaves_out():
    """The memory model counts no fragmentation, CUDA context or NCCL buffers: a best
    needing over 95 % of the GPU gets a line on how to search with room kept for them."""
    scenario = scenario_from_mapping(mapping())
    only = {**SPACE, "tp": [1], "pp": [1], "zero": [0], "recompute": ["none"],
            "micro_batch": [2]}
    roomy = search_strategies(scenario, top=1, workers=1, space=only)
    assert "the best needs" not in format_search(roomy)
    need = roomy.best.peak_memory_bytes
    data = mapping()
    data["compute"]["gpu"] = {"preset": "a100-80gb", "memory": int(need / 0.97)}
    tight = search_strategies(scenario_from_mapping(data), top=1, workers=1, space=only)
    assert tight.best.peak_memory_bytes == need
    text = format_search(tight)
    assert f"the best needs {need / 2**30:.1f} of the GPU's" in text
    assert "--set compute.gpu.memory=" in text
