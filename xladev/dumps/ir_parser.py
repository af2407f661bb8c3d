"""IR text (`IR { %N = shape op(operands), xla_shape=..., attr=value ... }`) into a GraphSummary."""

from __future__ import annotations

import ast
import re

from xladev.graphdiff import GraphSummary, InputSummary, NodeSummary

_NODE = re.compile(r"^\s*(%\d+(?:\.\d+)?) = (.*)$")
_ARRAY = re.compile(r"^(\w+)\[([\d,]*)\]")
_META_KEYS = {"xla_shape", "location", "scope", "ROOT"}


def _split_top(text: str) -> list[str]:
    """Splits on ', ' outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _take_shape(text: str) -> tuple[str, str]:
    if text.startswith("("):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return text[: i + 1], text[i + 1:].lstrip()
    shape, _, rest = text.partition(" ")
    return shape, rest


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_ir(text: str, graph_hash: str = "") -> GraphSummary:
    """A GraphSummary from IR text; lines that are not nodes are ignored.

    Raises:
      ValueError: no node line found.
    """
    nodes, inputs, outputs = [], [], 0
    for line in text.splitlines():
        match = _NODE.match(line)
        if not match:
            continue
        shape, rest = _take_shape(match.group(2))
        op, _, rest = rest.partition("(")
        depth, end = 1, 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = i
                break
        attributes = _split_top(rest[end + 1:].lstrip(", "))
        constants, location = [], None
        for attribute in attributes:
            key, _, value = attribute.partition("=")
            if key == "ROOT":
                outputs += len(value.split(","))
            elif key == "location":
                location = value
            elif key not in _META_KEYS:
                constants.append((key, _value(value)))
        if op == "xla::device_data":
            array = _ARRAY.match(shape)
            dims = tuple(int(d) for d in array.group(2).split(",") if d) if array else ()
            inputs.append(InputSummary("data", dims, array.group(1) if array else shape, None))
        else:
            nodes.append(NodeSummary(op, tuple(constants), shape, location))
    if not nodes and not inputs:
        raise ValueError("no IR node lines (%N = ...) found")
    return GraphSummary(graph_hash, tuple(nodes), tuple(inputs), outputs)
