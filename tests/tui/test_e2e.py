"""End to end: `xladev tui -- python train.py` on a real short training with a shape change, headless."""

from __future__ import annotations

import os
import textwrap

from textual.widgets import DataTable, Static

from tests.tui.helpers import async_test, option_texts, wait_for
from xladev_tui import run_model as m
from xladev_tui.app import XladevTUI
from xladev_tui.sources import ChildProcessSource, output_path
from xladev.report import load
from xladev.cli import tui as tui_command
from xladev.cli.main import _build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn
    import xladev

    steps = int(sys.argv[sys.argv.index("--steps") + 1])
    dev = xladev.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        rows = 4 if step < 3 else 6          # the batch grows at step 3: one recompilation
        x = torch.randn(rows, 8).to(dev)
        y = torch.randn(rows, 2).to(dev)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        xladev.mark_step()                    # MARK_STEP_LINE
        print(f"step {step} loss {loss.item():.4f}", flush=True)
""")


def _args(argv):
    parser, _ = _build_parser(argv)
    return parser.parse_args(argv)


@async_test
async def test_tui_runs_a_real_training_to_exit_0(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    mark_line = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "MARK_STEP_LINE" in line)
    args = _args(["tui", "--log", str(tmp_path / "run.jsonl"), "--", "python", str(script), "--steps", "5"])
    source = tui_command.make_source(args)
    assert isinstance(source, ChildProcessSource) and source.argv[2:] == ["--steps", "5"]
    source.env["PYTHONPATH"] = ROOT
    app = XladevTUI(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.shown.state == m.EXITED, timeout=120, step=0.1)
        snap = app.shown
        assert snap.state_text == "exited 0"
        assert "exited 0" in str(app.query_one("#status-line", Static).render())
        assert snap.steps == 5 and snap.last_step == 4
        assert snap.compiles >= 2
        (alert,) = [a for a in snap.alerts if a.site.endswith(f"train.py:{mark_line} (<module>)")]
        assert alert.step == 3
        assert any("shape f32[4,8] -> f32[6,8]" in change and change.startswith("input ") for change in alert.changes)
        alerts_text = "\n".join(option_texts(app, "#alerts"))
        assert "input" in alerts_text and "f32[4,8] -> f32[6,8]" in alerts_text
        assert any(line.startswith("step 4 loss") for line in snap.log)  # the child's output
        transfers = app.query_one("#transfers", DataTable)
        assert transfers.get_row_at(0)[0] == ".item()" and transfers.get_row_at(0)[2] == "5"
        # The report's diagnosis of the same log, shown as it is; every compile_start has its compile.
        await wait_for(pilot, lambda: app.shown.diagnosis.records == app.shown.records, timeout=10)
        report = load(source.log_path)
        assert [(f.rule, f.title, f.cost) for f in app.shown.diagnosis.findings] == \
            [(f.rule, f.title, f.cost_text()) for f in report.findings]
        assert app.shown.diagnosis.verdict == report.verdict() and app.shown.compiling == ()
        with open(source.log_path) as fh:
            assert sum('"type":"compile_start"' in line for line in fh) == snap.compiles
        with open(output_path(source.log_path)) as fh:  # the output, kept for a replay
            assert [line for line in fh.read().splitlines() if line.startswith("step ")] == \
                [line for line in snap.log if line.startswith("step ")]
        await pilot.press("q")  # the child is gone: quits without asking
        await pilot.pause(0.05)
    assert not app.is_running


def test_not_an_event_log_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert main(["tui", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xladev tui: error: ") and "is not an xladev event log" in err
    assert "Traceback" not in err
    assert main(["tui"]) == 2
