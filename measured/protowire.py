"""The protobuf wire format, by hand: just what reading and writing Chakra traces needs.

A protobuf message on the wire is a run of *fields*, each a varint *tag*
(``field_number << 3 | wire_type``) then a value: wire type 0 a varint, 1 eight bytes
(fixed64 / double), 2 a varint length then that many bytes (strings, bytes, nested
messages, packed repeated scalars), 5 four bytes (fixed32 / float).  Types 3 and 4
(groups) are deprecated and rejected.  A *length-delimited stream* of messages (as
Chakra's ``.et`` files are) is a varint length before each message.  Facts from the
protobuf encoding guide (protobuf.dev/programming-guides/encoding).

Written here rather than taken from the ``protobuf`` package: reading one file format
needs the four wire types and no generated code, the errors can name the byte offset of
what is wrong, and nothing is added to the install.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from distsim_gpu.simcore.errors import ParseError

__all__ = [
    "FIXED32",
    "FIXED64",
    "LENGTH",
    "VARINT",
    "Field",
    "decode_delimited",
    "decode_fields",
    "double_of",
    "encode_bytes",
    "encode_delimited",
    "encode_double",
    "encode_packed_varints",
    "encode_varint",
    "encode_varint_field",
    "packed_varints",
]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_WIRE_NAMES = {VARINT: "varint", FIXED64: "fixed64", LENGTH: "length-delimited",
               FIXED32: "fixed32"}
# A varint holds at most 64 bits: ten bytes of seven bits.
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class Field:
    """One field as read: its number, wire type, value (an int for varint and the fixed
    types, bytes for length-delimited) and the byte offset of its tag in the file."""

    number: int
    wire_type: int
    value: int | bytes
    offset: int

    @property
    def wire_name(self) -> str:
        return _WIRE_NAMES[self.wire_type]


def _varint(data: bytes, pos: int, end: int, source: str, base: int) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it; ``base`` maps positions to
    file offsets for errors."""
    result = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= end:
            raise ParseError(f"truncated varint at byte {base + pos}", source=source,
                             hint="the file ends inside a number: it was cut short")
        byte = data[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos + i + 1
        shift += 7
    raise ParseError(f"varint longer than {_MAX_VARINT_BYTES} bytes at byte {base + pos}",
                     source=source, hint="not a protobuf stream")


def decode_fields(data: bytes, *, source: str, base: int = 0) -> Iterator[Field]:
    """The fields of one message held in ``data``; ``base`` is its offset in the file."""
    pos, end = 0, len(data)
    while pos < end:
        offset = base + pos
        tag, pos = _varint(data, pos, end, source, base)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ParseError(f"field number 0 at byte {offset}", source=source,
                             hint="not a protobuf message (or an offset error before it)")
        if wire == VARINT:
            value, pos = _varint(data, pos, end, source, base)
            yield Field(number, wire, value, offset)
            continue
        size = {FIXED64: 8, FIXED32: 4}.get(wire)
        if wire == LENGTH:
            size, pos = _varint(data, pos, end, source, base)
        elif size is None:
            raise ParseError(f"field {number} has wire type {wire} at byte {offset}",
                             source=source, hint="valid wire types: 0, 1, 2, 5")
        if pos + size > end:
            raise ParseError(f"field {number} at byte {offset} needs {size} bytes, "
                             f"{end - pos} left", source=source,
                             hint="the message was cut short")
        raw = data[pos:pos + size]
        pos += size
        yield Field(number, wire, raw if wire == LENGTH else int.from_bytes(raw, "little"),
                    offset)


def decode_delimited(data: bytes, *, source: str) -> Iterator[tuple[int, bytes]]:
    """The messages of a length-delimited stream, each as ``(file offset, bytes)``."""
    pos, end = 0, len(data)
    while pos < end:
        size, start = _varint(data, pos, end, source, 0)
        if start + size > end:
            raise ParseError(f"message at byte {pos} claims {size} bytes, {end - start} left",
                             source=source, hint="the file was cut short")
        yield start, data[start:start + size]
        pos = start + size


def packed_varints(field: Field, *, source: str) -> list[int]:
    """A repeated integer field's values: packed (one length-delimited run) or one."""
    if field.wire_type == VARINT:
        assert isinstance(field.value, int)
        return [field.value]
    if field.wire_type != LENGTH:
        raise ParseError(f"field {field.number} at byte {field.offset} is "
                         f"{field.wire_name}, expected a list of integers", source=source)
    assert isinstance(field.value, bytes)
    data, values, pos = field.value, [], 0
    while pos < len(data):
        value, pos = _varint(data, pos, len(data), source, field.offset)
        values.append(value)
    return values


def double_of(field: Field, *, source: str) -> float:
    """A ``double`` field's value."""
    if field.wire_type != FIXED64:
        raise ParseError(f"field {field.number} at byte {field.offset} is "
                         f"{field.wire_name}, expected a double (fixed64)", source=source)
    assert isinstance(field.value, int)
    return float(struct.unpack("<d", field.value.to_bytes(8, "little"))[0])


# --------------------------------------------------------------------------- writing


# One-byte varints, made once: most tags, lengths and ids are small.
_SMALL_VARINTS = tuple(bytes((i,)) for i in range(128))


def encode_varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64; negatives as two's complement) as a varint."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


@functools.lru_cache(maxsize=256)
def _tag(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def encode_varint_field(number: int, value: int) -> bytes:
    return _tag(number, VARINT) + encode_varint(value)


def encode_bytes(number: int, value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return _tag(number, LENGTH) + encode_varint(len(raw)) + raw


def encode_double(number: int, value: float) -> bytes:
    return _tag(number, FIXED64) + struct.pack("<d", value)


def encode_packed_varints(number: int, values: list[int]) -> bytes:
    """A repeated integer field, packed (proto3's default); nothing when empty."""
    if not values:
        return b""
    return encode_bytes(number, b"".join(encode_varint(v) for v in values))


def encode_delimited(message: bytes) -> bytes:
    """One message of a length-delimited stream."""
    return encode_varint(len(message)) + message
