"""One grammar across the commands: the same option means the same thing everywhere.

``--out DIR`` writes a folder and ``-o FILE`` one file; every command that simulates takes
``-q`` (its progress line) and ``--set``; the ones that run many simulations take
``--workers`` and ``--scheduler``; ``--allow-oom`` wherever a scenario runs as it is given.
The table below is the contract; a new command or option must fit it.
"""

from __future__ import annotations

import argparse

import pytest
from distsim_gpu.scenarios.cli.main import build_parser


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every leaf command ("run", "validate runs", ...) and its parser."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[prefix] = parser
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, f"{prefix} {name}".strip())

    walk(build_parser(), "")
    return found


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Option string -> action, the hidden deprecated spellings left out."""
    return {flag: action for action in parser._actions if action.help != argparse.SUPPRESS
            for flag in action.option_strings}


SIMULATING = ["run", "sweep", "search", "compare", "nccl-tests", "validate runs",
              "validate trace", "validate nccl", "calibrate nccl", "calibrate trace",
              "trace chakra", "trace export-chakra"]
MANY_RUNS = ["sweep", "search", "validate runs"]
TAKE_SET = [*SIMULATING, "topology show", "calibrate nccl", "validate nccl"]


def test_the_commands_are_the_ones_this_table_knows() -> None:
    assert set(SIMULATING) | set(TAKE_SET) <= set(commands())


@pytest.mark.parametrize("command", SIMULATING)
def test_a_simulating_command_can_be_quiet(command: str) -> None:
    flags = options(commands()[command])
    assert "-q" in flags and "--quiet" in flags


@pytest.mark.parametrize("command", TAKE_SET)
def test_set_overrides_wherever_a_cluster_or_scenario_is_read(command: str) -> None:
    assert "--set" in options(commands()[command])


@pytest.mark.parametrize("command", MANY_RUNS)
def test_commands_of_many_runs_take_workers_and_a_dask_scheduler(command: str) -> None:
    flags = options(commands()[command])
    assert "--workers" in flags and "--scheduler" in flags


@pytest.mark.parametrize("command", ["run", "compare", "sweep"])
def test_allow_oom_where_a_scenario_runs_as_given(command: str) -> None:
    assert "--allow-oom" in options(commands()[command])


def test_out_is_a_folder_and_o_a_file_everywhere() -> None:
    for name, parser in commands().items():
        flags = options(parser)
        if "--out" in flags:
            assert "-o" not in flags["--out"].option_strings, name
            assert flags["--out"].metavar == "DIR", name
        if "-o" in flags:
            assert flags["-o"].metavar != "DIR", name


def test_json_wherever_a_command_prints_results() -> None:
    # These three write a file or folder (a cost table, ETs, a cluster file) and print
    # only what they wrote.
    printing = set(commands()) - {"profile layer", "trace export-chakra", "topology import"}
    missing = [name for name in sorted(printing) if "--json" not in options(commands()[name])]
    assert missing == []
