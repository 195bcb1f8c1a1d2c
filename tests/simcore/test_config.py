"""The configuration toolkit: ``--set`` parsing, dotted overrides into mappings and lists,
and the mapping / key / choice checks with their error messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_number,
    check_whole,
    describe,
    parse_assignment,
    parse_path,
    path_key,
    set_path,
    split_overrides,
)
from distsim_gpu.simcore.errors import ConfigError, ParseError
from hypothesis import given, settings
from hypothesis import strategies as st

# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "expected"), [
    ("a.b=3", ("a.b", 3)),
    ("nic.bandwidth=200 Gbps", ("nic.bandwidth", "200 Gbps")),
    ('nic.bandwidth="200 Gbps"', ("nic.bandwidth", "200 Gbps")),
    ("name='2'", ("name", "2")),
    (" nodes = 16 ", ("nodes", 16)),
    ("flag=true", ("flag", True)),
    ("tiles=[1, 2]", ("tiles", [1, 2])),
    ("fabric={kind: x}", ("fabric", {"kind": "x"})),
    ("broken=[1", ("broken", "[1")),
    ("empty=", ("empty", "")),
    ("links[3].kind=pcie", ("links[3].kind", "pcie")),
    ("expr=a=b", ("expr", "a=b")),
])
def test_parse_assignment_reads_the_value_as_yaml(text: str, expected: tuple[str, Any]) -> None:
    assert parse_assignment(text) == expected


@pytest.mark.parametrize(("text", "words"), [
    ("novalue", "'novalue' is not KEY=VALUE"),
    ("=3", "is not KEY=VALUE"),
    ("a..b=1", "cannot read key path 'a..b'"),
    ("a.=1", "cannot read key path"),
    ("a[x]=1", "cannot read key path"),
])
def test_parse_assignment_rejects_what_is_not_key_value(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        parse_assignment(text, source="--set comm")
    assert info.value.source == "--set comm" and info.value.hint


def test_parse_path_tokens() -> None:
    assert parse_path("links[3].kind") == ("links", 3, "kind")
    assert parse_path("a[0][2]") == ("a", 0, 2)
    assert parse_path("jobs.0.model") == ("jobs", "0", "model")
    assert parse_path(" a . b ") == ("a", "b")


def test_path_key_writes_positions_in_brackets() -> None:
    assert path_key("links.3.kind") == "links[3].kind"
    assert path_key("links[3].kind") == "links[3].kind"
    assert path_key("jobs.0") == "jobs[0]"
    assert path_key("nic.bandwidth") == "nic.bandwidth"


def test_split_overrides_routes_by_prefix() -> None:
    rest, routed = split_overrides([("comm.algorithm", "ring"), ("nodes", 2), ("comm", 1)],
                                   ["comm", "model"])
    assert rest == [("nodes", 2), ("comm", 1)]
    assert routed == {"comm": [("algorithm", "ring")], "model": []}


# --------------------------------------------------------------------------- set_path


def test_set_path_creates_missing_mappings_and_keeps_the_rest() -> None:
    data: dict[str, Any] = {"nodes": 2, "nic": {"count": 4}}
    set_path(data, "nic.bandwidth", "200 Gbps")
    set_path(data, "fabric.spines", 4)
    assert data == {"nodes": 2, "nic": {"count": 4, "bandwidth": "200 Gbps"},
                    "fabric": {"spines": 4}}


def test_set_path_replaces_a_missing_value_written_as_null() -> None:
    data: dict[str, Any] = {"stragglers": None}
    set_path(data, "stragglers.x", 1.5)
    assert data == {"stragglers": {"x": 1.5}}


@pytest.mark.parametrize("key", ["links.1.bandwidth", "links[1].bandwidth"])
def test_set_path_indexes_lists_either_way(key: str) -> None:
    data: dict[str, Any] = {"links": [{"src": "a"}, {"src": "b"}]}
    set_path(data, key, "10 GB/s")
    assert data == {"links": [{"src": "a"}, {"src": "b", "bandwidth": "10 GB/s"}]}


def test_set_path_replaces_a_list_item_and_nested_lists() -> None:
    data: dict[str, Any] = {"tiles": [[1, 2, 0.5], [3, 4, 1.0]]}
    set_path(data, "tiles.1", [8, 8, 1.0])
    set_path(data, "tiles[0][2]", 0.75)
    assert data == {"tiles": [[1, 2, 0.75], [8, 8, 1.0]]}


def test_set_path_expands_shorthand_groups() -> None:
    data: dict[str, Any] = {"fabric": "fat-tree", "cluster": {"fabric": "rail-optimized"}}
    shorthand = {"fabric": "kind", "cluster.fabric": "kind"}
    set_path(data, "fabric.spines", 4, shorthand=shorthand)
    set_path(data, "cluster.fabric.spines", 2, shorthand=shorthand)
    assert data == {"fabric": {"kind": "fat-tree", "spines": 4},
                    "cluster": {"fabric": {"kind": "rail-optimized", "spines": 2}}}


def test_set_path_keeps_dotted_names_whole_under_their_group() -> None:
    data: dict[str, Any] = {}
    set_path(data, "stragglers.n0.gpu3", 1.2, dotted_names_under=("stragglers",))
    set_path(data, "other.n0.gpu3", 1, dotted_names_under=("stragglers",))
    assert data == {"stragglers": {"n0.gpu3": 1.2}, "other": {"n0": {"gpu3": 1}}}


@pytest.mark.parametrize(("data", "key", "words", "hint"), [
    ({"links": [{}, {}, {}]}, "links.3.kind",
     "no list item [3] to set: links has 3 item(s)", "valid positions: 0 to 2"),
    ({"links": [{}, {}, {}]}, "links[7]", "no list item [7] to set", "valid positions: 0 to 2"),
    ({"links": []}, "links.0.kind", "links has 0 item(s)", "the list is empty"),
    ({"links": [{}]}, "links.first.kind", "links is a list; 'first' is not a position in it",
     "index a list by a whole number, e.g. links.0"),
    ({"jobs": [{}]}, "jobs.-1", "jobs is a list; '-1' is not a position",
     "index a list by a whole number, e.g. jobs.0"),
    ({"nodes": 2}, "nodes.count", "nodes is int 2, not a mapping", None),
    ({"nic": {"count": 4}}, "nic[0]", "nic is dict {'count': 4}, not a list", None),
    ({}, "links[0].kind", "no list item [0] to set: links is not set", None),
    ({"a": {"b": "text"}}, "a.b.c", "a.b is str 'text', not a mapping", None),
])
def test_set_path_errors_name_the_key_and_what_is_valid(data: dict[str, Any], key: str,
                                                        words: str, hint: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        set_path(data, key, 1, source="--set")
    assert words in info.value.message
    assert info.value.key == key and info.value.source == "--set"
    assert info.value.hint == hint


def test_set_path_rejects_an_unreadable_path() -> None:
    with pytest.raises(ConfigError, match="cannot read key path") as info:
        set_path({}, "a..b", 1, source="run.yaml")
    assert info.value.source == "run.yaml"


# A property: set a path, read it back; nothing outside that path moves.

_names = st.from_regex(r"[a-z_][a-z0-9_]{0,4}", fullmatch=True)
_leaves = st.one_of(st.integers(-5, 5), st.text("ab ", max_size=3), st.booleans(), st.none())
_trees = st.recursive(
    _leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_names, inner, max_size=3)),
    max_leaves=12,
)


@st.composite
def _tree_and_path(draw: st.DrawFn) -> tuple[dict[str, Any], list[str | int]]:
    """A mapping and a path into it: through existing mappings and list items, and on
    into new keys wherever it leaves the tree."""
    tree = draw(st.dictionaries(_names, _trees, max_size=4))
    path: list[str | int] = []
    node: Any = tree
    while True:
        if isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            path.append(index)
            node = node[index]
        elif isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            path.append(key)
            node = node[key]
        elif isinstance(node, dict) or node is None or not path:
            taken = node if isinstance(node, dict) else {}
            path.append(draw(_names.filter(lambda name, taken=taken: name not in taken)))
            path.extend(draw(st.lists(_names, max_size=2)))
            return tree, path
        else:
            return tree, path
        if not isinstance(node, (dict, list)) and node is not None:
            return tree, path  # a leaf: the path replaces it


def _render(path: list[str | int], brackets: bool) -> str:
    text = ""
    for token in path:
        if isinstance(token, int):
            text += f"[{token}]" if brackets else f".{token}"
        else:
            text = f"{text}.{token}" if text else token
    return text


def _get(data: Any, path: list[str | int]) -> Any:
    for token in path:
        data = data[token]
    return data


def _leaves_of(data: Any, at: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    """Every leaf (a scalar or an empty container) by its path."""
    children: list[tuple[str | int, Any]] = []
    if isinstance(data, dict):
        children = list(data.items())
    elif isinstance(data, list):
        children = list(enumerate(data))
    if not children:
        return {at: data}
    return {path: leaf for key, child in children
            for path, leaf in _leaves_of(child, (*at, key)).items()}


def _outside(leaves: dict[tuple[str | int, ...], Any], path: tuple[str | int, ...]
             ) -> dict[tuple[str | int, ...], Any]:
    """The leaves neither on the way to ``path`` nor under it."""
    return {p: v for p, v in leaves.items()
            if p[:len(path)] != path and path[:len(p)] != p}


@settings(max_examples=200, deadline=None)
@given(_tree_and_path(), st.one_of(_leaves, st.dictionaries(_names, _leaves, max_size=2)),
       st.booleans())
def test_set_then_read_back(case: tuple[dict[str, Any], list[str | int]], value: Any,
                            brackets: bool) -> None:
    tree, path = case
    before = copy.deepcopy(tree)
    set_path(tree, _render(path, brackets), value)
    assert _get(tree, path) == value
    assert _outside(_leaves_of(tree), tuple(path)) == _outside(_leaves_of(before), tuple(path))


# --------------------------------------------------------------------------- checks


def test_describe_names_the_type_and_cuts_long_values() -> None:
    assert describe(2) == "int 2"
    assert describe([1, 2]) == "list [1, 2]"
    assert len(describe("x" * 500)) < 80
    assert describe(list(range(100))).endswith("...]")


def test_check_mapping() -> None:
    value = {"a": 1}
    assert check_mapping(value, key="nic") is value
    assert check_mapping(None, key="nic", optional=True) == {}
    with pytest.raises(ConfigError) as info:
        check_mapping(None, key="nic", source="c.yaml")
    assert str(info.value) == "c.yaml: nic: expected a mapping, got NoneType None"
    with pytest.raises(ConfigError) as info:
        check_mapping([1, 2], key=None, source="c.yaml")
    assert str(info.value) == "c.yaml: expected a mapping, got list [1, 2]"


def test_check_mapping_puts_the_line_when_the_caller_knows_it() -> None:
    lines = {"cluster": 2, "cluster.nic": 5}
    with pytest.raises(ConfigError) as info:
        check_mapping("fast", key="cluster.nic", source="s.yaml", lines=lines)
    assert str(info.value) == "s.yaml:5: cluster.nic: expected a mapping, got str 'fast'"
    with pytest.raises(ConfigError) as info:
        check_mapping(3, key="cluster.nvlink", source="s.yaml", lines=lines)
    assert info.value.line == 2  # the nearest enclosing key the file has


def test_check_keys_accepts_valid_keys() -> None:
    check_keys({"bandwidth": 1, "latency": 2}, ("bandwidth", "latency"), prefix="nic")
    check_keys({}, ())


def test_check_keys_names_the_first_unknown_key_with_a_hint() -> None:
    with pytest.raises(ConfigError) as info:
        check_keys({"bandwidth": 1, "latncy": 2}, ("bandwidth", "latency"), prefix="nic",
                   source="c.yaml", lines={"nic.latncy": 7})
    assert str(info.value) == ("c.yaml:7: nic.latncy: unknown key (did you mean 'latency'? "
                               "valid: bandwidth, latency)")


def test_check_keys_says_what_the_keys_are_and_why() -> None:
    with pytest.raises(ConfigError) as info:
        check_keys({"spines": 2}, ("kind", "link_bandwidth"), prefix="fabric",
                   context=" for fabric 'single-switch'")
    assert str(info.value) == ("fabric.spines: unknown key for fabric 'single-switch' "
                               "(valid: kind, link_bandwidth)")
    with pytest.raises(ConfigError) as info:
        check_keys({"lll": 1}, {"ll": 1, "simple": 2}, prefix="base_latency.ring",
                   what="protocol")
    assert info.value.message == "unknown protocol"
    assert info.value.key == "base_latency.ring.lll"
    assert info.value.hint == "did you mean 'll'? valid: ll, simple"


def test_check_keys_rejects_keys_that_are_not_strings() -> None:
    with pytest.raises(ConfigError) as info:
        check_keys({1: "x"}, ("1", "2"))
    assert info.value.key == "1"


def test_check_choice() -> None:
    assert check_choice("ring", ("ring", "tree"), key="algorithm") == "ring"
    assert check_choice("RING", ("ring", "tree"), key="algorithm", fold_case=True) == "ring"
    with pytest.raises(ConfigError) as info:
        check_choice("rign", ("ring", "tree"), key="communication.algorithm", source="s.yaml")
    assert str(info.value) == ("s.yaml: communication.algorithm: unknown algorithm 'rign' "
                               "(did you mean 'ring'? valid: ring, tree)")


def test_check_choice_error_names_what_and_where() -> None:
    with pytest.raises(ConfigError) as info:
        check_choice("cable", ("nvlink", "pcie"), key="links[3].kind", what="link kind",
                     source="c.yaml", lines={"links[3]": 9})
    assert str(info.value) == "c.yaml:9: links[3].kind: unknown link kind 'cable' (valid: " \
                              "nvlink, pcie)"
    with pytest.raises(ConfigError, match="unknown kind 'cable'"):
        check_choice("cable", ("nvlink",), key="links[3].kind")
    with pytest.raises(ConfigError, match="unknown pass 3"):
        check_choice(3, ("fwd", "bwd"), key="pass")
    with pytest.raises(ConfigError, match="unknown pass None"):
        check_choice(None, ("fwd", "bwd"), key="pass", fold_case=True)


def test_check_mapping_carries_the_callers_hint() -> None:
    with pytest.raises(ConfigError) as info:
        check_mapping([1], key="model", hint="e.g. {preset: llama3-8b}")
    assert str(info.value) == "model: expected a mapping, got list [1] (e.g. {preset: llama3-8b})"


def test_check_choice_without_a_key() -> None:
    with pytest.raises(ConfigError) as info:
        check_choice("rign", ("ring",), key=None, what="algorithm")
    assert str(info.value) == "unknown algorithm 'rign' (did you mean 'ring'? valid: ring)"
    assert info.value.key is None
    with pytest.raises(ConfigError, match="unknown value 'x'"):
        check_choice("x", ("ring",), key=None)


def test_checks_raise_the_callers_error_class_at_a_known_line() -> None:
    with pytest.raises(ParseError) as info:
        check_keys({"seqlen": 8}, ("seq_len", "hidden"), prefix="rows[0]", source="t.yaml",
                   what="column", line=6, error=ParseError)
    assert str(info.value) == ("t.yaml:6: rows[0].seqlen: unknown column (did you mean "
                               "'seq_len'? valid: hidden, seq_len)")
    with pytest.raises(ParseError) as info:
        check_choice("Forward", ("fwd", "bwd"), key=None, source="t.csv", what="pass",
                     fold_case=True, line=3, error=ParseError)
    assert str(info.value) == ("t.csv:3: unknown pass 'Forward' (did you mean 'fwd'? "
                               "valid: bwd, fwd)")


def test_a_lines_map_wins_over_the_fallback_line() -> None:
    with pytest.raises(ConfigError) as info:
        check_choice("x", ("a",), key="k", lines={"k": 4}, line=9)
    assert info.value.line == 4
    with pytest.raises(ConfigError) as info:
        check_choice("x", ("a",), key="k", lines={"other": 4}, line=9)
    assert info.value.line == 9


@pytest.mark.parametrize(("value", "minimum"), [(1, 1), (0, 0), (2**40, 1), (-3, -5)])
def test_check_whole_accepts_whole_numbers_from_the_minimum(value: int, minimum: int) -> None:
    assert check_whole(value, key="tp", minimum=minimum) == value


@pytest.mark.parametrize(("value", "minimum", "text"), [
    (0, 1, "s.yaml: tp: must be a whole number >= 1, got 0"),
    (-1, 0, "s.yaml: tp: must be a whole number >= 0, got -1"),
    (2.0, 1, "s.yaml: tp: must be a whole number >= 1, got 2.0"),
    ("2", 1, "s.yaml: tp: must be a whole number >= 1, got '2'"),
    (True, 0, "s.yaml: tp: must be a whole number >= 0, got True"),
    (None, 1, "s.yaml: tp: must be a whole number >= 1, got None"),
])
def test_check_whole_rejects_what_is_not(value: Any, minimum: int, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_whole(value, key="tp", minimum=minimum, source="s.yaml")
    assert str(info.value) == text


def test_check_whole_with_line_hint_and_error_class() -> None:
    with pytest.raises(ParseError) as info:
        check_whole(0, key="rows[0].tp", source="t.yaml", line=6, hint="a tp degree",
                    error=ParseError)
    assert str(info.value) == "t.yaml:6: rows[0].tp: must be a whole number >= 1, got 0 " \
                              "(a tp degree)"


@pytest.mark.parametrize(("value", "bounds", "expected"), [
    (0, {}, 0.0), (2, {"above": True}, 2.0), (1, {"above": True, "maximum": 1}, 1.0),
    (0.5, {"minimum": 0.5}, 0.5), (-1.5, {"minimum": -2}, -1.5),
])
def test_check_number_accepts_finite_numbers_in_bounds(value: Any, bounds: dict[str, Any],
                                                      expected: float) -> None:
    result = check_number(value, key="x", **bounds)
    assert result == expected and type(result) is float


@pytest.mark.parametrize(("value", "bounds", "text"), [
    (-1, {}, "x: must be a finite number >= 0, got -1"),
    (0, {"above": True}, "x: must be a finite number > 0, got 0"),
    (float("inf"), {}, "x: must be a finite number >= 0, got inf"),
    (float("nan"), {"above": True, "maximum": 1}, "x: must be a number in (0, 1], got nan"),
    (1.5, {"above": True, "maximum": 1}, "x: must be a number in (0, 1], got 1.5"),
    (-0.1, {"maximum": 1}, "x: must be a number in [0, 1], got -0.1"),
    (True, {}, "x: must be a finite number >= 0, got True"),
    ("1", {}, "x: must be a finite number >= 0, got '1'"),
])
def test_check_number_rejects_what_is_out_of_bounds(value: Any, bounds: dict[str, Any],
                                                    text: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_number(value, key="x", **bounds)
    assert str(info.value) == text


def test_check_number_with_source_hint_and_error_class() -> None:
    with pytest.raises(ParseError) as info:
        check_number(0, key="groups.g0.slowdown", above=True, source="t.json", hint="e.g. 1.2",
                     error=ParseError)
    assert str(info.value) == ("t.json: groups.g0.slowdown: must be a finite number > 0, "
                               "got 0 (e.g. 1.2)")


def test_check_bool() -> None:
    assert check_bool(True, key="duplex") is True
    assert check_bool(False, key="duplex") is False
    for value in (1, 0, "yes", None):
        with pytest.raises(ConfigError) as info:
            check_bool(value, key="links[2].duplex", source="c.yaml", lines={"links[2]": 9})
        assert str(info.value) == f"c.yaml:9: links[2].duplex: must be true or false, got " \
                                  f"{value!r}"


@pytest.mark.parametrize("check", [
    lambda **kw: check_whole(1, key="x", **kw),
    lambda **kw: check_number(1, key="x", **kw),
    lambda **kw: check_keys({}, (), **kw),
    lambda **kw: check_choice("a", ("a",), key="x", **kw),
])
def test_a_misspelt_place_argument_is_refused_even_when_the_value_passes(check: Any) -> None:
    assert check(source="f.yaml", lines={}, line=3, error=ConfigError) is not False
    with pytest.raises(TypeError, match="unexpected keyword argument 'soruce'"):
        check(soruce="f.yaml")
