"""The streaming document reader gives what json.loads gives, whatever the chunking, and
names the file and line of what is wrong."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from distsim_gpu.measured.jsonstream import scan_document
from distsim_gpu.simcore.errors import ParseError
from hypothesis import given, settings
from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12)


def scan(text: str, *, compressed: bool = False, chunk: int = 1 << 20) -> tuple[dict, list]:
    items: list = []
    data = text.encode("utf-8")
    if compressed:
        data = gzip.compress(data)
    others = scan_document(io.BytesIO(data), "doc.json", compressed=compressed,
                           on_item=lambda index, value: items.append((index, value)),
                           chunk_chars=chunk)
    return others, items


@settings(max_examples=60, deadline=None)
@given(events=st.lists(json_values, max_size=8),
       others=st.dictionaries(st.sampled_from(["a", "schemaVersion", "deviceProperties"]),
                              json_values, max_size=3),
       chunk=st.integers(1, 40), indent=st.sampled_from([None, 0, 2]))
def test_any_document_any_chunking_reads_as_json_loads(events, others, chunk, indent):
    document = {**others, "traceEvents": events}
    text = json.dumps(document, indent=indent)
    got_others, items = scan(text, chunk=chunk)
    assert [value for _, value in items] == json.loads(text)["traceEvents"]
    assert [index for index, _ in items] == list(range(len(events)))
    assert got_others == {**json.loads(text), "traceEvents": []}


def test_a_number_split_by_a_chunk_boundary_is_read_whole():
    others, items = scan('{"traceEvents": [123456789], "n": 98765}', chunk=4)
    assert items == [(0, 123456789)] and others["n"] == 98765


@pytest.mark.parametrize("number", ["0.5", "-1.25e-7", "3E+2", "10"])
def test_a_number_cut_after_any_character_is_read_whole(number):
    for chunk in (1, 2, 3):
        others, items = scan(f'{{"traceEvents": [{number}], "n": {number}}}', chunk=chunk)
        assert items == [(0, json.loads(number))] and others["n"] == json.loads(number)


def test_gzip_streams_are_read_too():
    others, items = scan('{"traceEvents": [{"ph": "X"}], "x": 1}', compressed=True)
    assert items == [(0, {"ph": "X"})] and others == {"traceEvents": [], "x": 1}


@pytest.mark.parametrize("text, message", [
    ("", "empty file"),
    ("   \n ", "empty file"),
    ("[1, 2]", "expected a JSON object, found a list"),
    ('{"traceEvents": [{"ph": "X", "na', "truncated"),
    ('{"traceEvents": [{"ph": "X"}, ', "truncated"),
    ('{"traceEvents": [1, 2,,]}', "not valid JSON"),
    ('{"traceEvents": [1 2]}', "not valid JSON: expected ',' or ']'"),
    ('{"traceEvents": []} trailing', "not valid JSON: expected the end of the data"),
])
def test_unusable_documents_give_one_clear_error(text, message):
    with pytest.raises(ParseError) as info:
        scan(text)
    assert message in str(info.value) and "doc.json" in str(info.value)


def test_the_error_names_the_line():
    text = '{\n"traceEvents": [\n{"a": 1},\n{"a": 2},\n{"a": ?}\n]}'
    with pytest.raises(ParseError) as info:
        scan(text, chunk=8)
    assert info.value.line == 5


def test_a_value_that_is_not_a_list_is_returned_as_it_is():
    others, items = scan('{"traceEvents": {"not": "a list"}}')
    assert items == [] and others == {"traceEvents": {"not": "a list"}}
