"""The advice speaks the run's own API, and every input combination keeps the user's lines.

The same loop (a `.item()` every step) runs for real twice: written for xladev, and written for PyTorch/XLA
under `xladev run` (torch_xla is xladev's alias). Each output says which API the script used: the event
log's header, the PT_XLA_DEBUG summary, and the metrics' RegisterXLAFunctions counter (as PyTorch/XLA's own
reports count its import). PyTorch/XLA's own outputs are the fixtures.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.report.helpers import compiled_model_script, fixture_path, run_script
from xladev import analysis
from xladev.report import load
from xladev.report.run_findings import run_stack

BODY = """
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8).to(device), torch.randint(0, 2, (4,)).to(device)
    for step in range(12):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        print(step, loss.item())  # item-line
        loss.backward()
        optimizer.step()
        {barrier}
"""
XLADEV = "import torch\nimport xladev\ndevice = xladev.device()\n" + textwrap.dedent(BODY).format(
    barrier="xladev.mark_step()")
TORCH_XLA = ("import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\ndevice = torch_xla.device()\n"
             + textwrap.dedent(BODY).format(barrier="torch_xla.sync()"))
INPUTS = [["events"], ["debug"], ["metrics"], ["metrics", "debug"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    return {"xladev": run_script(folder, "xladev_train.py", XLADEV),
            "torch_xla": run_script(folder, "alias_train.py", TORCH_XLA, alias=True)}


def _transfers(report) -> analysis.Finding:
    found = [f for f in report.findings if f.rule == "host-transfers"]
    assert found, [(f.rule, f.title) for f in report.findings]
    return found[0]


@pytest.mark.parametrize("api", ["xladev", "torch_xla"])
@pytest.mark.parametrize("inputs", INPUTS)
def test_the_advice_uses_the_scripts_api(runs, api, inputs):
    run = runs[api]
    report = load([str(getattr(run, name)) for name in inputs])
    assert run_stack(report.sources) == api
    fix = _transfers(report).fix
    if api == "xladev":
        assert "xladev.add_step_closure" in fix and "xm." not in fix, fix
    else:
        assert "xm.add_step_closure" in fix and "xladev" not in fix, fix
    cache = analysis.in_names_of(analysis.compile_time_finding(compile_ns=1e9, share=0.6, compiles=2), api).fix
    assert ("torch_xla.runtime.initialize_cache" in cache) == (api == "torch_xla"), cache


def test_each_output_says_which_api(runs):
    for api, run in runs.items():
        header = json.loads(run.events.read_text().splitlines()[0])
        assert header["api"] == api
        assert f"xladev summary: API: {api}" in run.debug.read_text()
        last = run.metrics.read_text().rsplit("[MetricsData", 1)[1]
        assert (f"Counter: {analysis.ALIAS_COUNTER}\n  Value: 1" in last) == (api == "torch_xla"), api


def test_pytorch_xla_outputs_get_its_names():
    for kind in ("debug", "metrics", "stdout"):
        report = load(str(fixture_path(f"item_every_step.{kind}.txt")))
        assert run_stack(report.sources) == "torch_xla"
        fix = _transfers(report).fix
        assert "xladev" not in fix, (kind, fix)
        if kind != "debug":  # its debug log does not say the read was an .item(): a generic fix, with no API in it
            assert "xm.add_step_closure" in fix, (kind, fix)


def test_torch_compile_advice_in_xladev_names():
    finding = analysis.graph_break_finding(breaks=[("train.py:3", "dynamo", "print", 2)], steps=4)
    assert "xm.add_step_closure" not in analysis.in_names_of(finding, "xladev").fix
    assert "xladev.add_step_closure" in finding.fix


@pytest.mark.parametrize("inputs", INPUTS)
def test_every_input_combination_names_the_read_line(runs, inputs):
    """`xladev report metrics.txt debug.txt` keeps the `.item() at train.py:N` line that the debug log alone
    gives; the metrics report alone has no lines, and says nothing of them."""
    run = runs["xladev"]
    evidence = " ".join(_transfers(load([str(getattr(run, name)) for name in inputs])).evidence)
    if inputs != ["metrics"]:
        assert f".item() at {run.line('item-line')}" in evidence, evidence


COMPILED = compiled_model_script(8, 2, 4, """
    for step in range(6):
        optimizer.zero_grad()
        loss = compiled(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        xladev.mark_step()
        history = loss.detach().cpu()  # read-line
""")


def test_a_torch_compile_report_does_not_send_to_pt_xla_debug_for_a_line_it_holds(tmp_path):
    run = run_script(tmp_path, "compiled.py", COMPILED)
    for name in ("events", "debug"):
        finding = _transfers(load(str(getattr(run, name))))
        assert "PT_XLA_DEBUG_LEVEL" not in finding.fix, (name, finding.fix)
        assert f".cpu() at {run.line('read-line')}" in " ".join(finding.evidence), (name, finding.evidence)
