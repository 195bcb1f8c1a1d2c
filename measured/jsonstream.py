"""Read a large trace document one event at a time: memory bounded by one event, not the file.

A profiler trace is one JSON object whose ``traceEvents`` list holds almost all of its
bytes (hundreds of MB for a long job).  :func:`scan_document` walks that object from a
(possibly gzip-compressed) byte stream, decodes the other top-level values whole (they are
small: device properties, distributed info, metadata), and hands each element of the
event list to a callback as soon as it is decoded, so a caller that keeps a compact
record per event never holds the document.  Decoding is :class:`json.JSONDecoder`'s, on
a sliding text buffer that grows only when a single value spans it.

Every way a file can be unusable raises :class:`~simcore.errors.ParseError` naming the
source: empty, not UTF-8, not gzip, truncated (the data ends inside a value, or a gzip
stream ends early), or not valid JSON (with the line), nested deeper than Python's
stack allows, or one value longer than ``MAX_VALUE_CHARS`` (256 Mi characters).  Whole
numbers longer than 64 digits are read as floats (see ``_parse_int``), so a reader
checking that a number is finite refuses what is not.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable
from typing import IO, Any

from distsim_gpu.simcore.errors import ParseError

__all__ = ["CHUNK_CHARS", "MAX_VALUE_CHARS", "scan_document"]

CHUNK_CHARS = 1 << 20
# A trace event is kilobytes; the longest value the window may grow to hold.  It bounds
# what a file (a small .gz that inflates to gigabytes of one string) makes us allocate.
MAX_VALUE_CHARS = 256 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# Whole numbers of more than this many digits are read as floats (so one of 400 digits is
# infinite, and refused by the reader that wanted a finite number): Python will not
# convert more than 4,300 digits to an int, and no trace field needs more than twenty.
_MAX_INT_DIGITS = 64


def _parse_int(text: str) -> int | float:
    return int(text) if len(text) <= _MAX_INT_DIGITS else float(text)


_DECODER = json.JSONDecoder(parse_int=_parse_int)
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_HINT = "expected a PyTorch profiler (Kineto) Chrome trace"


class _Buffer:
    """A window on the text: ``text[pos:]`` is what is not consumed yet."""

    def __init__(self, read: Callable[[int], str], source: str, chunk_chars: int) -> None:
        self.read = read
        self.chunk_chars = chunk_chars
        self.source = source
        self.text = ""
        self.pos = 0
        self.eof = False
        self.lines_before = 0  # newlines in text already dropped from the window

    def fill(self) -> bool:
        """Read more text (at least as much as the window holds); False at the end."""
        if self.eof:
            return False
        if len(self.text) - self.pos > MAX_VALUE_CHARS:  # one value spans all of it
            line = self.lines_before + self.text.count("\n", 0, self.pos) + 1
            raise ParseError(f"one JSON value is longer than {MAX_VALUE_CHARS >> 20} Mi "
                             "characters: not a trace event", source=self.source, line=line,
                             hint="a gzip bomb, or not a trace")
        chunk = self.read(max(self.chunk_chars, len(self.text) - self.pos))
        if not chunk:
            self.eof = True
            return False
        self.lines_before += self.text.count("\n", 0, self.pos)
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-whitespace character, not consumed ('' at the end of the data)."""
        pos = self.pos
        if pos < len(self.text) and self.text[pos] not in " \t\n\r":
            return self.text[pos]  # the common case, without the regex
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self.fill():
                return self.text[self.pos:self.pos + 1]

    def value(self) -> Any:
        """Decode the next JSON value."""
        self.peek()
        while True:  # (a value ending exactly at the window's end is decoded again whole)
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as error:
                if self.fill():
                    continue
                raise self.error(error) from None
            except RecursionError:  # the decoder recurses per level: arrays 100,000 deep
                line = self.lines_before + self.text.count("\n", 0, self.pos) + 1
                raise ParseError("not valid JSON for a trace: nested too deeply",
                                 source=self.source, line=line, hint=_HINT) from None
            if self._may_continue(value, end) and self.fill():
                continue  # the value may go on in the next chunk: decode it again whole
            self.pos = end
            return value

    def _may_continue(self, value: Any, end: int) -> bool:
        """Whether text not yet read could extend the value decoded up to ``end``: it ends
        the window, or it is a number followed only by number characters ("0" of "0.5"
        when the window ends at the point)."""
        if end == len(self.text):
            return True
        if type(value) not in (int, float):
            return False
        rest = self.text[end:]
        return len(rest) < 32 and all(c in _NUMBER_CHARS for c in rest)

    def error(self, error: json.JSONDecodeError | None = None, *,
              expected: str | None = None) -> ParseError:
        """The ParseError for malformed or truncated data at the current position."""
        at = error.pos if error is not None else self.pos
        cut = at >= len(self.text.rstrip()) or (error is not None
                                                 and error.msg.startswith("Unterminated"))
        if cut and self.eof:
            return ParseError("truncated (the data ends inside a value)", source=self.source,
                              hint="the file was cut short; profile again or copy it again")
        line = self.lines_before + self.text.count("\n", 0, at) + 1
        what = error.msg if error is not None else f"expected {expected}"
        return ParseError(f"not valid JSON: {what}", source=self.source, line=line)

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.error(expected=repr(char))
        self.pos += 1


def _scan(buffer: _Buffer, list_key: str, on_item: Callable[[int, Any], None]) -> dict[str, Any]:
    first = buffer.peek()
    if not first:
        raise ParseError("empty file", source=buffer.source, hint=_HINT)
    if first != "{":
        value = buffer.value()
        raise ParseError(f"expected a JSON object, found a {type(value).__name__}",
                         source=buffer.source, hint="a Kineto trace is {\"traceEvents\": [...]}")
    buffer.pos += 1
    others: dict[str, Any] = {}
    if buffer.peek() == "}":
        buffer.pos += 1
    else:
        while True:
            key = buffer.value()
            if not isinstance(key, str):
                raise buffer.error(expected="a key string")
            buffer.expect(":")
            if key == list_key and buffer.peek() == "[":
                buffer.pos += 1
                others[key] = _scan_list(buffer, on_item)
            else:
                others[key] = buffer.value()
            following = buffer.peek()
            buffer.pos += 1
            if following == "}":
                break
            if following != ",":
                buffer.pos -= 1
                raise buffer.error(expected="',' or '}'")
    if buffer.peek():
        raise buffer.error(expected="the end of the data")
    return others


def _scan_list(buffer: _Buffer, on_item: Callable[[int, Any], None]) -> list[Any]:
    """Hand each element to ``on_item``; return an empty list standing for it."""
    if buffer.peek() == "]":
        buffer.pos += 1
        return []
    index = 0
    while True:
        on_item(index, buffer.value())
        index += 1
        following = buffer.peek()
        buffer.pos += 1
        if following == "]":
            return []
        if following != ",":
            buffer.pos -= 1
            raise buffer.error(expected="',' or ']'")


def scan_document(stream: IO[bytes], source: str, *, compressed: bool,
                  on_item: Callable[[int, Any], None], list_key: str = "traceEvents",
                  chunk_chars: int = CHUNK_CHARS) -> dict[str, Any]:
    """Walk one JSON object from ``stream``, calling ``on_item(index, value)`` for each
    element of its ``list_key`` list; return the object's other members (``list_key``
    maps to ``[]`` when it was a list — its elements went to the callback — and to the
    value itself otherwise).  Text is read ``chunk_chars`` at a time."""
    raw: IO[bytes] = gzip.GzipFile(fileobj=stream, mode="rb") if compressed else stream
    text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
    try:
        return _scan(_Buffer(text.read, source, max(1, chunk_chars)), list_key, on_item)
    except UnicodeDecodeError as error:
        raise ParseError(f"not UTF-8 text: {error.reason}", source=source,
                         hint="expected JSON (or gzip-compressed JSON ending in .gz)") from None
    except EOFError:
        raise ParseError("truncated gzip data (compressed file ended early)",
                         source=source) from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise ParseError(f"not readable gzip data: {error}", source=source) from None
    finally:
        text.detach()
