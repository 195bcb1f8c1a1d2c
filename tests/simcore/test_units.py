"""Unit strings at the edges: every family parses to SI floats, bad input names its place."""

from __future__ import annotations

import math

import pytest
from distsim_gpu.simcore.errors import DistsimError, ParseError
from distsim_gpu.simcore.units import (
    bandwidth_text,
    format_bandwidth,
    format_bytes,
    format_duration,
    parse_bandwidth,
    parse_count,
    parse_duration,
    parse_flops,
    parse_latency,
    parse_size,
)
from hypothesis import given
from hypothesis import strategies as st

# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8 B", 8.0),
        ("1 kB", 1e3),
        ("1 KB", 1e3),
        ("64 MB", 64e6),
        ("2 GB", 2e9),
        ("1 TB", 1e12),
        ("1 KiB", 2.0**10),
        ("3 MiB", 3 * 2.0**20),
        ("8 GiB", 8 * 2.0**30),
        ("1 TiB", 2.0**40),
        ("1.5 GiB", 1.5 * 2.0**30),
        ("8GiB", 8 * 2.0**30),
        ("  8 GiB  ", 8 * 2.0**30),
        ("1e3 B", 1e3),
        ("128", 128.0),
    ],
)
def test_size_decimal_and_binary_prefixes(text, expected):
    assert parse_size(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8.0), ("1K", 2.0**10), ("1k", 2.0**10), ("256M", 256 * 2.0**20),
     ("1G", 2.0**30), ("2T", 2 * 2.0**40)],
)
def test_size_nccl_tests_bare_suffixes_are_binary(text, expected):
    # nccl-tests: `-b 8 -e 1G` means 8 bytes to 2^30 bytes.
    assert parse_size(text) == expected


# ---------------------------------------------------------------- bandwidth


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400 Gbps", 5e10),  # 400e9 bit/s / 8
        ("400 Gb/s", 5e10),
        ("400 Gbit/s", 5e10),
        ("100 Mbps", 1.25e7),
        ("1 Tbps", 1.25e11),
        ("450 GB/s", 4.5e11),
        ("450 GBps", 4.5e11),
        ("25 GiB/s", 25 * 2.0**30),
        ("1 MB/s", 1e6),
        ("3e9 B/s", 3e9),
    ],
)
def test_bandwidth_bytes_and_bit_rates(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


# ---------------------------------------------------------------- time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 us", 2e-6),
        ("2 µs", 2e-6),  # U+00B5 MICRO SIGN
        ("1.5 ms", 1.5e-3),
        ("3 s", 3.0),
        ("3 sec", 3.0),
        ("500 ns", 5e-7),
        ("1 min", 60.0),
        ("2 h", 7200.0),
        ("0.25", 0.25),
    ],
)
def test_duration_units(text, expected):
    assert parse_duration(text) == pytest.approx(expected, rel=1e-15)


def test_duration_greek_mu_microseconds():
    # The unit table lists "μs" (U+03BC GREEK SMALL LETTER MU), the symbol most
    # keyboards and editors produce; it must read like "µs" (U+00B5) and "us".
    assert parse_duration("2 \u03bcs") == pytest.approx(2e-6)


# ---------------------------------------------------------------- compute


@pytest.mark.parametrize(
    ("text", "expected"),
    [("312 TFLOP/s", 3.12e14), ("989.5 TFLOPS", 9.895e14), ("1 PFLOP/s", 1e15),
     ("19.5 Gflop/s", 1.95e10), ("1e12", 1e12)],
)
def test_flops_units(text, expected):
    assert parse_flops(text) == pytest.approx(expected, rel=1e-15)


# ---------------------------------------------------------------- plain numbers


@pytest.mark.parametrize("parse", [parse_size, parse_bandwidth, parse_duration, parse_flops])
@pytest.mark.parametrize("number", [3, 2.5, 1e-9, 4e11])
def test_plain_numbers_pass_through_as_si(parse, number):
    if parse is parse_bandwidth and (isinstance(number, int) or number < 1):
        return  # a whole-number bandwidth needs a unit, and none is below 1 B/s: see below
    result = parse(number)
    assert result == number
    assert type(result) is float


@pytest.mark.parametrize("value", [400, 0, 3, "400", "4e11", " 25 "])
def test_a_bandwidth_without_a_unit_is_refused_with_the_units(value):
    """``--set nic.bandwidth=400`` read as 400 B/s gave a 655,360 s all-reduce."""
    with pytest.raises(ParseError, match="a bandwidth needs a unit") as info:
        parse_bandwidth(value, key="nic.bandwidth", source="s.yaml")
    assert str(info.value).startswith("s.yaml: nic.bandwidth: ")
    # The SI figure the hint gives is the examples' own: 400 Gb/s = 50 GB/s = 5e10 B/s.
    assert "400Gb/s or 50GB/s (a figure already in SI: '5e10 B/s')" in str(info.value)
    assert parse_bandwidth("400Gb/s") == parse_bandwidth("50GB/s") == parse_bandwidth("5e10 B/s")


@pytest.mark.parametrize("value", [7, "7", " 5 ", -3])
def test_a_latency_as_a_whole_number_is_refused_with_the_units(value):
    """``base_latency: {ring: {ll: 7}}`` read as 7 s gave a 7-second all-reduce."""
    with pytest.raises(ParseError, match="a latency needs a unit") as info:
        parse_latency(value, key="comm.base_latency.ring.ll", source="c.yaml")
    assert "'2e-6 s'" in str(info.value)


@pytest.mark.parametrize(("value", "seconds"), [
    (0, 0.0), ("0", 0.0), (1e-6, 1e-6), ("1e-6", 1e-6), (2.5e-7, 2.5e-7), ("2 us", 2e-6),
    ("0.5us", 5e-7), ("1 ms", 1e-3)])
def test_a_latency_takes_a_unit_a_float_or_zero(value, seconds):
    assert parse_latency(value) == pytest.approx(seconds, rel=1e-15)


@given(st.floats(min_value=1.0, max_value=1e15))
def test_a_bandwidth_with_its_unit_written_back_reads_the_same(rate):
    assert parse_bandwidth(bandwidth_text(rate)) == rate


@pytest.mark.parametrize("text", ["1e-30 Gb/s", "1e30 Gb/s", "0.5 B/s", 1e19])
def test_a_bandwidth_no_link_has_is_refused_with_the_range(text):
    with pytest.raises(ParseError, match="outside any link's") as info:
        parse_bandwidth(text, key="links.ib.bandwidth", source="c.yaml")
    assert "between 1 B/s and 1 EB/s" in str(info.value)
    assert "links.ib.bandwidth" in str(info.value)


def test_the_ends_of_the_bandwidth_range_are_read():
    assert parse_bandwidth("1 B/s") == 1.0
    assert parse_bandwidth("1000 PB/s") == 1e18


@pytest.mark.parametrize(("text", "meant"), [
    ("400 gbps", "'400 GBps' or '400 Gbps'"), ("8 gib", "'8 GiB'"), ("1 kib", "'1 KiB'")])
def test_a_unit_in_the_wrong_case_is_named(text, meant):
    parse = parse_bandwidth if "bps" in text else parse_size
    with pytest.raises(ParseError, match="case-sensitive") as info:
        parse(text)
    assert f"did you mean {meant}?" in str(info.value)


def test_a_petabyte_is_read_as_nccl_tests_writes_it():
    assert parse_size("1P") == 2.0**50 == parse_size("1 PiB")


def test_zero_is_a_valid_size_and_duration():
    assert parse_size(0) == 0.0
    assert parse_size("0 GiB") == 0.0
    assert parse_duration("0 us") == 0.0


# ---------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (parse_size, "fast"),
        (parse_size, ""),
        (parse_size, "GiB"),
        (parse_size, "1..2 GB"),
        (parse_size, "8 GB/s"),  # a bandwidth is not a size
        (parse_size, "8 gib"),
        (parse_bandwidth, "400 Gbit"),
        (parse_bandwidth, "10 GB/ss"),
        (parse_bandwidth, "8 GiB"),
        (parse_duration, "2 fortnights"),
        (parse_duration, "1.5ms later"),
        (parse_flops, "312 TFLOP"),
        (parse_flops, "nan"),
        (parse_size, "inf"),
    ],
)
def test_unreadable_strings_are_parse_errors_with_a_valid_example(parse, value):
    with pytest.raises(ParseError) as info:
        parse(value, key="cluster.nodes.gpu.hbm", source="cluster.yaml")
    text = str(info.value)
    assert text.startswith("cluster.yaml: cluster.nodes.gpu.hbm: ")
    assert repr(value) in text
    assert "e.g." in text
    assert info.value.hint


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (parse_size, "-1 GB"),
        (parse_size, -4),
        (parse_bandwidth, "-400 Gbps"),
        (parse_duration, "-2 us"),
        (parse_flops, -1.0),
    ],
)
def test_negative_quantities_are_rejected(parse, value):
    with pytest.raises(ParseError) as info:
        parse(value, key="k", source="s.yaml")
    assert "s.yaml: k: " in str(info.value)
    assert "e.g." in str(info.value)


@pytest.mark.parametrize("value", [0.0, "0 GB/s", "0 Gbps"])
def test_zero_bandwidth_is_rejected(value):
    with pytest.raises(ParseError, match="positive") as info:
        parse_bandwidth(value, key="links.nvlink.bandwidth", source="dgx.yaml")
    assert str(info.value).startswith("dgx.yaml: links.nvlink.bandwidth: ")
    assert "e.g." in str(info.value)


def test_zero_flops_is_rejected():
    with pytest.raises(ParseError, match="positive"):
        parse_flops(0)


def test_zero_size_rejected_when_disallowed():
    with pytest.raises(ParseError, match="positive"):
        parse_size("0 B", allow_zero=False)


@pytest.mark.parametrize("parse", [parse_size, parse_bandwidth, parse_duration, parse_flops])
@pytest.mark.parametrize("value", [True, False])
def test_bools_are_not_numbers(parse, value):
    with pytest.raises(ParseError) as info:
        parse(value, key="x.y", source="--set")
    assert str(info.value).startswith("--set: x.y: ")
    assert "e.g." in str(info.value)


@pytest.mark.parametrize("parse", [parse_size, parse_bandwidth, parse_duration, parse_flops])
@pytest.mark.parametrize("value", [None, [1], {"a": 1}, b"8 GiB"])
def test_non_string_non_number_is_rejected(parse, value):
    with pytest.raises(ParseError) as info:
        parse(value, key="x.y", source="run.yaml")
    assert str(info.value).startswith("run.yaml: x.y: ")
    assert "e.g." in str(info.value)


@pytest.mark.parametrize("value", [math.nan, -math.inf, "1e400 B"])
def test_non_finite_quantities_are_rejected_with_a_valid_example(value):
    # DESIGN.md "Errors": every rejection says what would be valid.
    with pytest.raises(ParseError) as info:
        parse_size(value, key="model.params", source="model.yaml")
    text = str(info.value)
    assert text.startswith("model.yaml: model.params: ")
    assert "finite" in text
    assert "e.g." in text


def test_parse_error_without_place_is_just_message_and_hint():
    with pytest.raises(ParseError) as info:
        parse_size("lots")
    text = str(info.value)
    assert text.startswith("cannot read 'lots' as a size (")
    assert isinstance(info.value, DistsimError)


def test_unknown_unit_hint_lists_the_units():
    with pytest.raises(ParseError) as info:
        parse_bandwidth("5 GBs")
    assert "GB/s" in info.value.hint
    assert "Gbps" in info.value.hint


# ---------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (2**30, "1 GiB"),
        (8 * 2**30, "8 GiB"),
        (2**40, "1 TiB"),
    ],
)
def test_format_bytes_binary_prefixes(size, text):
    assert format_bytes(size) == text


@pytest.mark.parametrize("size", [1000, 1000 * 2**20])
def test_format_bytes_never_prints_exponent_notation(size):
    # 1000 ≤ value < 1024 in a unit is an ordinary size (e.g. 1000 MiB of activations).
    text = format_bytes(size)
    assert "e+" not in text, text


@pytest.mark.parametrize("size", [1, 1000, 12345, 2**20 + 7, 3.3e9, 2**40])
def test_format_bytes_round_trips_through_parse_size(size):
    assert parse_size(format_bytes(size)) == pytest.approx(size, rel=5e-3)


@pytest.mark.parametrize(
    ("rate", "text"),
    [(4.5e11, "450 GB/s"), (5e10, "50 GB/s"), (2.5e7, "0.025 GB/s"), (9e11, "900 GB/s")],
)
def test_format_bandwidth_decimal_gb_per_s(rate, text):
    assert format_bandwidth(rate) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (3.0, "3 s"),
        (1.5e-3, "1.5 ms"),
        (2e-6, "2 us"),
        (5e-10, "0.5 ns"),
        (0.0, "0 s"), (1e-13, "0 s"),
        (-1.5e-3, "-1.5 ms"),
        (12.25, "12.25 s"),
    ],
)
def test_format_duration_picks_readable_unit(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [2e-9, 7.5e-6, 0.0123, 4.0])
def test_format_duration_round_trips_through_parse_duration(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-3)


@pytest.mark.parametrize(("value", "count"), [
    (40_000_000, 40_000_000), (4e7, 40_000_000), ("4e7", 40_000_000), ("40M", 40_000_000),
    ("40 M", 40_000_000), ("1.5M", 1_500_000), ("2k", 2_000), ("1G", 10**9),
])
def test_parse_count_reads_decimal_suffixes(value, count):
    # A count of parameters is decimal: "40M" is Megatron's 4e7, not nccl-tests' 40 * 2^20.
    got = parse_count(value)
    assert got == count and isinstance(got, int)


@pytest.mark.parametrize(("value", "says"), [
    (1.5, "must be whole"), ("1.5", "must be whole"), ("40MB", "cannot read"),
    ("40MiB", "cannot read"), (0, "positive"), (-3, "positive"), (True, "expected a count"),
])
def test_parse_count_refuses_what_is_no_whole_count(value, says):
    with pytest.raises(ParseError, match=says) as caught:
        parse_count(value, key="parallelism.bucket_params", source="s.yaml")
    assert "parallelism.bucket_params" in str(caught.value)
