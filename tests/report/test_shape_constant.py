"""A constant that changes a shape is reported at the op it was passed to, with a fix that fits the op.

`tokens[:, :8 + step % 4]` bakes the slice's bound into the graph; the graph compiles where a value is read
(`if loss > 10`) and at the step's end, but the line to change is the slice's, and its fix is a fixed length
or padding: a slice bound cannot be a device tensor. A changing arithmetic scalar keeps its device-tensor fix.
"""

from __future__ import annotations

import pytest

from tests.report.helpers import run_script
from xladev import analysis
from xladev.report import load

SLICE = """
    import torch
    import xladev

    torch.manual_seed(0)
    device = xladev.device()
    tokens = torch.randn(4, 12).to(device)
    weight = torch.nn.Parameter(torch.ones(4, device=device))
    optimizer = torch.optim.SGD([weight], lr=0.01)
    for step in range(8):
        optimizer.zero_grad()
        x = tokens[:, :8 + step % 4]  # slice-line
        loss = (x * weight[:, None]).pow(2).mean()
        if loss > 10:  # read-line
            print("large loss")
        loss.backward()
        optimizer.step()
        xladev.mark_step()
"""


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    return run_script(tmp_path_factory.mktemp("shape_constant"), "train.py", SLICE)


@pytest.mark.parametrize("inputs", [["events"], ["debug"], ["metrics", "debug"]])
def test_the_slice_line_is_named_with_a_length_fix(sliced, inputs):
    report = load([str(getattr(sliced, name)) for name in inputs])
    found = [f for f in report.findings if f.rule == "recompilation"]
    assert found, [(f.rule, f.title) for f in report.findings]
    finding = found[0]
    assert sliced.line("slice-line") in finding.title and "aten::slice" in finding.title, finding.title
    assert sliced.line("read-line") not in finding.title, finding.title
    assert "fixed length" in finding.fix and "pad" in finding.fix.lower(), finding.fix
    assert "device tensor" not in finding.fix.replace("cannot be a device tensor", ""), finding.fix


def test_the_debug_block_names_the_op_line_and_puts_it_before_the_backward_sizes(sliced):
    changes = [line for line in sliced.debug.read_text().splitlines() if "baked into" in line]
    assert changes, "no recompilation cause in the debug log"
    slice_at = f"aten::slice at <module>@{sliced.line('slice-line')}"
    assert all(slice_at in line for line in changes if "aten::slice" in line), changes
    # Where both changed in one graph, the slice (the user's line) comes before the backward's expand sizes.
    causes = [block.split("Graph Info")[0] for block in sliced.debug.read_text().split("Recompilation Cause")[1:]]
    both = [cause for cause in causes if "aten::slice" in cause and "aten::expand" in cause]
    assert both and all(cause.index("aten::slice") < cause.index("aten::expand") for cause in both)


@pytest.mark.parametrize("op,fits", [("aten::slice", "fixed length"), ("aten::view", "fixed length"),
                                     ("aten::mul", "device tensors"), ("aten::add", "device tensors")])
def test_the_fix_fits_the_op(op, fits):
    repeated = analysis.RepeatedRecompiles(site="train.py:9", count=3, kind="constant",
                                        example=f"constant baked into {op} changed: 2 -> 3", op=op,
                                        triggers=("train.py:11",))
    finding = analysis.recompilation_finding(steps=8, compiles=5, compiles_at_warmup=None, repeated=repeated)
    assert fits in finding.fix, (op, finding.fix)
    assert "train.py:9" in finding.title and op in finding.title



# The same loop without the read: one graph a step, four slice lengths, so two warm-up steps after the second
# compile a graph of the same size as the step before (the event log: 2 recompiles for a changed constant).
SLICE_NO_READ = SLICE.replace("""        if loss > 10:  # read-line
            print("large loss")
""", "")


@pytest.mark.parametrize("script", ["with a read", "without"])
def test_a_metrics_file_alone_counts_the_same_recompiles_and_says_it_cannot_tell_a_shape_from_a_constant(
        sliced, tmp_path, script):
    # Its per-step reports show warm-up steps compiling graphs the size of the step before's; which input changed
    # is not in it. The count is the event log's.
    run = sliced if script == "with a read" else run_script(tmp_path, "train.py", SLICE_NO_READ)
    events = next(f for f in load([str(run.events)]).findings if f.rule == "recompilation")
    found = [f for f in load([str(run.metrics)]).findings if f.rule == "recompilation"]
    assert found, [(f.rule, f.title) for f in load([str(run.metrics)]).findings]
    assert found[0].numbers["repeated_recompiles"] == events.numbers["repeated_recompiles"], (found[0], events)
    assert "shape or constant" in found[0].title, found[0].title
