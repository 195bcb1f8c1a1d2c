"""MLCommons Chakra execution traces (ETs): the workload format of the ASTRA-sim ecosystem.

A Chakra ET is one rank's execution graph.  On disk (``<name>.<rank>.et``) it is a
length-delimited protobuf stream (:mod:`measured.protowire`): one ``GlobalMetadata``
message, then one ``Node`` message per node.  The message and field numbers below are
read from Chakra's schema (``et_def.proto``, package ``ChakraProtoMsg``):

* ``GlobalMetadata``: version (1, string), attr (2, repeated AttributeProto);
* ``Node``: id (1), name (2), type (3, NodeType), ctrl_deps (4, repeated uint64),
  data_deps (5, repeated uint64), start_time_micros (6), duration_micros (7), inputs (8)
  and outputs (9) (IOInfo, kept as bytes), attr (10, repeated AttributeProto);
* ``NodeType``: METADATA 1, MEM_LOAD 2, MEM_STORE 3, COMP 4, COMM_SEND 5, COMM_RECV 6,
  COMM_COLL 7 (INVALID 0);
* ``CollectiveCommType``: ALL_REDUCE 0, REDUCE 1, ALL_GATHER 2, GATHER 3, SCATTER 4,
  BROADCAST 5, ALL_TO_ALL 6, REDUCE_SCATTER 7, REDUCE_SCATTER_BLOCK 8, BARRIER 9;
* ``AttributeProto``: name (1), doc_string (2), then one value: double 3, float 5, int32 7,
  int64 9, uint32 11, uint64 13, sint32 15, sint64 17, fixed32 19, fixed64 21, sfixed32 23,
  sfixed64 25, bool 27, string 29, bytes 31; the even numbers 4 … 32 are the lists of the
  type before them (a message whose field 1 repeats the value).

Attributes a simulator reads: ``is_cpu_op``, ``num_ops`` (FLOPs), ``comm_type``,
``comm_size`` (bytes), ``comm_src``, ``comm_dst``, ``comm_tag``, ``pg_name``.  distsim adds
two of its own when it writes a trace: ``duration_s`` (a double: the exact duration that
``duration_micros`` rounds) and ``pg_ranks`` (the process group's global ranks).

The JSON form is read too: Chakra's older ``{"workload_graph": [{"Id", "Name",
"NodeType", "ctrlDeps", "data_deps", "runtime", "is_cpu_op", …}]}`` (runtime in
microseconds) and the protobuf JSON mapping (``id``, ``name``, ``type``, ``ctrlDeps``,
``dataDeps``, ``durationMicros``, ``attr: [{name, int64Val …}]``).  A tar archive of ETs
(Chakra's own test data comes so) is read member by member, in memory.
"""

from __future__ import annotations

import functools
import math
import os
import re
import struct
import tarfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distsim_gpu.measured.chakra_values import MAX_UINT64, check_attrs, load_json, whole
from distsim_gpu.measured.protowire import (
    FIXED32,
    FIXED64,
    LENGTH,
    VARINT,
    Field,
    decode_delimited,
    decode_fields,
    double_of,
    encode_bytes,
    encode_delimited,
    encode_double,
    encode_packed_varints,
    encode_varint_field,
    packed_varints,
)
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.fileio import MAX_INPUT_BYTES, atomic_write_bytes, read_input_bytes

__all__ = [
    "COLLECTIVES",
    "NODE_TYPES",
    "ChakraNode",
    "ChakraTrace",
    "encode_et",
    "load_chakra",
    "parse_et",
    "parse_json",
    "read_chakra",
    "write_et",
]

NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE",
              4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE"}
_TYPE_NUMBERS = {name: number for number, name in NODE_TYPES.items()}
#: CollectiveCommType -> distsim's collective name (None: not a data collective).
COLLECTIVES: dict[int, str | None] = {
    0: "all_reduce", 1: "reduce", 2: "all_gather", 3: "gather", 4: "scatter",
    5: "broadcast", 6: "alltoall", 7: "reduce_scatter", 8: "reduce_scatter", 9: None}
COMM_TYPE_NAMES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST",
                   "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")

# Node fields: number -> (name, wire type or "ints" for a repeated integer).
_NODE_FIELDS: dict[int, tuple[str, int | str]] = {
    1: ("id", VARINT), 2: ("name", LENGTH), 3: ("type", VARINT), 4: ("ctrl_deps", "ints"),
    5: ("data_deps", "ints"), 6: ("start_time_micros", VARINT),
    7: ("duration_micros", VARINT), 8: ("inputs", LENGTH), 9: ("outputs", LENGTH),
    10: ("attr", LENGTH)}
# AttributeProto value fields: number -> kind; even numbers are lists of the kind before.
_SCALARS = {3: "double", 5: "float", 7: "int32", 9: "int64", 11: "uint32", 13: "uint64",
            15: "sint32", 17: "sint64", 19: "fixed32", 21: "fixed64", 23: "sfixed32",
            25: "sfixed64", 27: "bool", 29: "string", 31: "bytes"}
_WIRE_OF = {"double": FIXED64, "fixed64": FIXED64, "sfixed64": FIXED64, "float": FIXED32,
            "fixed32": FIXED32, "sfixed32": FIXED32, "string": LENGTH, "bytes": LENGTH}


@dataclass(frozen=True, slots=True)
class ChakraNode:
    """One node of a rank's execution graph (times in microseconds as Chakra has them)."""

    id: int
    name: str
    type: int
    ctrl_deps: tuple[int, ...] = ()
    data_deps: tuple[int, ...] = ()
    duration_micros: int = 0
    start_time_micros: int = 0
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def type_name(self) -> str:
        return NODE_TYPES.get(self.type, f"type {self.type}")

    @property
    def deps(self) -> tuple[int, ...]:
        """Every node this one waits for: data, then control dependencies, each once."""
        return tuple(dict.fromkeys((*self.data_deps, *self.ctrl_deps)))

    @property
    def duration_s(self) -> float:
        """The node's duration: distsim's exact ``duration_s`` where written, else
        ``duration_micros``."""
        exact = self.attrs.get("duration_s")
        return float(exact) if isinstance(exact, float) else self.duration_micros * 1e-6

    @property
    def is_cpu_op(self) -> bool:
        return bool(self.attrs.get("is_cpu_op", False))


@dataclass(frozen=True, slots=True)
class ChakraTrace:
    """One rank's ET: ``rank`` from the file name (``name.<rank>.et``) where it says."""

    source: str
    rank: int | None
    version: str
    metadata: Mapping[str, Any]
    nodes: tuple[ChakraNode, ...]


# --------------------------------------------------------------------------- reading


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _scalar(kind: str, f: Field, source: str) -> Any:
    """One attribute value of ``kind`` from a field (after its wire type was checked)."""
    if kind in ("double", "float"):
        if kind == "double":
            return double_of(f, source=source)
        assert isinstance(f.value, int)
        return struct.unpack("<f", f.value.to_bytes(4, "little"))[0]
    if kind in ("string", "bytes"):
        assert isinstance(f.value, bytes)
        return _text(f, source) if kind == "string" else f.value
    assert isinstance(f.value, int)
    value = f.value
    if kind in ("int32", "sfixed32"):
        return _signed(value & 0xFFFFFFFF, 32)
    if kind in ("int64", "sfixed64"):
        return _signed(value, 64)
    if kind in ("sint32", "sint64"):
        return _zigzag(value)
    return bool(value) if kind == "bool" else value


def _text(f: Field, source: str) -> str:
    assert isinstance(f.value, bytes)
    try:
        return f.value.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(f"field {f.number} at byte {f.offset} is not UTF-8 text",
                         source=source) from None


def _expect(f: Field, wire: int, what: str, source: str) -> None:
    if f.wire_type != wire:
        expected = {VARINT: "varint", FIXED64: "fixed64", LENGTH: "length-delimited",
                    FIXED32: "fixed32"}[wire]
        raise ParseError(f"{what} (field {f.number}) at byte {f.offset} is {f.wire_name}, "
                         f"expected {expected}", source=source,
                         hint="not a Chakra ET, or one written with another schema")


def _attribute(data: bytes, offset: int, source: str) -> tuple[str, Any]:
    name, value = "", None
    for f in decode_fields(data, source=source, base=offset):
        if f.number == 1:
            _expect(f, LENGTH, "attribute name", source)
            name = _text(f, source)
        elif f.number in _SCALARS:
            kind = _SCALARS[f.number]
            _expect(f, _WIRE_OF.get(kind, VARINT), f"attribute {name or '?'} ({kind})", source)
            value = _scalar(kind, f, source)
        elif 4 <= f.number <= 32 and f.number % 2 == 0:
            value = _list(_SCALARS[f.number - 1], f, source)
    return name, value


def _list(kind: str, f: Field, source: str) -> list[Any]:
    _expect(f, LENGTH, f"{kind} list", source)
    assert isinstance(f.value, bytes)
    values: list[Any] = []
    for item in decode_fields(f.value, source=source, base=f.offset):
        if item.number != 1:
            continue
        wire = _WIRE_OF.get(kind, VARINT)
        if wire == VARINT:
            values.extend(_scalar(kind, Field(1, VARINT, v, item.offset), source)
                          for v in packed_varints(item, source=source))
        elif item.wire_type == wire:
            values.append(_scalar(kind, item, source))
        else:  # packed fixed-width values
            _expect(item, LENGTH, f"{kind} list item", source)
            assert isinstance(item.value, bytes)
            size = 8 if wire == FIXED64 else 4
            for i in range(0, len(item.value) - size + 1, size):
                raw = int.from_bytes(item.value[i:i + size], "little")
                values.append(_scalar(kind, Field(1, wire, raw, item.offset), source))
    return values


def _node(data: bytes, offset: int, source: str) -> ChakraNode:
    values: dict[str, Any] = {"ctrl_deps": [], "data_deps": [], "attrs": {}}
    for f in decode_fields(data, source=source, base=offset):
        spec = _NODE_FIELDS.get(f.number)
        if spec is None:
            continue  # a field of a newer schema: protobuf readers skip what they don't know
        name, wire = spec
        if wire == "ints":
            values[name].extend(packed_varints(f, source=source))
            continue
        _expect(f, wire, f"node {name}", source)  # type: ignore[arg-type]
        if name == "attr":
            assert isinstance(f.value, bytes)
            key, value = _attribute(f.value, f.offset, source)
            values["attrs"][key] = value
        elif name == "name":
            values[name] = _text(f, source)
        elif wire == VARINT:
            values[name] = f.value
    values.pop("inputs", None)
    values.pop("outputs", None)
    if "id" not in values:
        raise ParseError(f"a node at byte {offset} has no id", source=source)
    return ChakraNode(id=values["id"], name=values.get("name", ""),
                      type=values.get("type", 0), ctrl_deps=tuple(values["ctrl_deps"]),
                      data_deps=tuple(values["data_deps"]),
                      duration_micros=values.get("duration_micros", 0),
                      start_time_micros=values.get("start_time_micros", 0),
                      attrs=check_attrs(values["attrs"], node=values["id"], source=source))


def _rank_of(source: str) -> int | None:
    # At most nine digits: a rank past a billion is no cluster's, and a longer run of
    # digits is a name (int() of 5,000 digits would fail).
    match = re.search(r"\.(\d{1,9})\.(?:et|json)$", os.path.basename(source))
    return int(match.group(1)) if match else None


def parse_et(data: bytes, *, source: str) -> ChakraTrace:
    """A binary ET: GlobalMetadata, then Node messages, each length-delimited."""
    messages = decode_delimited(data, source=source)
    first = next(messages, None)
    if first is None:
        raise ParseError("empty file: a Chakra ET starts with its GlobalMetadata",
                         source=source)
    version, metadata = "", {}
    for f in decode_fields(first[1], source=source, base=first[0]):
        if f.number == 1:
            _expect(f, LENGTH, "metadata version", source)
            version = _text(f, source)
        elif f.number == 2:
            _expect(f, LENGTH, "metadata attr", source)
            assert isinstance(f.value, bytes)
            key, value = _attribute(f.value, f.offset, source)
            metadata[key] = value
    nodes = tuple(_node(message, offset, source) for offset, message in messages)
    version = version or str(metadata.get("schema", ""))
    return ChakraTrace(source, _rank_of(source), version, metadata, nodes)


# --------------------------------------------------------------------------- JSON


def _json_attrs(raw: object, source: str, where: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if raw is None:
        return attrs
    if not isinstance(raw, list):
        raise ParseError(f"{where}: attr must be a list", source=source)
    for item in raw:
        if not isinstance(item, dict) or "name" not in item:
            raise ParseError(f"{where}: an attr without a name", source=source)
        value = next((v for k, v in item.items() if k not in ("name", "docString",
                                                               "doc_string")), None)
        if isinstance(value, dict) and "values" in value:
            value = value["values"]
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value):
            value = int(value)  # protobuf JSON writes 64-bit integers as strings
        attrs[str(item["name"])] = value
    return attrs


def _json_ints(raw: object, source: str, where: str, name: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ParseError(f"expected a list of node ids, got {raw!r}"[:200], source=source,
                         key=f"{where}.{name}")
    return tuple(whole(v, what=f"{name} (node ids)", source=source, key=f"{where}.{name}")
                 for v in raw)


def _json_micros(raw: Any, source: str, key: str) -> int:
    """A time in microseconds: a whole number or a finite number >= 0 (old Chakra JSON
    writes ``runtime`` as a float), whole microseconds as Chakra's ``uint64`` has it."""
    if isinstance(raw, float) and math.isfinite(raw) and 0 <= raw <= MAX_UINT64:
        raw = int(raw)
    return whole(raw, what="a time in microseconds", source=source, key=key)


def _json_node(raw: object, index: int, source: str) -> ChakraNode:
    where = f"node [{index}]"
    if not isinstance(raw, dict):
        raise ParseError(f"{where} is not an object", source=source)

    def get(*names: str) -> Any:
        return next((raw[n] for n in names if n in raw), None)

    ident = get("id", "Id")
    kind = get("type", "NodeType")
    if isinstance(kind, str):
        kind = _TYPE_NUMBERS.get(kind, kind)
    if ident is None:
        raise ParseError(f"{where} has no id", source=source)
    ident = whole(ident, what="id", source=source, key=f"{where}.id")
    if isinstance(kind, bool) or not isinstance(kind, int):
        raise ParseError(f"{where} (id {ident}) has type {kind!r}"[:200], source=source,
                         hint="valid: " + ", ".join(NODE_TYPES.values()))
    name = get("name", "Name")
    if name is not None and not isinstance(name, str):
        raise ParseError(f"the name must be text, got {type(name).__name__}", source=source,
                         key=f"{where}.name")
    attrs = _json_attrs(get("attr"), source, where)
    for key in ("is_cpu_op", "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag",
                "num_ops", "pg_name"):
        if key in raw:
            attrs[key] = raw[key]
    duration = get("durationMicros", "duration_micros", "runtime")
    start = get("startTimeMicros", "start_time_micros")
    return ChakraNode(ident, name or "", kind,
                      _json_ints(get("ctrlDeps", "ctrl_deps"), source, where, "ctrl_deps"),
                      _json_ints(get("dataDeps", "data_deps"), source, where, "data_deps"),
                      _json_micros(0 if duration is None else duration, source,
                                   f"{where}.runtime"),
                      _json_micros(0 if start is None else start, source,
                                   f"{where}.start_time_micros"),
                      check_attrs(attrs, node=ident, source=source))


def parse_json(text: str, *, source: str) -> ChakraTrace:
    """A Chakra ET in JSON (module docstring)."""
    data = load_json(text, source=source)
    if isinstance(data, dict) and "traceEvents" in data:
        raise ParseError("a PyTorch profiler (Kineto) trace, not a Chakra ET", source=source,
                         hint="summarise it with 'distsim trace summary', replay it with "
                              "'distsim validate trace'")
    raw_nodes = (data.get("workload_graph", data.get("nodes")) if isinstance(data, dict)
                 else data)
    if not isinstance(raw_nodes, list):
        raise ParseError("no node list (workload_graph or nodes)", source=source,
                         hint="a Chakra ET in JSON")
    nodes = tuple(_json_node(raw, i, source) for i, raw in enumerate(raw_nodes))
    metadata = {k: v for k, v in data.items() if k not in ("workload_graph", "nodes")
                } if isinstance(data, dict) else {}
    return ChakraTrace(source, _rank_of(source), str(metadata.get("version", "")), metadata,
                       nodes)


def read_chakra(path: str | os.PathLike[str]) -> ChakraTrace:
    """One ET file, binary (``.et``) or JSON (``.json``)."""
    name = os.fspath(path)
    data = read_input_bytes(name, "Chakra ET", error=ParseError,
                            hint="a <name>.<rank>.et file or its JSON form")
    return _parse_chakra(data, name)


def _parse_chakra(data: bytes, name: str) -> ChakraTrace:
    """An ET's bytes, by its name: JSON (``.json``) or binary (else)."""
    if data[:2] == _GZIP_MAGIC:  # read as protobuf, it fails at byte 1 on a wire type
        raise ParseError("gzip-compressed data, not a Chakra ET", source=name,
                         hint="decompress it (gunzip), or give the .tar.gz archive whole")
    if name.endswith(".json"):
        return parse_json(data.decode("utf-8", errors="replace"), source=name)
    return parse_et(data, source=name)


_GZIP_MAGIC = b"\x1f\x8b"
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")


def _read_archive(name: str) -> list[ChakraTrace]:
    """Every ``.et`` / ``.json`` member of a tar archive (Chakra's own test data ships its
    ETs so), in name order, each read into memory within the input bound, never to disk."""
    read: list[ChakraTrace] = []
    try:
        with tarfile.open(name, "r:*") as archive:
            for member in sorted(archive.getmembers(), key=lambda m: m.name):
                if not member.isfile() or not member.name.endswith((".et", ".json")):
                    continue
                source = f"{name}:{member.name}"
                if member.size > MAX_INPUT_BYTES:
                    raise ParseError(f"larger than {MAX_INPUT_BYTES // 2**20} MiB, more than "
                                     "distsim reads", source=source)
                stream = archive.extractfile(member)
                if stream is not None:
                    with stream:
                        read.append(_parse_chakra(stream.read(), source))
    except FileNotFoundError:
        raise ParseError("no Chakra ET file here: the path does not exist",
                         source=name) from None
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise ParseError(f"not a readable tar archive: {error}", source=name) from None
    if not read:
        raise ParseError("no Chakra ET member (.et or .json) in the archive", source=name)
    return read


def load_chakra(paths: Iterable[str | os.PathLike[str]]) -> list[ChakraTrace]:
    """ETs from files and directories (every ``*.et`` / ``*.json`` in them), by rank;
    files whose names carry no rank take the next free one in the order given."""
    traces: list[ChakraTrace] = []
    for path in paths:
        name = os.fspath(path)
        if os.path.isdir(name):
            traces.extend(read_chakra(p) for p in sorted(
                str(p) for p in Path(name).iterdir() if p.suffix in (".et", ".json")))
        elif name.lower().endswith(_TAR_SUFFIXES):
            traces.extend(_read_archive(name))
        else:
            traces.append(read_chakra(name))
    if not traces:
        raise ParseError("no Chakra ET files (.et or .json)", source=", ".join(map(str, paths)))
    files = [t.source for t in traces]
    taken = {t.rank for t in traces if t.rank is not None}
    free = (r for r in range(len(traces) + len(taken)) if r not in taken)
    result = [t if t.rank is not None else ChakraTrace(t.source, next(free), t.version,
                                                       t.metadata, t.nodes) for t in traces]
    ranks = [t.rank for t in result]
    if len(set(ranks)) != len(ranks):
        raise ParseError("two ETs of one rank", source=", ".join(files),
                         hint="name them <name>.<rank>.et")
    return sorted(result, key=lambda t: t.rank or 0)


# --------------------------------------------------------------------------- writing


@functools.lru_cache(maxsize=1024)
def _attribute_name(name: str) -> bytes:
    return encode_bytes(1, name)


def _encode_attribute(name: str, value: Any) -> bytes:
    body = _attribute_name(name)
    if isinstance(value, bool):
        body += encode_varint_field(27, int(value))
    elif isinstance(value, int):
        body += encode_varint_field(9, value)  # int64
    elif isinstance(value, float):
        body += encode_double(3, value)
    elif isinstance(value, str):
        body += encode_bytes(29, value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value):
        body += encode_bytes(28, encode_packed_varints(1, [int(v) for v in value]))
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        body += encode_bytes(10, encode_packed_varints(1, list(value)))  # Int64List
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        body += encode_bytes(30, b"".join(encode_bytes(1, v) for v in value))
    else:
        raise ValueError(f"cannot write attribute {name}={value!r}")
    return body


def _encode_node(node: ChakraNode) -> bytes:
    body = (encode_varint_field(1, node.id) + encode_bytes(2, node.name)
            + encode_varint_field(3, node.type)
            + encode_packed_varints(4, list(node.ctrl_deps))
            + encode_packed_varints(5, list(node.data_deps)))
    if node.start_time_micros:
        body += encode_varint_field(6, node.start_time_micros)
    body += encode_varint_field(7, node.duration_micros)
    for key, value in node.attrs.items():
        body += encode_bytes(10, _encode_attribute(key, value))
    return body


def encode_et(trace: ChakraTrace) -> bytes:
    """The binary ET of ``trace``: its metadata, then its nodes."""
    meta = encode_bytes(1, trace.version) + b"".join(
        encode_bytes(2, _encode_attribute(k, v)) for k, v in trace.metadata.items())
    return encode_delimited(meta) + b"".join(encode_delimited(_encode_node(n))
                                             for n in trace.nodes)


def write_et(trace: ChakraTrace, path: str | os.PathLike[str]) -> None:
    atomic_write_bytes(path, encode_et(trace))
