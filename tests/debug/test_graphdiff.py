"""The pure graph diff on hand-made summaries, and which frames count as the user's."""

from __future__ import annotations

import os

from xladev.graphdiff import GraphSummary, InputSummary, NodeSummary, closest, differences


def _graph(inputs, ops=("aten::mm",), constants=None, outputs=1, h="h"):
    nodes = tuple(NodeSummary(op, (constants or {}).get(op, ()), "f32[2]{0}", None) for op in ops)
    return GraphSummary(h, nodes, tuple(InputSummary("data", s, "f32", None) for s in inputs), outputs)


def test_input_dimension_change_is_the_root_cause():
    lines = differences(_graph([(8, 4), (4, 4)]), _graph([(9, 4), (4, 4)]))
    assert lines == ["input 0: shape f32[8,4] -> f32[9,4] (dim 0: 8 -> 9)"]


def test_different_input_counts_report_added_and_removed_shapes_not_positions():
    # Regression: pairing inputs by position when their number changed gave a screen of false changes.
    old = _graph([(64,), (64, 64), (8, 32)])
    new = _graph([(64,), (64,), (64, 64), (64, 64), (8, 32)])
    lines = differences(old, new)
    assert lines[0] == "number of graph inputs changed: 3 -> 5"
    assert "inputs added: f32[64], f32[64,64]" in lines
    assert not any(line.startswith("input ") for line in lines)


def test_constants_ops_and_outputs():
    old = _graph([(2,)], ops=("aten::mul", "aten::add"), constants={"aten::add": (("alpha", 1),)})
    new = _graph([(2,)], ops=("aten::mul", "aten::add"), constants={"aten::add": (("alpha", 2),)}, outputs=2)
    assert differences(old, new) == ["number of graph outputs changed: 1 -> 2",
                                     "constant alpha baked into aten::add changed: 1 -> 2"]
    grown = _graph([(2,)], ops=("aten::mul", "aten::add", "aten::tanh"))
    assert "new graph has 1 more op(s), starting with aten::tanh" in differences(old, grown)[0]
    other = _graph([(2,)], ops=("aten::mul", "aten::sub"))
    assert differences(old, other)[0] == "op sequence differs at node 1: aten::add -> aten::sub"


def test_closest_prefers_the_longest_common_op_prefix():
    a = _graph([(2,)], ops=("aten::mul", "aten::add"), h="a")
    b = _graph([(2,)], ops=("aten::sin",), h="b")
    new = _graph([(2,)], ops=("aten::mul", "aten::add", "aten::exp"))
    assert closest([a, b], new).hash == "a"


def test_library_frames_are_recognised_through_dotdot_paths():
    # Regression: a sys.path entry like `examples/..` made xladev's own frames look like user code.
    import xladev.runtime.execute.transfers as transfers
    from xladev.runtime.graph.stack import is_library_frame

    twisted = os.path.join(os.path.dirname(transfers.__file__), "..", "execute", "transfers.py")
    assert ".." in twisted and is_library_frame(twisted)
    assert not is_library_frame(os.path.abspath(__file__))
