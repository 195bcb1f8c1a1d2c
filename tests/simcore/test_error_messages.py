"""The error family: ``str(error)`` says where, what, and what would be valid."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import (
    ConfigError,
    DistsimError,
    ParseError,
    SimulationError,
    TopologyError,
    closest,
)


def test_full_place_layout_is_source_line_key_message_hint():
    error = ConfigError("unknown key", source="run.yaml", line=12, key="model.layrs",
                        hint="did you mean 'layers'?")
    assert str(error) == "run.yaml:12: model.layrs: unknown key (did you mean 'layers'?)"
    assert error.where() == "run.yaml:12: model.layrs"


def test_message_alone_has_no_decoration():
    error = DistsimError("something is off")
    assert str(error) == "something is off"
    assert error.where() == ""


def test_source_without_line():
    assert str(ParseError("bad YAML", source="cluster.yaml")) == "cluster.yaml: bad YAML"


def test_source_and_line_without_key():
    assert str(ParseError("tab in indent", source="c.yaml", line=3)) == "c.yaml:3: tab in indent"


def test_key_without_source():
    error = ConfigError("must be positive", key="links.ib.bandwidth", hint="e.g. 400 Gbps")
    assert str(error) == "links.ib.bandwidth: must be positive (e.g. 400 Gbps)"


def test_hint_without_place():
    assert str(SimulationError("deadlock", hint="check send/recv pairs")) == (
        "deadlock (check send/recv pairs)")


def test_attributes_are_kept():
    error = TopologyError("dangling link", source="x.yaml", key="links[3]", line=7, hint="h")
    assert (error.message, error.source, error.key, error.line, error.hint) == (
        "dangling link", "x.yaml", "links[3]", 7, "h")
    assert error.args == ("dangling link",)


@pytest.mark.parametrize("cls", [ConfigError, ParseError, TopologyError, SimulationError])
def test_every_error_is_a_distsim_error(cls):
    with pytest.raises(DistsimError):
        raise cls("x")


def test_closest_suggests_the_near_word_first():
    assert closest("bandwith", ["latency", "bandwidth"]) == (
        "did you mean 'bandwidth'? valid: bandwidth, latency")


def test_closest_without_a_near_word_lists_valid_choices_sorted():
    assert closest("zzz", ["ring", "tree", "hierarchical"]) == (
        "valid: hierarchical, ring, tree")


def test_closest_with_no_choices():
    assert closest("ring", []) == "nothing is valid here"


def test_closest_accepts_non_string_choices_and_any_iterable():
    assert closest("8", (n for n in (4, 8, 16))).startswith("did you mean '8'?")
