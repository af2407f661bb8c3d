"""Parse and format the three value kinds of a PyTorch/XLA metrics report.

A metrics report prints every value in one of three kinds (FORMATS.md section 1):

* time: nanoseconds printed as zero-padded parts, ``06m09s401ms746.001us``;
* bytes: divided by 1024 while large, two decimals, ``1.54MB``;
* plain values: two decimals, ``4.00``.

The formatters here are exact: a time is rounded once, to the nanosecond, and then split with
integer arithmetic, so ``59.9996 s`` prints as ``59s999ms600.000us`` and never as torch_xla's
``60s...``. The parsers accept everything torch_xla prints, quirks included: unpadded parts
(``191ms81.607us``), ``60`` in the seconds part, ``nan`` values with any unit and rates written
as ``X / second``.

`compact_time_ns` is the short form screens use (``4.56 ms``); bytes print one way everywhere.
This module imports only the standard library; the metrics registry, the report and the TUI all
format from here.
"""

from __future__ import annotations

import math
import re

from xladev.errors import XladevError

__all__ = [
    "UnitParseError",
    "format_time_ns",
    "format_bytes",
    "format_value",
    "format_kind",
    "parse_time",
    "parse_bytes",
    "parse_memory_size",
    "MEMORY_SIZE_FORMS",
    "parse_value",
    "parse_kind",
    "detect_kind",
    "parse_rate",
    "BYTE_UNITS",
    "TIME",
    "BYTES",
    "VALUE",
    "COUNT",
    "compact_time_ns",
    "compact_value",
]

TIME = "time"
BYTES = "bytes"
VALUE = "value"
COUNT = "counter"  # a counter, not a metric: an integer without unit

BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")

# (suffix, nanoseconds per unit, zero-padded width) for every part above microseconds.
_TIME_PARTS = (
    ("d", 86_400_000_000_000, 2),
    ("h", 3_600_000_000_000, 2),
    ("m", 60_000_000_000, 2),
    ("s", 1_000_000_000, 2),
    ("ms", 1_000_000, 3),
)

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_TIME_RE = re.compile(
    r"([-+]?)(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?(\d+)(?:\.(\d*))?us"
)
_NON_FINITE_RE = re.compile(r"([-+]?)(nan|inf(?:inity)?)", re.IGNORECASE)
_BYTES_RE = re.compile(r"([-+]?" + _NUMBER + r"|[-+]?nan|[-+]?inf)\s*(B|KB|MB|GB|TB|PB)", re.IGNORECASE)
_PLAIN_RE = re.compile(r"[-+]?" + _NUMBER)


class UnitParseError(XladevError, ValueError):
    """Raised when a value text does not follow the grammar of its kind."""


def format_time_ns(ns: float) -> str:
    """Formats a duration the way a metrics report prints it, exactly.

    Args:
      ns: the duration in nanoseconds.

    Returns:
      Text such as ``000.500us``, ``001ms234.500us`` or ``06m09s401ms746.001us``: parts from the
      first non-zero one down to microseconds with three decimals. ``nan`` prints as ``nanus``.
    """
    if math.isnan(ns):
        return "nanus"
    if math.isinf(ns):
        return ("-" if ns < 0 else "") + "infus"
    remaining = round(abs(ns))
    sign = "-" if ns < 0 and remaining else ""
    parts = []
    for suffix, scale, width in _TIME_PARTS:
        count, remaining = divmod(remaining, scale)
        if count or parts:
            parts.append(f"{count:0{width}d}{suffix}")
    micros, nanos = divmod(remaining, 1000)
    parts.append(f"{micros:03d}.{nanos:03d}us")
    return sign + "".join(parts)


def format_bytes(n: float) -> str:
    """Formats a byte count the way a metrics report prints it.

    The unit is the largest of ``B KB MB GB TB PB`` that keeps the printed number of that unit
    under 1024.00 (torch_xla may print ``1024.00KB``; this never does).

    Args:
      n: the number of bytes.

    Returns:
      Text such as ``4.00B``, ``9.29KB`` or ``1.54MB``; ``nanB`` for nan, ``infB`` for infinity.
    """
    if math.isnan(n):
        return "nanB"
    if math.isinf(n):
        return ("-" if n < 0 else "") + "infB"
    sign = "-" if n < 0 else ""
    mantissa = abs(n)
    unit = 0
    while unit + 1 < len(BYTE_UNITS) and float(f"{mantissa:.2f}") >= 1024.0:
        mantissa /= 1024.0
        unit += 1
    text = f"{mantissa:.2f}"
    if sign and float(text) == 0.0:
        sign = ""
    return f"{sign}{text}{BYTE_UNITS[unit]}"


def compact_time_ns(ns: float | None) -> str:
    """A short duration for a screen: ``850 ns``, ``12.3 µs``, ``4.56 ms``, ``1.23 s``, ``2m05s``; ``-`` for None."""
    if ns is None:
        return "-"
    ns = float(ns)
    if math.isnan(ns) or math.isinf(ns):
        return "-" if math.isnan(ns) else ("-inf" if ns < 0 else "inf")
    if ns < 0:
        return "-" + compact_time_ns(-ns)
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.3g} ms"
    if ns < 60e9:
        return f"{ns / 1e9:.3g} s"
    minutes, seconds = divmod(int(ns / 1e9), 60)
    return f"{minutes}m{seconds:02d}s"


_COMPACT_UNITS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_compact_time(text: str) -> float | None:
    """Nanoseconds of a `compact_time_ns` text (``850 ns``, ``4.56 ms``, ``2m05s``); None when it is not one."""
    text = text.strip()
    if "m" in text and text.endswith("s") and text[:-1].replace("m", "", 1).isdigit():
        minutes, seconds = text[:-1].split("m", 1)
        return (int(minutes) * 60 + int(seconds)) * 1e9
    number, _, unit = text.partition(" ")
    try:
        return float(number) * _COMPACT_UNITS[unit]
    except (KeyError, ValueError):
        return None


def compact_value(kind: str, value: float | None) -> str:
    """A value of any kind for a screen: compact times, report-style bytes, integers with separators."""
    if value is None:
        return "-"
    if kind == TIME:
        return compact_time_ns(value)
    if kind == BYTES:
        return format_bytes(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def format_value(v: float) -> str:
    """Formats a plain metric value with two decimals, as in ``4.00``.

    Args:
      v: the value.

    Returns:
      The text; ``nan`` and ``inf`` print as such.
    """
    text = f"{v:.2f}"
    return "0.00" if text == "-0.00" else text


def format_kind(kind: str, v: float) -> str:
    """Formats ``v`` with the formatter of ``kind`` (``time``, ``bytes`` or ``value``).

    Args:
      kind: one of TIME, BYTES, VALUE.
      v: the value in base units (nanoseconds, bytes or plain).

    Returns:
      The formatted text.

    Raises:
      ValueError: for an unknown kind.
    """
    if kind == TIME:
        return format_time_ns(v)
    if kind == BYTES:
        return format_bytes(v)
    if kind == VALUE:
        return format_value(v)
    raise ValueError(f"unknown value kind {kind!r}")


def parse_time(text: str) -> float:
    """Parses a time as printed by a metrics report into nanoseconds.

    Args:
      text: text such as ``06m09s401ms746.001us``; unpadded parts, ``60`` seconds and ``nanus``
        are accepted, surrounding blanks are ignored.

    Returns:
      The duration in nanoseconds (exact for three or fewer decimals of microseconds).

    Raises:
      UnitParseError: when the text is not a time.
    """
    text = text.strip()
    match = _TIME_RE.fullmatch(text)
    if match is None:
        if text.lower().endswith("us"):
            special = _NON_FINITE_RE.fullmatch(text[:-2])
            if special is not None:
                return float(special.group(1) + special.group(2))
        raise UnitParseError(f"not a time value: {text!r}")
    sign, days, hours, minutes, seconds, millis, micros, fraction = match.groups()
    total = (
        ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60 + int(seconds or 0)
    ) * 1000 + int(millis or 0)
    total = (total * 1000 + int(micros)) * 1000
    if fraction:
        if len(fraction) <= 3:
            total += int(fraction.ljust(3, "0"))
        else:
            value = float(total) + float("0." + fraction) * 1000.0
            return -value if sign == "-" else value
    return float(-total if sign == "-" else total)


def parse_bytes(text: str) -> float:
    """Parses a byte count such as ``1.54MB`` or ``nanB`` into bytes.

    Args:
      text: the printed value; surrounding blanks are ignored, units are case-insensitive.

    Returns:
      The number of bytes (nan for ``nanB``).

    Raises:
      UnitParseError: when the text is not a byte count.
    """
    match = _BYTES_RE.fullmatch(text.strip())
    if match is None:
        raise UnitParseError(f"not a byte value: {text!r}")
    number, unit = match.groups()
    scale = 1024.0 ** BYTE_UNITS.index(unit.upper())
    return float(number) * scale


# A memory size written by a user (XLADEV_DEVICE_MEMORY_LIMIT): plain bytes, or a number with a unit. KB, MB, GB
# and TB are powers of 1024, as PyTorch/XLA's metrics and "Post Compilation Analysis" print them; KiB... the same.
MEMORY_SIZE_FORMS = "plain bytes (2147483648), or a number with B, KB, MB, GB, TB or KiB, MiB, GiB, TiB (2GB, 512MiB, 1.5GB)"
_MEMORY_SIZE_RE = re.compile(r"(" + _NUMBER + r")\s*(?:([KMGT])I?B|B)?", re.IGNORECASE)


def parse_memory_size(text: str) -> int:
    """Parses a memory size such as ``2GB``, ``512MiB`` or ``1073741824`` into bytes.

    Args:
      text: the size; blanks around it and between number and unit are ignored, units are case-insensitive.

    Returns:
      The number of bytes, rounded down to a whole byte.

    Raises:
      UnitParseError: the text is not a size in one of `MEMORY_SIZE_FORMS`, or it is zero.
    """
    match = _MEMORY_SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise UnitParseError(f"not a memory size: {text!r}; expected {MEMORY_SIZE_FORMS}")
    number, prefix = match.groups()
    size = int(float(number) * 1024 ** ("KMGT".index(prefix.upper()) + 1 if prefix else 0))
    if size <= 0:
        raise UnitParseError(f"a memory size must be at least one byte, got {text!r}; expected {MEMORY_SIZE_FORMS}")
    return size


def parse_value(text: str) -> float:
    """Parses a plain value such as ``4.00``, ``1.2e+06`` or ``nan``.

    Args:
      text: the printed value; surrounding blanks are ignored.

    Returns:
      The value.

    Raises:
      UnitParseError: when the text is not a number.
    """
    stripped = text.strip()
    if _PLAIN_RE.fullmatch(stripped) or _NON_FINITE_RE.fullmatch(stripped):
        return float(stripped)
    raise UnitParseError(f"not a number: {text!r}")


def detect_kind(text: str) -> str:
    """Tells which kind a printed value is, from its unit suffix.

    Args:
      text: a printed value.

    Returns:
      TIME for a ``us`` suffix, BYTES for a byte unit suffix, VALUE otherwise.
    """
    stripped = text.strip()
    if stripped.endswith("us"):
        return TIME
    if stripped.endswith("B") or stripped.endswith("b"):
        return BYTES
    return VALUE


def parse_kind(text: str, kind: str | None = None) -> tuple[str, float]:
    """Parses a printed value of a known or detected kind.

    Args:
      text: the printed value.
      kind: TIME, BYTES or VALUE; detected from the suffix when None.

    Returns:
      ``(kind, value)`` with the value in base units.

    Raises:
      UnitParseError: when the text does not parse as that kind.
    """
    kind = kind or detect_kind(text)
    if kind == TIME:
        return kind, parse_time(text)
    if kind == BYTES:
        return kind, parse_bytes(text)
    return kind, parse_value(text)


def parse_rate(text: str, kind: str | None = None) -> tuple[str, float]:
    """Parses a ``ValueRate``/``Rate`` text such as ``778ms572.062us / second``.

    Args:
      text: the printed rate, with or without the `` / second`` tail.
      kind: the value kind, detected from the suffix when None.

    Returns:
      ``(kind, value per second)`` in base units.

    Raises:
      UnitParseError: when the text is not a rate.
    """
    stripped = text.strip()
    if stripped.endswith("/ second"):
        stripped = stripped[: -len("/ second")].rstrip()
    return parse_kind(stripped, kind)
