"""Chakra ET format: the wire codec, the node reader, the JSON forms and malformed files."""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile

import pytest
from distsim_gpu.measured.chakra import (
    ChakraNode,
    ChakraTrace,
    encode_et,
    load_chakra,
    parse_et,
    parse_json,
)
from distsim_gpu.measured.protowire import (
    decode_fields,
    encode_bytes,
    encode_delimited,
    encode_varint,
    encode_varint_field,
)
from distsim_gpu.simcore.errors import ParseError
from hypothesis import given, settings
from hypothesis import strategies as st


@given(st.integers(0, 2**64 - 1))
def test_varint_round_trips(value):
    data = encode_varint_field(1, value)
    (field,) = decode_fields(data, source="x")
    assert field.value == value and field.number == 1


def test_varint_bytes_by_the_encoding_guide():
    # protobuf.dev encoding guide: 150 is 0x96 0x01; 1 is one byte.
    assert encode_varint(150) == b"\x96\x01" and encode_varint(1) == b"\x01"
    assert encode_varint(-1) == b"\xff" * 9 + b"\x01"  # int64 -1: ten bytes


def _trace() -> ChakraTrace:
    nodes = (
        ChakraNode(0, "fwd", 4, duration_micros=12, attrs={"is_cpu_op": False,
                                                            "duration_s": 12.5e-6}),
        ChakraNode(1, "allreduce", 7, data_deps=(0,), ctrl_deps=(0,), duration_micros=3,
                   attrs={"comm_type": 0, "comm_size": 1 << 20, "pg_ranks": [0, 1],
                          "involved_dim": [True, False], "tag": "grad", "seq": -1}),
    )
    return ChakraTrace("t.0.et", 0, "1.0.1", {"schema": "1.0.1", "pid": 7}, nodes)


def test_et_round_trips_every_field():
    trace = _trace()
    back = parse_et(encode_et(trace), source="t.0.et")
    assert back.nodes == trace.nodes and back.metadata == trace.metadata
    assert back.version == "1.0.1" and back.rank == 0
    assert back.nodes[0].duration_s == 12.5e-6  # the exact figure, not the rounded micros
    assert back.nodes[1].deps == (0,)


def test_truncated_files_name_the_byte():
    data = encode_et(_trace())
    with pytest.raises(ParseError, match=r"claims \d+ bytes, \d+ left") as caught:
        parse_et(data[:-1], source="t.et")
    assert caught.value.source == "t.et"
    with pytest.raises(ParseError) as caught:
        parse_et(encode_delimited(b"") + b"\x80", source="t.et")
    assert caught.value.message == "truncated varint at byte 1"


def test_wrong_wire_type_is_named():
    meta = encode_delimited(encode_bytes(1, "1.0.1"))
    node = encode_bytes(1, b"\x01")  # id written as a string
    with pytest.raises(ParseError, match=r"node id \(field 1\) at byte \d+ is "
                                         "length-delimited, expected varint"):
        parse_et(meta + encode_delimited(node), source="bad.et")


def test_group_wire_type_and_empty_file_are_rejected():
    meta = encode_delimited(encode_bytes(1, "1.0.1"))
    with pytest.raises(ParseError, match="wire type 3"):
        parse_et(meta + encode_delimited(b"\x0b"), source="bad.et")
    with pytest.raises(ParseError, match="empty"):
        parse_et(b"", source="bad.et")


def test_unknown_fields_are_skipped():
    meta = encode_delimited(encode_bytes(1, "1.0.1"))
    node = encode_varint_field(1, 5) + encode_varint_field(99, 1) + encode_varint_field(3, 4)
    (read,) = parse_et(meta + encode_delimited(node), source="x.et").nodes
    assert (read.id, read.type) == (5, 4)


def test_both_json_forms():
    old = parse_json('{"workload_graph": [{"Id": 3, "Name": "k", "NodeType": 4, '
                     '"ctrlDeps": [1], "data_deps": [2], "runtime": 7, "is_cpu_op": false}]}',
                     source="a.1.json")
    new = parse_json('[{"id": "3", "name": "k", "type": "COMP_NODE", "ctrlDeps": ["1"], '
                     '"dataDeps": ["2"], "durationMicros": "7", '
                     '"attr": [{"name": "is_cpu_op", "boolVal": false}]}]', source="b.1.json")
    assert old.nodes == new.nodes and old.rank == 1
    assert old.nodes[0].duration_s == pytest.approx(7e-6)


@pytest.mark.parametrize(("text", "words"), [
    ("{", "malformed JSON"),
    ('{"nodes": 3}', "no node list"),
    ('[{"id": 1, "type": "WARP_NODE"}]', "type"),
    ('[{"id": 1, "type": 4, "dataDeps": ["x"]}]', "node ids"),
])
def test_malformed_json_is_a_clear_error(text, words):
    with pytest.raises(ParseError, match=words):
        parse_json(text, source="bad.json")


def test_a_tar_archive_of_ets_reads_as_its_members(tmp_path):
    """``trace chakra ARCHIVE.tar.gz`` (as Chakra's test data ships its ETs) reads each
    ``.et`` / ``.json`` member by its name's rank; it had read the gzip bytes as protobuf
    ("field 129 has wire type 3")."""
    data = encode_et(_trace())
    archive = tmp_path / "ets.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, body in (("d/job.1.et", data), ("d/README", b"hi"), ("d/job.0.et", data)):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    read = load_chakra([archive])
    assert [t.rank for t in read] == [0, 1]
    assert [t.source for t in read] == [f"{archive}:d/job.0.et", f"{archive}:d/job.1.et"]
    assert all(t.nodes == _trace().nodes for t in read)
    empty = tmp_path / "none.tar.gz"
    with tarfile.open(empty, "w:gz"):
        pass
    with pytest.raises(ParseError, match="no Chakra ET member"):
        load_chakra([empty])


def test_a_file_of_another_kind_is_named(tmp_path):
    """A Kineto trace and gzip-compressed bytes are named as what they are; they had read
    as "no node list" and as a protobuf wire-type error."""
    kineto = tmp_path / "worker0.json"
    kineto.write_text('{"schemaVersion": 1, "traceEvents": []}')
    with pytest.raises(ParseError, match=r"Kineto\) trace, not a Chakra ET.*trace summary"):
        load_chakra([kineto])
    packed = tmp_path / "job.0.et.gz"
    packed.write_bytes(gzip.compress(encode_et(_trace())))
    with pytest.raises(ParseError, match="gzip-compressed data, not a Chakra ET"):
        load_chakra([packed])


def test_the_chakra_samples_read(chakra_samples):
    tmp_path = chakra_samples
    (binary,) = load_chakra([next(tmp_path.rglob("chakra.0.et"))])
    assert binary.version == "1.0.1" and len(binary.nodes) == 3664
    assert sum(n.type == 7 for n in binary.nodes) == 21
    sized = [n for n in binary.nodes if "comm_size" in n.attrs]
    assert len(sized) == 7 and all(n.attrs["comm_type"] in (0, 5) for n in sized)
    assert parse_et(encode_et(binary), source="again").nodes == binary.nodes
    (json_form,) = load_chakra([next(tmp_path.rglob("chakra.0.json"))])
    assert len(json_form.nodes) == 3664


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_read_or_fail_cleanly(data):
    with contextlib.suppress(ParseError):
        parse_et(data, source="fuzz.et")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60), st.integers(0, 400))
def test_a_damaged_trace_reads_or_fails_cleanly(noise, at):
    data = encode_et(_trace())
    at = min(at, len(data))
    with contextlib.suppress(ParseError):
        parse_et(data[:at] + noise + data[at + len(noise):], source="damaged.et")
