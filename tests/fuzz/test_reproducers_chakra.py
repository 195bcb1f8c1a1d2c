"""Hostile Chakra ETs end in one clear error through ``distsim trace chakra``.

Binary attributes of the wrong wire type, JSON numbers that are text, NaN, infinite or
thousands of digits long, nesting past Python's reader, process groups out of the job,
durations below zero or infinite, calls whose peers never come or that disagree, and a
world size beyond the cluster: each exits 2 with a ``distsim: error:`` line naming the
file (or the argument) and the node or key, and no traceback.
"""

from __future__ import annotations

import json

import pytest
from distsim_gpu.measured.chakra import ChakraNode, ChakraTrace, encode_et, read_chakra
from distsim_gpu.measured.protowire import (
    encode_bytes,
    encode_delimited,
    encode_double,
    encode_varint_field,
)
from distsim_gpu.simcore.errors import ParseError

CLUSTER = ("--cluster", "dgx-a100")


def _node(ident, kind="COMP_NODE", **fields):
    node = {"Id": ident, "Name": f"n{ident}", "NodeType": kind, "data_deps": [],
            "runtime": 10}
    node.update(fields)
    return node


def _write(path, nodes):
    path.write_text(json.dumps({"workload_graph": nodes}), encoding="utf-8")
    return str(path)


def _raw(path, nodes_text):
    path.write_text('{"workload_graph": [' + nodes_text + ']}', encoding="utf-8")
    return str(path)


def _comp(field_text):
    return '{"Id": 0, "Name": "a", "NodeType": "COMP_NODE", ' + field_text + '}'


@pytest.mark.parametrize(("text", "key", "says"), [
    (_comp('"runtime": "abc"'), "node [0].runtime", "whole number"),
    (_comp('"runtime": NaN'), "", "NaN is not a JSON number"),
    (_comp('"runtime": Infinity'), "", "Infinity is not a JSON number"),
    (_comp('"runtime": -Infinity'), "", "-Infinity is not a JSON number"),
    (_comp('"runtime": 1e400'), "", "beyond a double's range"),
    (_comp('"runtime": 1' + "0" * 400), "", "401 digits"),
    (_comp('"runtime": ' + "9" * 5000), "", "5,000 digits"),
    (_comp('"runtime": -5'), "node [0].runtime", "got -5"),
    (_comp('"runtime": []'), "node [0].runtime", "got []"),
    (_comp('"runtime": false'), "node [0].runtime", "got False"),
    ('{"Id": "x", "NodeType": "COMP_NODE"}', "node [0].id", "got 'x'"),
    ('{"Id": "' + "9" * 400 + '", "NodeType": "COMP_NODE"}', "node [0].id", "whole number"),
    (_comp('"data_deps": ["x"]'), "node [0].data_deps", "node ids"),
    (_comp('"data_deps": [1.5]'), "node [0].data_deps", "got 1.5"),
    (_comp('"Name": {"a": 1}'), "node [0].name", "must be text"),
    (_comp('"is_cpu_op": "yes"'), "node 0.is_cpu_op", "true or false"),
    (_comp('"attr": [{"name": "duration_s", "doubleVal": -1.0}]'), "node 0.duration_s",
     "finite number of seconds >= 0"),
    (_comp('"attr": [{"name": "duration_s", "doubleVal": "inf"}]'), "node 0.duration_s",
     "finite number"),
])
def test_json_numbers(rejects, tmp_path, text, key, says):
    path = _raw(tmp_path / "t.0.json", text)
    err = rejects("trace", "chakra", path, *CLUSTER, names=f"t.0.json: {key}")
    assert says in err and len(err) < 600


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json(rejects, tmp_path, depth):
    path = tmp_path / "t.0.json"
    path.write_text('{"workload_graph": [], "x": ' + "[" * depth + "]" * depth + "}")
    assert "nested deeper" in rejects("trace", "chakra", str(path), *CLUSTER,
                                      names="t.0.json")


def test_a_rank_of_5000_digits_in_the_file_name_is_a_name(tmp_path):
    # (int() of 5,000 digits fails: such a run of digits is no rank)
    path = _write(tmp_path / ("t." + "9" * 200 + ".json"), [_node(0)])
    assert read_chakra(path).rank is None
    assert read_chakra(_write(tmp_path / "t.123456789.json", [_node(0)])).rank == 123456789


def _coll(ident, size=1024, kind=0, **fields):
    return _node(ident, "COMM_COLL_NODE", comm_type=kind, comm_size=size, **fields)


@pytest.mark.parametrize(("attr", "key", "says"), [
    ({"name": "pg_ranks", "int64Val": ["a", "b"]}, "node 0.pg_ranks", "got 'a'"),
    ({"name": "pg_ranks", "values": [0, 1.5]}, "node 0.pg_ranks", "got 1.5"),
    ({"name": "pg_ranks", "values": [0, -1]}, "node 0.pg_ranks", "got -1"),
    ({"name": "pg_ranks", "values": [0, 99]}, "node 0.pg_ranks", "distinct ranks 0..1"),
    ({"name": "pg_ranks", "values": [0, 1, 1]}, "node 0.pg_ranks", "distinct ranks 0..1"),
    ({"name": "pg_ranks", "values": "0,1"}, "node 0.pg_ranks", "a list of ranks"),
    ({"name": "pg_ranks", "values": []}, "node 0.pg_ranks", "a list of ranks, got []"),
    ({"name": "comm_tag", "values": [1]}, "node 0.comm_tag", "got [1]"),
])
def test_process_groups_and_tags(rejects, tmp_path, attr, key, says):
    for rank in (0, 1):
        _write(tmp_path / f"t.{rank}.json", [_coll(0, attr=[attr])])
    err = rejects("trace", "chakra", str(tmp_path), *CLUSTER, names=f"t.0.json: {key}")
    assert says in err


def test_a_collective_whose_peer_never_calls_is_a_hang(rejects, tmp_path):
    _write(tmp_path / "t.0.json", [_node(0), _coll(1, data_deps=[0])])
    _write(tmp_path / "t.1.json", [_node(0)])
    err = rejects("trace", "chakra", str(tmp_path), *CLUSTER, names="t.0.json: node 1")
    assert "all_reduce of 1,024 bytes over ranks [0, 1]" in err
    assert "waits for rank(s) 1" in err and "hang" in err


@pytest.mark.parametrize(("rank1", "says"), [
    (_coll(0, kind=2), "all_reduce of 1,024 bytes"),
    (_coll(0, size=2048), "differ in size"),
])
def test_calls_that_meet_must_agree(rejects, tmp_path, rank1, says):
    _write(tmp_path / "t.0.json", [_coll(0)])
    _write(tmp_path / "t.1.json", [rank1])
    err = rejects("trace", "chakra", str(tmp_path), *CLUSTER, names="t.1.json: node 0")
    assert says in err and "rank 0's node 0" in err and "rank 1's node 0" in err


def test_a_send_and_a_receive_of_other_tags_or_sizes_do_not_meet(rejects, tmp_path):
    send = _node(0, "COMM_SEND_NODE", comm_dst=1, comm_size=64, comm_tag=1)
    _write(tmp_path / "t.0.json", [send])
    _write(tmp_path / "t.1.json", [_node(0, "COMM_RECV_NODE", comm_src=0, comm_size=64,
                                         comm_tag=2)])
    err = rejects("trace", "chakra", str(tmp_path), *CLUSTER, names="t.0.json: node 0.comm_tag")
    assert "comm_tag 1" in err and "comm_tag 2" in err
    _write(tmp_path / "t.1.json", [_node(0, "COMM_RECV_NODE", comm_src=0, comm_size=32,
                                         comm_tag=1)])
    err = rejects("trace", "chakra", str(tmp_path), *CLUSTER, names="t.1.json: node 0")
    assert "send of 64 bytes" in err and "receive of 32 bytes" in err


def test_matching_calls_still_run(capsys, tmp_path):
    from distsim_gpu.scenarios.cli.main import main

    send = _node(1, "COMM_SEND_NODE", comm_dst=1, comm_size=64, comm_tag=3, data_deps=[0])
    _write(tmp_path / "t.0.json", [_node(0), send, _coll(2, data_deps=[1])])
    recv = _node(1, "COMM_RECV_NODE", comm_src=0, comm_size=64, comm_tag=3, data_deps=[0])
    _write(tmp_path / "t.1.json", [_node(0), recv, _coll(2, data_deps=[1])])
    assert main(["trace", "chakra", str(tmp_path), *CLUSTER]) == 0, capsys.readouterr().err


def test_world_size_beyond_the_cluster_is_refused_before_any_allocation(rejects, tmp_path):
    path = _write(tmp_path / "t.0.json", [_coll(0)])
    err = rejects("trace", "chakra", path, *CLUSTER, "--world-size", "100000000",
                  names="--world-size")
    assert "100,000,000 ranks on a cluster of 8 GPUs" in err
    # A rank in a file name as large is refused the same way, before the graphs.
    big = _write(tmp_path / "t.99999999.json", [_node(0)])
    assert "100,000,000 ranks" in rejects("trace", "chakra", big, *CLUSTER, names="--cluster")


# ------------------------------------------------------------------ binary ETs


def _et(path, *node_bodies):
    meta = encode_bytes(1, "1.0.1")
    path.write_bytes(encode_delimited(meta) + b"".join(encode_delimited(b)
                                                      for b in node_bodies))
    return str(path)


def _attr_node(attr_body):
    return (encode_varint_field(1, 0) + encode_bytes(2, "n") + encode_varint_field(3, 4)
            + encode_bytes(10, encode_bytes(1, "x") + attr_body))


@pytest.mark.parametrize(("attr_body", "says"), [
    (encode_bytes(30, encode_varint_field(1, 7)), "string list item"),  # strings: varints
    (encode_bytes(4, encode_varint_field(1, 7)), "double list item"),  # doubles: a varint
    (encode_bytes(6, encode_double(1, 1.0)), "float list item"),  # floats: a fixed64
    (encode_varint_field(29, 5), "attribute x (string)"),  # a string as a varint
    (encode_varint_field(3, 5), "attribute x (double)"),
    (encode_varint_field(4, 5), "double list"),
])
def test_binary_attribute_of_the_wrong_wire_type(rejects, tmp_path, attr_body, says):
    path = _et(tmp_path / "t.0.et", _attr_node(attr_body))
    assert says in rejects("trace", "chakra", path, *CLUSTER, names="t.0.et")


def test_binary_duration_s_must_be_finite_and_not_negative(rejects, tmp_path):
    for value in (float("inf"), float("nan"), -1.0):
        trace = ChakraTrace("t.0.et", 0, "1.0.1", {}, (ChakraNode(
            0, "n", 4, attrs={"duration_s": value}),))
        (tmp_path / "t.0.et").write_bytes(encode_et(trace))
        err = rejects("trace", "chakra", str(tmp_path / "t.0.et"), *CLUSTER,
                      names="t.0.et: node 0.duration_s")
        assert "finite number of seconds >= 0" in err


def test_a_good_binary_attribute_list_reads():
    body = _attr_node(encode_bytes(10, encode_bytes(1, bytes([1, 2, 3]))))
    data = encode_delimited(encode_bytes(1, "1.0.1")) + encode_delimited(body)
    from distsim_gpu.measured.chakra import parse_et

    assert parse_et(data, source="t.0.et").nodes[0].attrs["x"] == [1, 2, 3]
    with pytest.raises(ParseError, match="pg_ranks"):
        parse_et(encode_et(ChakraTrace("t.0.et", 0, "", {}, (ChakraNode(
            0, "n", 7, attrs={"pg_ranks": [-1]}),))), source="t.0.et")
