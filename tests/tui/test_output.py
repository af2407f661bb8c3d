"""The log pane in arrival order, and the child's output kept next to its log for later replays."""

from __future__ import annotations

import os
import textwrap

from textual.widgets import Static

from tests.tui.helpers import async_test, plain, wait_for
from xladev_tui import run_model as m
from xladev_tui.app import XladevTUI
from xladev_tui.run_model import RunModel
from xladev_tui.sources import ChildProcessSource, FileTailSource, output_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A job that prints, writes a record the UI turns into a notice, prints again and dies, with pauses
# so that each line reaches the UI in a read of its own. It writes its log with the schema's records.
CHILD = textwrap.dedent("""
    import os, socket, sys, time
    from xladev.schema import records as rec
    log = open(os.environ["XLADEV_EVENT_LOG"], "w")
    def write(record):
        log.write(rec.dumps(record) + "\\n"); log.flush()
    write(rec.Header(command="python job.py", pid=os.getpid(), host=socket.gethostname()))
    print("before the failure", flush=True)
    time.sleep(0.3)
    write(rec.CompileFailed(t=5, step=0, hash="ab" * 16, message="bad op", hlo_path="/tmp/ab.hlo"))
    time.sleep(0.3)
    print("warning: giving up", file=sys.stderr, flush=True)
    time.sleep(0.3)
    print("after the failure", flush=True)
    sys.exit(3)
""")
OUTPUT = ["before the failure", "[stderr] warning: giving up", "after the failure"]


def _run_child(tmp_path) -> tuple[RunModel, str]:
    script = tmp_path / "job.py"
    script.write_text(CHILD)
    log = str(tmp_path / "run.events.jsonl")
    source = ChildProcessSource(["python", str(script)], log_path=log, env={"PYTHONPATH": ROOT})
    model = RunModel(source.label)
    source.start()
    try:
        for _ in range(400):
            model.apply_all(source.read(0.05))
            if model.state == m.EXITED:
                break
    finally:
        source.stop()
    return model, log


def test_log_pane_lines_come_in_arrival_order_and_the_output_is_kept(tmp_path):
    model, log = _run_child(tmp_path)
    lines = model.snapshot().log
    failure = next(i for i, line in enumerate(lines) if "failed to compile: bad op" in line)
    order = [lines.index(OUTPUT[0]), failure, lines.index(OUTPUT[1]), lines.index(OUTPUT[2])]
    assert order == sorted(order), lines
    assert model.snapshot().state_text == "exited with code 3"
    with open(output_path(log)) as fh:
        assert fh.read().splitlines() == OUTPUT  # <log>.stdout: as the pane showed it


@async_test
async def test_a_replay_shows_the_kept_output_and_how_the_job_ended(tmp_path):
    _, log = _run_child(tmp_path)
    app = XladevTUI(FileTailSource(log, idle_before_check=0.0))
    async with app.run_test(size=(100, 30)) as pilot:
        # No end record and the writer's pid is gone: disconnected, with its last output.
        await wait_for(pilot, lambda: app.shown.state == m.DISCONNECTED)
        snap = app.shown
        assert [line for line in snap.log if line in OUTPUT] == OUTPUT and snap.output_lines == 3
        notice = plain(app.query_one("#notice", Static).content)
        assert "Its last output:" in notice and "after the failure" in notice
        await pilot.press("4")
        pane = app.query_one("#log-pane")
        assert [line for line in pane.lines if line in OUTPUT] == OUTPUT


def test_a_follower_reads_the_output_as_it_grows(tmp_path):
    log = tmp_path / "run.events.jsonl"
    log.write_text('{"type":"header","schema":"xladev.events/1","version":1,"pid":null}\n')
    source = FileTailSource(str(log), check_writer=False)
    source.start()
    assert [item for item in source.read(0.01) if item[0] == m.OUTPUT] == []  # no output file: none
    with open(output_path(str(log)), "w") as fh:
        fh.write("epoch 1\n[stderr] slow\npartial")
        fh.flush()
        items = [item for item in source.read(0.05) if item[0] == m.OUTPUT]
        assert items == [(m.OUTPUT, "stdout", "epoch 1"), (m.OUTPUT, "stderr", "slow")]  # whole lines only
        fh.write(" line\n")
    assert [item for item in source.read(0.05) if item[0] == m.OUTPUT] == [(m.OUTPUT, "stdout", "partial line")]
    source.stop()
