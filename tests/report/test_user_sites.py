"""Every site the runtime records and the report names is the user's line, never a frame of xladev or torch.

Backward ops run on autograd's device thread, whose stack holds only torch's and xladev's frames: a CPU
fallback in the backward pass and every torch.compile backward graph are the user's `loss.backward()`.
"""

from __future__ import annotations

import json

import pytest

from tests.report.helpers import compiled_model_script, run_script
from xladev.events import Frame
from xladev.report import load
from xladev.schema import sites

BACKWARD = compiled_model_script(4, 3, 5, """
    for step in range(2):
        optimizer.zero_grad()
        out = compiled(x)  # compiled-forward
        positive = out[out > 0]  # mask-select
        loss = out.pow(2).mean() + positive.sum()
        loss.backward()  # backward-line
        optimizer.step()
        xladev.mark_step()  # step-end
    print(loss.item())
""")


@pytest.fixture(scope="module")
def backward_run(tmp_path_factory):
    return run_script(tmp_path_factory.mktemp("sites"), "train.py", BACKWARD)


def test_every_recorded_site_is_a_line_of_the_script(backward_run):
    records = [json.loads(line) for line in backward_run.events.read_text().splitlines()]
    located = [r for r in records if r.get("site")]
    assert located
    outside = sorted({r["site"] for r in located if not r["site"].startswith(str(backward_run.script))})
    assert not outside, outside
    # The backward pass (its fallback index_put and the compiled backward graph) is the backward() line's.
    backward = f"{backward_run.script}:{backward_run.line('backward-line').split(':')[1]}"
    kinds = {r["type"] for r in located if r["site"].startswith(backward + " ")}
    assert {"fallback", "compile"} <= kinds, kinds


@pytest.mark.parametrize("input_name", ["events", "debug"])
def test_the_report_names_the_backward_line_not_torch_or_xladev(backward_run, input_name):
    report = load(str(getattr(backward_run, input_name)))
    named = " ".join(" ".join([f.title, f.subject, *f.evidence]) for f in report.findings)
    named += " ".join(map(str, report.compile_sites["site"])) if len(report.compile_sites) else ""
    for internal in ("dispatch.py", "function.py", "apply_boxed", "xladev/runtime", "site-packages"):
        assert internal not in named, (internal, named)
    assert backward_run.line("backward-line") in named, named


def test_a_stack_without_a_user_frame_has_no_site():
    """A stack of library frames alone names no site (the report says unknown), never its outermost frame;
    code run from a string (`python -c`, a notebook) is the user's."""
    torch_frame = Frame("apply_boxed", "/venv/lib/python3.11/site-packages/torch/autograd/function.py", 333)
    xladev_frame = Frame("torch_dispatch", sites.__file__.replace("schema/sites.py", "runtime/record/dispatch.py"), 225)
    assert sites.site_of((xladev_frame, torch_frame)) == sites.UNKNOWN_SITE
    assert sites.site_of((xladev_frame, Frame("<module>", "<string>", 3))) == "<string>:3 (<module>)"
