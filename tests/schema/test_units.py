"""Formatting and parsing of the three value kinds (FORMATS.md section 1)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xladev.schema import units


@pytest.mark.parametrize("ns, text", [
    (0, "000.000us"),
    (500, "000.500us"),
    (1_234_500, "001ms234.500us"),
    (369_401_746_001, "06m09s401ms746.001us"),
    (59_999_600_000, "59s999ms600.000us"),  # torch_xla would round the seconds part up to 60
    (60_700_000_000, "01m00s700ms000.000us"),
    (86_400e9 * 3 + 1, "03d00h00m00s000ms000.001us"),
    (3_600e9, "01h00m00s000ms000.000us"),
    (0.4, "000.000us"),
    (2_000.5, "002.000us"),  # rounds half to even at the nanosecond
    (2_001.5, "002.002us"),
    (float("nan"), "nanus"),
])
def test_format_time_examples(ns, text):
    assert units.format_time_ns(ns) == text


@pytest.mark.parametrize("n, text", [
    (4, "4.00B"), (9.29 * 1024, "9.29KB"), (1.54 * 1024**2, "1.54MB"), (1023.994, "1023.99B"),
    (1023.999, "1.00KB"), (1024**2 - 1, "1.00MB"), (5 * 1024**6, "5120.00PB"), (float("nan"), "nanB"), (0, "0.00B"),
])
def test_format_bytes_examples(n, text):
    assert units.format_bytes(n) == text


def test_format_value_and_kind_dispatch():
    assert units.format_value(4) == "4.00"
    assert units.format_value(-0.001) == "0.00"
    assert units.format_kind(units.TIME, 1000) == "001.000us"
    assert units.format_kind(units.BYTES, 2048) == "2.00KB"
    with pytest.raises(ValueError):
        units.format_kind("weight", 1)


@pytest.mark.parametrize("text, ns", [
    ("06m09s401ms746.001us", 369_401_746_001),
    ("191ms81.607us", 191_081_607),          # unpadded microseconds part
    ("001ms32.778us", 1_032_778),
    ("60s700ms000.000us", 60_700_000_000),   # torch_xla's 60 in the seconds part
    ("21s102ms853.173us", 21_102_853_173),
    ("1d2h3m4s5ms6us", ((((24 + 2) * 60 + 3) * 60 + 4) * 1000 + 5) * 1_000_000 + 6_000),
    (" 000.500us ", 500),
    ("1.5us", 1500),
    ("0.0000005us", 0.0005),
])
def test_parse_time_accepts_torch_xla_quirks(text, ns):
    assert units.parse_time(text) == pytest.approx(ns, abs=1e-9)


def test_parse_non_finite_and_errors():
    assert math.isnan(units.parse_time("nanus"))
    assert math.isnan(units.parse_bytes("nanB"))
    assert math.isinf(units.parse_bytes("infB"))
    assert math.isnan(units.parse_value("nan"))
    for bad, parse in (("12ms", units.parse_time), ("abcus", units.parse_time), ("1.2XB", units.parse_bytes),
                       ("", units.parse_value), ("1.2.3", units.parse_value), ("12", units.parse_bytes)):
        with pytest.raises(units.UnitParseError):
            parse(bad)


def test_parse_rates_and_kinds():
    assert units.parse_rate("778ms572.062us / second") == (units.TIME, 778_572_062)
    assert units.parse_rate("1.78MB / second") == (units.BYTES, pytest.approx(1.78 * 1024**2))
    assert units.parse_rate("2.5e+06 / second", units.VALUE) == (units.VALUE, 2.5e6)
    assert units.detect_kind("9.29KB") == units.BYTES
    assert units.detect_kind("nanB") == units.BYTES
    assert units.detect_kind("4.00") == units.VALUE
    assert units.parse_kind("4.00") == (units.VALUE, 4.0)


_finite_ns = st.floats(min_value=0, max_value=1e17, allow_nan=False)
_finite_bytes = st.floats(min_value=0, max_value=1e20, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(_finite_ns)
def test_time_round_trip_is_exact_to_the_nanosecond(ns):
    text = units.format_time_ns(ns)
    assert units.parse_time(text) == float(round(ns))
    assert units.format_time_ns(units.parse_time(text)) == text


@settings(max_examples=400, deadline=None)
@given(_finite_ns, _finite_ns)
def test_time_format_is_monotonic(a, b):
    low, high = sorted((a, b))
    assert units.parse_time(units.format_time_ns(low)) <= units.parse_time(units.format_time_ns(high))


@settings(max_examples=400, deadline=None)
@given(_finite_bytes)
def test_bytes_round_trip_within_print_precision(n):
    text = units.format_bytes(n)
    mantissa = float(text.rstrip("BKMGTP"))
    assert mantissa < 1024.0 or text.endswith("PB")
    unit_size = 1024.0 ** units.BYTE_UNITS.index(text[len(f"{mantissa:.2f}"):])
    assert abs(units.parse_bytes(text) - n) <= 0.005 * unit_size * (1 + 1e-9)
    assert units.format_bytes(units.parse_bytes(text)) == text


@settings(max_examples=400, deadline=None)
@given(_finite_bytes, _finite_bytes)
def test_bytes_format_is_monotonic(a, b):
    low, high = sorted((a, b))
    assert units.parse_bytes(units.format_bytes(low)) <= units.parse_bytes(units.format_bytes(high))


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_value_round_trip(v):
    text = units.format_value(v)
    assert abs(units.parse_value(text) - v) <= 0.005 + 1e-9 * abs(v)
